//! An episode's course: reset, step (preconditions, the action, reward and
//! termination, the recorded row, autoreset), the agent's own `done`, and the end.

use super::accounting::Advance;
use super::*;
use crate::record::{StepOutcome, StepReport};

impl Env {
    pub(super) fn info(&self, ep: &Episode, started: Instant, display: Option<u32>) -> Info {
        let mut extra = HashMap::from([("ended".to_string(), ep.ended.unwrap_or("").to_string())]);
        if let Some(d) = display {
            // Lets an operator (and the crash tests) find the env's X server.
            extra.insert("display".to_string(), format!(":{d}"));
        }
        if let Some((success, reason)) = &ep.verdict {
            let status = if *success { "success" } else { "failure" };
            extra.insert("agent_status".to_string(), status.to_string());
            extra.insert("agent_reason".to_string(), reason.clone());
        }
        Info {
            instruction: ep.instruction.clone(),
            task: self.pool.spec.task.id.clone(),
            step_index: ep.step_index,
            seed: ep.seed,
            episode: ep.number,
            latency_ms: started.elapsed().as_secs_f64() * 1e3,
            extra,
        }
    }

    /// Blocking: starts a new episode (restarting a dead desktop first).
    pub(crate) fn reset(
        &self,
        cache: &FrameCache,
        seed: Option<u64>,
        opts: &ObsOptions,
    ) -> Result<Reset, EnvError> {
        let _running = self.enter();
        let started = Instant::now();
        let enc = encoding_or(&self.pool.spec, opts.encoding)?;
        let mut guard = lock(&self.state);
        self.reset_locked(&mut guard, cache, seed, enc, opts, started)
    }

    pub(super) fn reset_locked(
        &self,
        s: &mut EnvState,
        cache: &FrameCache,
        seed: Option<u64>,
        enc: pb::ImageEncoding,
        opts: &ObsOptions,
        started: Instant,
    ) -> Result<Reset, EnvError> {
        // Unlocked powers last one episode at most: a new one starts without them, and
        // a request for one waiting meanwhile is for the episode that ended.
        self.relock_all("reset");
        self.end_asks("reset");
        let (seed, base, k) = match seed {
            Some(seed) => (seed, seed, 1),
            None => (
                episode_seed(s.seed_base, s.seed_k),
                s.seed_base,
                s.seed_k.saturating_add(1),
            ),
        };
        let result = (|| {
            let d = self.live_desktop(s, true)?;
            let began = Instant::now();
            let out = d.reset(seed)?;
            // The clock as the reset set it, when the reset began.
            let clock_ms = d
                .clock_ms()
                .map_or(0, |c| c.saturating_sub(u64::from(millis(began.elapsed()))));
            self.note_socket(Some(&**d));
            let frame = d.capture()?;
            Ok::<_, EnvError>((out, frame, d.pointer(), clock_ms))
        })();
        let (out, frame, pointer, clock_ms) = result.inspect_err(|e| self.on_error(s, e))?;
        self.end_episode(s, "reset");
        s.episodes += 1;
        (s.seed_base, s.seed_k) = (base, k);
        let ep = Episode {
            seed,
            number: s.episodes,
            step_index: 0,
            reward_so_far: out.app.reward,
            instruction: out.app.instruction,
            ended: None,
            actions: Arc::default(),
            seen: Arc::default(),
            frame_hash: Some(frame.hash),
            log: self.new_log(s.episodes),
            recorded: false,
            verdict: None,
            clock_ms,
        };
        self.event("reset", || {
            serde_json::json!({
                "episode_id": ep.log.episode_id, "seed": seed, "instruction": ep.instruction,
                "frame_hash": deskgym_worker::hash_hex(frame.hash),
            })
        });
        let mut observation = self.observation(
            cache,
            frame,
            pointer,
            out.settle,
            enc,
            &opts.known,
            Some(&ep.log.episode_id),
        )?;
        // A new episode's elements are new elements.
        s.refs.clear();
        if let Some(t) = &opts.tree
            && s.desktop.is_some()
        {
            self.attach_tree(s, t, &mut observation)?;
        }
        let mut info = self.info(&ep, started, s.desktop.as_ref().map(|d| d.display()));
        info.extra.extend(out.app.extra);
        self.control.tell(
            |m| {
                *m = control::Summary {
                    episode: ep.number,
                    state: control::RunState::Running,
                    instruction: ep.instruction.clone(),
                    ..control::Summary::default()
                }
            },
            || {
                serde_json::json!({
                    "kind": "reset", "episode": ep.number, "seed": seed,
                    "instruction": ep.instruction,
                    "frame_hash": deskgym_worker::hash_hex(ep.frame_hash.unwrap_or_default()),
                    "t_ms": deskgym_datasets::unix_ms(),
                })
            },
        );
        s.episode = Some(ep);
        crate::metrics::METRICS.reset(&self.pool.owner);
        Ok(Reset {
            obs: observation,
            info,
        })
    }

