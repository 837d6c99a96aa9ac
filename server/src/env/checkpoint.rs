//! Checkpoints: an env's state as its seed and action log, saved and restored by
//! replay on a fresh desktop.

use super::*;
use deskgym_worker::Pace;

/// A saved state: what is needed to rebuild it by replay.
#[derive(Debug)]
pub(crate) struct Checkpoint {
    /// Opaque id.
    pub id: String,
    /// The owning pool (its spec is what a rebuild needs).
    pub pool: Arc<PoolState>,
    /// The env it was saved from.
    pub env_id: String,
    /// The latest earlier checkpoint of its pool that this one extends
    /// ([`Checkpoint::extends`]), set by the manager when it is saved.
    pub parent: Option<String>,
    episode: Episode,
    /// What the desktop's clock read when the checkpoint's frame was taken (0: no
    /// clock): a rebuild moves its clock there before its last frame (decision 199).
    clock_ms: u64,
    /// Approximate bytes held (the action log), counted against
    /// `Limits::max_checkpoint_bytes`.
    bytes: u64,
}

impl Checkpoint {
    /// Approximate bytes this checkpoint holds.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Number of actions a rebuild replays.
    pub(crate) fn actions_len(&self) -> usize {
        self.episode.actions.len()
    }

    /// How long the saved run's steps took (action, settle, capture), all together.
    pub(crate) fn original_time(&self) -> std::time::Duration {
        let ms: u64 = self.episode.seen.iter().map(|s| u64::from(s.ms)).sum();
        std::time::Duration::from_millis(ms)
    }

    /// The seed of the saved episode.
    pub(crate) fn seed(&self) -> u64 {
        self.episode.seed
    }

    /// Steps taken in the saved episode.
    pub(crate) fn step_index(&self) -> u32 {
        self.episode.step_index
    }

    /// The frame hash at save time (Save refreshes a stale one before it builds this).
    pub(crate) fn frame_hash(&self) -> u128 {
        self.episode.frame_hash.unwrap_or_default()
    }

    /// True when this checkpoint continues `earlier`'s episode: same pool and seed, and
    /// `earlier`'s actions are the first of this one's. A desktop at `earlier`'s state
    /// then reaches this one by replaying only the actions after them.
    pub(crate) fn extends(&self, earlier: &Checkpoint) -> bool {
        let (mine, theirs) = (&self.episode.actions, &earlier.episode.actions);
        self.pool.id == earlier.pool.id
            && self.episode.seed == earlier.episode.seed
            && theirs.len() <= mine.len()
            && (Arc::ptr_eq(mine, theirs) || mine[..theirs.len()] == theirs[..])
    }

    /// Stops `d`'s clock where this checkpoint was saved until a replay moves it on
    /// (decision 213): a replica parked here waits for the original's next steps,
    /// which came right after the save, however long it waits.
    pub(crate) fn hold_clock_at_save(&self, d: &mut Box<dyn Desktop>) {
        if self.clock_ms != 0 {
            d.hold_clock(Some(self.clock_ms));
        }
    }

