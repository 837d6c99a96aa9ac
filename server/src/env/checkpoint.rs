//! Checkpoints: an env's state as its seed and action log, saved and restored by
//! replay on a fresh desktop.

use super::*;

/// A saved state: what is needed to rebuild it by replay.
#[derive(Debug)]
pub(crate) struct Checkpoint {
    /// Opaque id.
    pub id: String,
    /// The owning pool (its spec is what a rebuild needs).
    pub pool: Arc<PoolState>,
    /// The env it was saved from.
    pub env_id: String,
    episode: Episode,
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
}

/// On a sandboxed desktop, how long the screen must be still (and the most to wait
/// for it) before a checkpoint's frame or a rebuild's is taken: apps draw on their own
/// time after a step's settle (a terminal echoes a key after the `damage` quiet
/// window), so both frames are of the settled screen, not of one moment after a step.
const STILL: (u32, u32) = (400, 2000);

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

impl Env {
    /// Waits for a sandboxed desktop's screen to be still ([`STILL`]).
    fn still(&self, d: &mut Box<dyn Desktop>) -> Result<(), DesktopError> {
        if self.pool.spec.profile.sandboxed() {
            d.quiesce(STILL.0, STILL.1)?;
        }
        Ok(())
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
        Ok(Checkpoint {
            id,
            pool: self.pool.clone(),
            env_id: self.id.clone(),
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
        let seed = cp.episode.seed;
        let result = (|| {
            let d = self.live_desktop(s, true)?;
            // Keys typed in a run first go without a settle between them. On a
            // sandboxed desktop a frame that differs from the checkpoint's is rebuilt
            // again, every action settled and paced to the screens the agent saw (apps
            // there answer at their own speed); elsewhere only a shortcut can differ.
            let mut replayed = "fast";
            let out = d.reset(seed)?;
            self.note_socket(Some(&**d));
            let (actions, seen) = (&cp.episode.actions, &cp.episode.seen);
            let deskgym_worker::Replayed {
                outcome: mut out,
                unsettled,
            } = d.replay(actions, seen, true, out)?;
            self.still(d)?;
            let mut frame = d.capture()?;
            let sandboxed = self.pool.spec.profile.sandboxed();
            let again = frame.hash != cp.frame_hash() && (unsettled > 0 || sandboxed);
            crate::metrics::METRICS.replay(unsettled, again);
            if again {
                tracing::debug!(env = %self.id, unsettled, "the fast replay differed; replaying settled");
                replayed = "settled";
                let first = d.reset(seed)?;
                self.note_socket(Some(&**d));
                out = d.replay(actions, seen, false, first)?.outcome;
                self.still(d)?;
                frame = d.capture()?;
            }
            Ok::<_, EnvError>((out, frame, d.pointer(), d.display(), replayed))
        })();
        let (out, frame, pointer, display, replayed) = result.inspect_err(|e| {
            self.on_error(s, e);
            s.episode = None;
        })?;
        let exact = frame.hash == cp.frame_hash();
        if !exact {
            tracing::warn!(env = %self.id, checkpoint = %cp.id, "rebuild diverged from its checkpoint");
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
        self.pool.record(|| {
            record::event(
                "restore",
                &self.id,
                serde_json::json!({
                    "checkpoint": cp.id, "episode_id": ep.log.episode_id, "exact": exact,
                    "replayed": replayed,
                }),
            )
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
        })
    }
}