    pub(super) fn new_log(&self, number: u64) -> EpisodeLog {
        EpisodeLog {
            episode_id: format!("{}/{number}", self.id),
            start_ms: deskgym_datasets::unix_ms(),
            ret: 0.0,
        }
    }

    /// Writes the episodes-table row of the current episode (once), with `why` unless
    /// the episode already ended for its own reason.
    pub(super) fn end_episode(&self, s: &mut EnvState, why: &str) {
        let Some(ep) = s.episode.as_mut() else { return };
        if ep.recorded {
            return;
        }
        ep.recorded = true;
        let termination = ep.ended.unwrap_or(why);
        let task = &self.pool.spec.task.id;
        self.pool.record(|| {
            record::episode_row(
                &ep.log,
                &self.id,
                task,
                &ep.instruction,
                ep.seed,
                ep.step_index,
                termination,
            )
        });
    }

    /// Records the running episode as ended (pool closing).
    pub(crate) fn finish_recording(&self, why: &str) {
        let mut s = lock(&self.state);
        self.end_episode(&mut s, why);
    }

    /// Blocking: one action, settle, capture. With `autoreset`, an episode that ends
    /// here is followed at once by the next one (Gymnasium's same-step autoreset); a
    /// failed autoreset is reported in `info.extra["autoreset_error"]`.
    pub(crate) fn step(
        &self,
        cache: &FrameCache,
        planned: &Planned,
        opts: &ObsOptions,
        autoreset: bool,
    ) -> Result<Stepped, EnvError> {
        let _running = self.enter();
        let started = Instant::now();
        let enc = encoding_or(&self.pool.spec, opts.encoding)?;
        let mut guard = lock(&self.state);
        let s = &mut *guard;
        self.steppable(s)?;
        let resolved = self.resolve_step(s, planned)?;
        let action = resolved.as_ref().unwrap_or(&planned.action);
        let (Some(ep), Some(d)) = (s.episode.as_mut(), s.desktop.as_mut()) else {
            return Err(EnvError::Bug("episode vanished"));
        };
        let display = d.display();
        let begun = Begun {
            action,
            actor: planned.actor,
            t_start_ms: deskgym_datasets::unix_ms(),
            // Hex strings only when recording (the closures below run only then).
            before: ep.frame_hash.unwrap_or_default(),
            started,
        };
        self.event("action", || {
            record::action_event(
                &ep.log.episode_id,
                ep.step_index + 1,
                begun.actor,
                action,
                begun.before,
            )
        });
        // From the moment input may have reached the desktop, the action belongs in the
        // replay log whatever fails after it: a Save/Fork must rebuild what is on screen.
        let mut sent = false;
        let acted = Instant::now();
        // The clock the apps read as the action goes: a replay sets it back to this.
        let clock_ms = d.clock_ms().unwrap_or(0);
        let result = d.check_alive().and_then(|()| {
            sent = true;
            let out = d.step(action)?;
            Ok((out, self.capture(d)?, d.pointer()))
        });
        let (out, frame, pointer) = match result {
            Ok(r) => r,
            Err(e) => return Err(self.step_failed(s, &begun, e, sent)),
        };
        Arc::make_mut(&mut ep.actions).push(action.clone());
        Arc::make_mut(&mut ep.seen).push(Seen {
            hash: frame.hash,
            ms: millis(acted.elapsed()),
            clock_ms,
        });
        ep.frame_hash = Some(frame.hash);
        let Advance {
            reward,
            terminated,
            truncated,
        } = ep.advance(out.app.reward, out.app.done, self.pool.spec.max_steps);
        let after = frame.hash;
        let episode_id = ep.log.episode_id.clone();
        let (mut observation, observe_error) = self.shaped_observation(
            d,
            cache,
            frame,
            pointer,
            out.settle,
            enc,
            opts,
            Some(&episode_id),
        )?;
        if let Some(t) = &opts.tree {
            self.attach_tree(s, t, &mut observation)?;
        }
        // The tree read borrowed the whole state; the episode is still the one stepped.
        let ep = s
            .episode
            .as_mut()
            .ok_or(EnvError::Bug("episode vanished"))?;
        let mut info = self.info(ep, started, Some(display));
        info.extra.extend(out.app.extra);
        let outcome = StepOutcome::Ran {
            reward,
            terminated,
            truncated,
            frame_after: after,
            settle_ms: out.settle.waited_ms,
            latency_ms: info.latency_ms,
        };
        self.step_ran(ep, &begun, outcome);
        if terminated || truncated {
            self.end_episode(s, "");
        }
        let reset = if autoreset && (terminated || truncated) {
            match self.reset_locked(s, cache, None, enc, opts, Instant::now()) {
                Ok(r) => Some(r),
                Err(e) => {
                    info.extra.insert("autoreset_error".into(), e.to_string());
                    None
                }
            }
        } else {
            None
        };
        crate::metrics::METRICS.step(&self.pool.owner, started.elapsed());
        Ok(Stepped {
            obs: observation,
            reward,
            terminated,
            truncated,
            info,
            reset,
            observe_error,
        })
    }