    /// Blocking: brings `d` to this checkpoint's state and takes its last frame. From
    /// `from` (a parked replica: the state after this checkpoint's first `from.step`
    /// actions) only the actions after it are replayed, fast and to the end
    /// ([`Pace::FastToEnd`]); else, or when that replay does not end on the
    /// checkpoint's frame, the desktop is reset and every action replayed (keys in a
    /// run first unsettled, then again settled where that differed, as
    /// [`Env::restore`] does). `on_reset` is told of each reset (a sandbox's agent
    /// socket moves).
    pub(crate) fn rebuild(
        &self,
        d: &mut Box<dyn Desktop>,
        sandboxed: bool,
        from: Option<Start>,
        mut on_reset: impl FnMut(&dyn Desktop),
    ) -> Result<Rebuilt, EnvError> {
        let (actions, seen) = (&self.episode.actions, &self.episode.seen);
        let want = self.frame_hash();
        // A replica's apps start on the original's clock (decision 199); a parked one
        // runs on since its own start, which was the original's too.
        let clock = (self.episode.clock_ms != 0).then_some(self.episode.clock_ms);
        let (step, out) = match from {
            Some(s) if s.step <= actions.len() => (s.step, s.out),
            _ => {
                d.start_clock(clock);
                let out = d.reset(self.episode.seed)?;
                on_reset(&**d);
                (0, out)
            }
        };
        let rest = seen.get(step..).unwrap_or_default();
        // A parked replica's few actions go to the end: frames missed on the way are
        // often ones the original caught mid-draw, and its final frame tells, where
        // stopping would cost a replay of the whole episode (decision 214).
        let pace = if step > 0 {
            Pace::FastToEnd
        } else {
            Pace::Fast
        };
        let fast = d.replay(&actions[step..], rest, pace, out)?;
        let mut frame = None;
        if !fast.stopped {
            at_save_time(d, self)?;
            frame = Some(final_frame(d, want, sandboxed)?);
        }
        // A parked replica that ended elsewhere is rebuilt as a fresh one is, from a
        // reset (fast first: a fresh replay may still land where the original did).
        if step > 0 && frame.as_ref().is_some_and(|f| f.hash != want) {
            tracing::debug!(
                unsettled = fast.unsettled,
                missed = fast.missed,
                from_step = step,
                "a parked replica's replay differed; rebuilding it from a reset"
            );
            let (waited, idle) = (fast.waited, fast.idle_waited);
            let mut fresh = self.rebuild(d, sandboxed, None, on_reset)?;
            fresh.replayed.waited += waited;
            fresh.replayed.idle_waited += idle;
            return Ok(fresh);
        }
        let again = frame
            .as_ref()
            .is_none_or(|f| f.hash != want && (fast.unsettled > 0 || sandboxed));
        crate::metrics::METRICS.replay(fast.unsettled, again);
        let mut replayed = fast;
        replayed.last_on_path = replayed.last_on_path.map(|i| i + step);
        let mut from_step = step;
        if again {
            tracing::debug!(
                unsettled = replayed.unsettled,
                stopped = replayed.stopped,
                from_step,
                "the fast replay differed; replaying settled"
            );
            d.start_clock(clock);
            let first = d.reset(self.episode.seed)?;
            on_reset(&**d);
            let (waited, idle) = (replayed.waited, replayed.idle_waited);
            replayed = d.replay(actions, seen, Pace::Settled, first)?;
            replayed.waited += waited;
            replayed.idle_waited += idle;
            at_save_time(d, self)?;
            frame = Some(final_frame(d, want, sandboxed)?);
            from_step = 0;
        }
        let frame = frame.ok_or(EnvError::Bug("a replay ended without a frame"))?;
        Ok(Rebuilt {
            replayed,
            again,
            frame,
            from_step,
        })
    }
}

/// Where a rebuild starts when its desktop is a parked replica: the state after the
/// checkpoint's first `step` actions, the last of which ended on `out`.
#[derive(Clone, Debug)]
pub(crate) struct Start {
    /// Actions already applied.
    pub step: usize,
    /// The last one's outcome.
    pub out: deskgym_worker::Outcome,
}

/// What [`Checkpoint::rebuild`] did.
#[derive(Debug)]
pub(crate) struct Rebuilt {
    /// The replay that produced the state.
    pub replayed: deskgym_worker::Replayed,
    /// The first replay differed, so it was done again settled from a reset.
    pub again: bool,
    /// The last frame.
    pub frame: Frame,
    /// The step the final replay began at (0: a reset).
    pub from_step: usize,
}

/// On a sandboxed desktop, how long the screen must be still (and the most to wait
/// for it) before a checkpoint's frame or a rebuild's is taken: apps draw on their own
/// time after a step's settle (a terminal echoes a key after the `damage` quiet
/// window), so both frames are of the settled screen, not of one moment after a step.
/// A second: LibreOffice Impress draws its sidebar's state ~0.5 s after its status
/// bar's, both on timers after the last key (decision 210).
const STILL: (u32, u32) = (1000, 4000);

/// Approximate heap bytes of an action log.
fn log_bytes(actions: &[Action]) -> u64 {
    let text: usize = actions
        .iter()
        .map(|a| match a {
            Action::TypeText(t) | Action::Key(t) => t.len(),
            _ => 0,
        })
        .sum();
    // With each action, the hash of the frame it left (16 bytes).
    (std::mem::size_of_val(actions) + actions.len() * 16 + text) as u64
}