    /// A step needs a running episode on a live desktop.
    fn steppable(&self, s: &EnvState) -> Result<(), EnvError> {
        let Some(ep) = s.episode.as_ref() else {
            return Err(EnvError::NoEpisode {
                env: self.id.clone(),
            });
        };
        if let Some(why) = ep.ended {
            return Err(EnvError::Ended {
                env: self.id.clone(),
                why,
            });
        }
        if s.desktop.is_none() {
            return Err(EnvError::NoDesktop {
                env: self.id.clone(),
            });
        }
        Ok(())
    }

    /// Element targets become pixels (or element identities) now: the log keeps what
    /// ran, so a replay does not depend on this env's refs. `None`: the action has no
    /// element targets and runs as planned.
    fn resolve_step(
        &self,
        s: &mut EnvState,
        planned: &Planned,
    ) -> Result<Option<deskgym_worker::Action>, EnvError> {
        if planned.elements.is_empty() {
            return Ok(None);
        }
        let Some(d) = s.desktop.as_mut() else {
            return Err(EnvError::NoDesktop {
                env: self.id.clone(),
            });
        };
        let screen = (self.pool.spec.screen.width, self.pool.spec.screen.height);
        match Self::resolve(d, &mut s.refs, planned, screen) {
            Ok(a) => Ok(Some(a)),
            Err(e) => {
                // A desktop that died while its tree was read is let go as usual.
                self.on_error(s, &e);
                Err(e)
            }
        }
    }

    /// The account of a step that failed, once its action was tried: the replay log
    /// keeps an action that reached the desktop, the recorder and the console hear of
    /// it, and the env handles the error as any other. Returns the error.
    fn step_failed(
        &self,
        s: &mut EnvState,
        begun: &Begun<'_>,
        e: DesktopError,
        sent: bool,
    ) -> EnvError {
        let applied = sent
            && !matches!(
                e,
                DesktopError::InvalidAction { .. } | DesktopError::Element { .. }
            );
        let err = EnvError::from(e);
        let Some(ep) = s.episode.as_mut() else {
            return EnvError::Bug("episode vanished");
        };
        if applied {
            ep.step_index += 1;
            Arc::make_mut(&mut ep.actions).push(begun.action.clone());
            Arc::make_mut(&mut ep.seen).push(Seen {
                hash: 0,
                ms: millis(begun.started.elapsed()),
                clock_ms: 0,
            });
            ep.frame_hash = None;
        }
        // The index this step has (applied) or would have had.
        let step_index = ep.step_index + u32::from(!applied);
        let outcome = StepOutcome::Failed {
            code: err.code_name(),
            message: err.to_string(),
            latency_ms: begun.started.elapsed().as_secs_f64() * 1e3,
        };
        let report = self.step_report(ep, begun, step_index, outcome);
        self.pool
            .record(|| deskgym_datasets::Record::Step(report.row()));
        self.event("ack", || report.ack_event());
        self.on_error(s, &err);
        self.control.tell(
            |m| m.state = control::RunState::Failed,
            || step_feed(&report),
        );
        err
    }