/// Waits for a sandboxed desktop's screen to be still ([`STILL`]).
fn still(d: &mut Box<dyn Desktop>, sandboxed: bool) -> Result<(), DesktopError> {
    if sandboxed {
        d.quiesce(STILL.0, STILL.1)?;
    }
    Ok(())
}

/// Moves a rebuild's clock to where the original's stood when the checkpoint's frame
/// was taken (a clock that reads later already stays).
fn at_save_time(d: &mut Box<dyn Desktop>, cp: &Checkpoint) -> Result<(), DesktopError> {
    if cp.clock_ms != 0 {
        d.advance_clock(cp.clock_ms)?;
    }
    Ok(())
}

/// A rebuild's last frame: at once when it is already the checkpoint's (a hash match
/// says the replay is done), else once the screen is still ([`STILL`]), as the
/// checkpoint's was taken.
fn final_frame(d: &mut Box<dyn Desktop>, want: u128, sandboxed: bool) -> Result<Frame, EnvError> {
    let frame = d.capture()?;
    if frame.hash == want {
        return Ok(frame);
    }
    still(d, sandboxed)?;
    Ok(d.capture()?)
}

impl Env {
    /// Waits for a sandboxed desktop's screen to be still ([`STILL`]).
    fn still(&self, d: &mut Box<dyn Desktop>) -> Result<(), DesktopError> {
        still(d, self.pool.spec.profile.sandboxed())
    }

    /// Blocking: snapshots what is needed to rebuild the current state.
    pub(crate) fn save(&self, id: String) -> Result<Checkpoint, EnvError> {
        let _running = self.enter();
        let mut guard = lock(&self.state);
        let s = &mut *guard;
        if s.episode.is_none() {
            return Err(EnvError::NoEpisode {
                env: self.id.clone(),
            });
        }
        // An action was applied but the capture after it failed, or apps draw on their
        // own time: capture now, so the checkpoint's hash is of the screen its replay
        // rebuilds.
        let sandboxed = self.pool.spec.profile.sandboxed();
        if sandboxed || s.episode.as_ref().is_some_and(|e| e.frame_hash.is_none()) {
            let Some(d) = s.desktop.as_mut() else {
                return Err(EnvError::NoDesktop {
                    env: self.id.clone(),
                });
            };
            let hash = d
                .check_alive()
                .and_then(|()| self.still(d))
                .and_then(|()| self.capture(d));
            match hash {
                Ok(f) => {
                    if let Some(ep) = s.episode.as_mut() {
                        ep.frame_hash = Some(f.hash);
                    }
                }
                Err(e) => {
                    let err = EnvError::from(e);
                    self.on_error(s, &err);
                    return Err(err);
                }
            }
        }
        let episode = s.episode.clone().ok_or_else(|| EnvError::NoEpisode {
            env: self.id.clone(),
        })?;
        let clock_ms = s.desktop.as_ref().and_then(|d| d.clock_ms()).unwrap_or(0);
        Ok(Checkpoint {
            id,
            clock_ms,
            pool: self.pool.clone(),
            env_id: self.id.clone(),
            parent: None,
            bytes: log_bytes(&episode.actions),
            episode,
        })
    }

    /// Blocking: rebuilds `cp` on this env by replaying its actions on a freshly reset
    /// desktop, and reports whether the result looks exactly like the checkpoint.
    pub(crate) fn restore(
        &self,
        cache: &FrameCache,
        cp: &Checkpoint,
        opts: &ObsOptions,
    ) -> Result<Restored, EnvError> {
        self.restore_from(cache, cp, opts, None)
    }

    /// Blocking: [`Env::restore`] on a parked replica of `cp`'s pool (of `cp`, or of a
    /// checkpoint it extends), which becomes this env's desktop; the env's own desktop
    /// is stopped.
    pub(crate) fn restore_parked(
        &self,
        cache: &FrameCache,
        cp: &Checkpoint,
        opts: &ObsOptions,
        replica: crate::pool_state::ParkedReplica,
    ) -> Result<Restored, EnvError> {
        if self.pool.id != cp.pool.id {
            return Err(EnvError::Bug("a parked replica of another pool"));
        }
        let old = {
            let mut s = lock(&self.state);
            let old = self.drop_desktop(&mut s);
            self.set_desktop(&mut s, replica.desktop);
            old
        };
        if let Some(old) = old {
            stop_in_background(old);
        }
        let from = Start {
            step: replica.steps,
            out: replica.out,
        };
        self.restore_from(cache, cp, opts, Some(from))
    }

    /// Blocking: [`Env::restore`], on a desktop already at the state after `cp`'s
    /// first `from.step` actions when `from` is set (a parked replica now installed as
    /// this env's desktop): only the rest are replayed.
    pub(crate) fn restore_from(
        &self,
        cache: &FrameCache,
        cp: &Checkpoint,
        opts: &ObsOptions,
        from: Option<Start>,
    ) -> Result<Restored, EnvError> {
        let _running = self.enter();
        let started = Instant::now();
        let (ours, theirs) = (&self.pool.spec, &cp.pool.spec);
        if ours.task.id != theirs.task.id || ours.screen != theirs.screen {
            return Err(EnvError::Incompatible(format!(
                "checkpoint {:?} is of task {} at {}x{}, env {:?} runs {} at {}x{}",
                cp.id,
                theirs.task.id,
                theirs.screen.width,
                theirs.screen.height,
                self.id,
                ours.task.id,
                ours.screen.width,
                ours.screen.height
            )));
        }
        let enc = encoding_or(ours, opts.encoding)?;
        let mut guard = lock(&self.state);
        let s = &mut *guard;
        let result = (|| {
            // A parked replica is not swapped for a spare: its state is the point.
            let d = self.live_desktop(s, from.is_none())?;
            // Keys typed in a run first go without a settle between them. On a
            // sandboxed desktop a replay that leaves the original's path (its frames),
            // or ends on another frame than the checkpoint's, is done again, every
            // action settled and paced to the screens the agent saw (apps there answer
            // at their own speed); elsewhere only a shortcut can differ.
            let sandboxed = self.pool.spec.profile.sandboxed();
            let r = cp.rebuild(d, sandboxed, from, |d| self.note_socket(Some(d)))?;
            Ok::<_, EnvError>((r, d.pointer(), d.display()))
        })();
        let (rebuilt, pointer, display) = result.inspect_err(|e| {
            self.on_error(s, e);
            s.episode = None;
        })?;
        let Rebuilt {
            replayed,
            again,
            frame,
            from_step,
        } = rebuilt;
        let out = replayed.outcome;
        let exact = frame.hash == cp.frame_hash();
        let path = ReplayPath {
            checked: replayed.checked as u32,
            missed: replayed.missed as u32,
            left_at_step: if exact {
                0
            } else {
                replayed.last_on_path.map_or(1, |i| i as u32 + 2)
            },
            settled_again: again,
            waited_ms: millis(replayed.waited),
            from_step: from_step as u32,
            clock_late: replayed.clock_late as u32,
            idle_ms: millis(replayed.idle_waited),
        };
        if !exact {
            tracing::warn!(env = %self.id, checkpoint = %cp.id, left_at_step = path.left_at_step, "rebuild diverged from its checkpoint");
        }
        self.end_episode(s, "restore");
        s.episodes += 1;
        (s.seed_base, s.seed_k) = (cp.episode.seed, 1);
        let log = EpisodeLog {
            ret: cp.episode.log.ret,
            ..self.new_log(s.episodes)
        };
        let ep = Episode {
            number: s.episodes,
            frame_hash: Some(frame.hash),
            log,
            recorded: false,
            verdict: None,
            ..cp.episode.clone()
        };
        self.event("restore", || {
            serde_json::json!({
                "checkpoint": cp.id, "episode_id": ep.log.episode_id, "exact": exact,
                "replayed": if again { "settled" } else { "fast" },
                "frame_hash": deskgym_worker::hash_hex(frame.hash),
                "left_at_step": path.left_at_step, "missed": path.missed,
                "replayed_from_step": path.from_step,
            })
        });
        let observation = self.observation(
            cache,
            frame,
            pointer,
            out.settle,
            enc,
            &opts.known,
            Some(&ep.log.episode_id),
        )?;
        let info = self.info(&ep, started, Some(display));
        s.episode = Some(ep);
        Ok(Restored {
            obs: observation,
            info,
            exact,
            expected_hash: cp.frame_hash(),
            path,
        })
    }
}