    /// The account of a step that ran: its row, and the console's state and feed.
    fn step_ran(&self, ep: &Episode, begun: &Begun<'_>, outcome: StepOutcome) {
        let report = self.step_report(ep, begun, ep.step_index, outcome);
        self.pool
            .record(|| deskgym_datasets::Record::Step(report.row()));
        self.event("ack", || report.ack_event());
        let StepOutcome::Ran {
            reward,
            terminated,
            truncated,
            ..
        } = report.outcome
        else {
            return;
        };
        self.control.tell(
            |m| {
                m.step = ep.step_index;
                m.last_reward = reward;
                m.episode_return = ep.log.ret;
                m.state = if terminated || truncated {
                    control::RunState::Done
                } else {
                    control::RunState::Running
                };
            },
            || step_feed(&report),
        );
    }

    /// One report of what a step did, for the recorder and the console alike.
    fn step_report<'a>(
        &'a self,
        ep: &Episode,
        begun: &Begun<'a>,
        step_index: u32,
        outcome: StepOutcome,
    ) -> StepReport<'a> {
        StepReport {
            episode_id: ep.log.episode_id.clone(),
            episode: ep.number,
            env_id: &self.id,
            step_index,
            action: begun.action,
            actor: begun.actor,
            t_start_ms: begun.t_start_ms,
            frame_before: begun.before,
            outcome,
        }
    }

    /// Blocking: records an agent's verdict on the current episode (axstream `done`): in
    /// the event log, and in `info.extra` (`agent_status`, `agent_reason`) of what the
    /// episode returns from now on. Returns the episode's info.
    pub(crate) fn agent_done(&self, success: bool, reason: &str) -> Result<Info, EnvError> {
        let started = Instant::now();
        let mut s = lock(&self.state);
        let ep = s.episode.as_mut().ok_or_else(|| EnvError::NoEpisode {
            env: self.id.clone(),
        })?;
        ep.verdict = Some((success, reason.to_string()));
        let (episode_id, step_index) = (ep.log.episode_id.clone(), ep.step_index);
        self.event("agent_done", || {
            serde_json::json!({
                "episode_id": episode_id, "step_index": step_index,
                "status": if success { "success" } else { "failure" }, "reason": reason,
            })
        });
        let ep = s
            .episode
            .as_ref()
            .ok_or(EnvError::Bug("episode vanished"))?;
        Ok(self.info(ep, started, None))
    }
}

/// What a step knows from the moment its action is tried.
struct Begun<'a> {
    /// What runs, element targets resolved.
    action: &'a deskgym_worker::Action,
    /// Who chose it.
    actor: deskgym_datasets::Actor,
    /// When it was tried, in the recorder's clock.
    t_start_ms: i64,
    /// The frame on screen before it.
    before: u128,
    /// When the call began (latency counts from here).
    started: Instant,
}

/// A step as the console's feed shows it.
fn step_feed(r: &StepReport<'_>) -> serde_json::Value {
    match &r.outcome {
        StepOutcome::Failed { message, .. } => serde_json::json!({
            "kind": "step", "step": r.step_index, "actor": r.actor.as_str(),
            "action": action_value(r.action), "error": message,
        }),
        StepOutcome::Ran {
            reward,
            terminated,
            truncated,
            frame_after,
            ..
        } => serde_json::json!({
            "kind": "step", "episode": r.episode, "step": r.step_index,
            "actor": r.actor.as_str(), "action": action_value(r.action),
            "reward": reward, "terminated": terminated, "truncated": truncated,
            "frame_hash": deskgym_worker::hash_hex(*frame_after),
            "t_ms": deskgym_datasets::unix_ms(),
        }),
    }
}

/// An action as the console's feed shows it: the steps table's JSON form.
fn action_value(action: &deskgym_worker::Action) -> serde_json::Value {
    record::action_value(action)
}
