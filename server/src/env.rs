//! One env: its desktop, its episode, and the blocking operations on them (reset, step,
//! observe, save, restore). Every operation holds the env's own mutex for its whole
//! duration, so calls on one env queue up and calls on different envs never wait.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;
use deskgym_proto::v1 as pb;
use deskgym_worker::{Action, Desktop, Frame, Point, SettleReport};

use crate::error::ServiceError;
use crate::frame_cache::{Blob, FrameCache};
use crate::pool::{Pool, PoolSpec};
use crate::record::{self, EpisodeLog};

/// Locks a mutex, recovering from poisoning: a panicked step is reported as INTERNAL and
/// must not take every later call on that env down with it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The running episode of an env.
#[derive(Clone, Debug)]
struct Episode {
    seed: u64,
    number: u64,
    step_index: u32,
    /// Reward reported by the app so far; a step's reward is the increase.
    reward_so_far: f64,
    instruction: String,
    /// Why the episode ended, once it has.
    ended: Option<&'static str>,
    /// Every action applied since reset: replaying them on a fresh desktop rebuilds
    /// this state (the bundled tasks are deterministic).
    actions: Vec<Action>,
    /// Hash of the last frame captured.
    frame_hash: u128,
    /// What the recording needs (id, start time, return).
    log: EpisodeLog,
    /// The episodes table has this episode already.
    recorded: bool,
}

#[derive(Debug, Default)]
pub(crate) struct EnvState {
    /// `None` before the first start and after the desktop died; Reset starts one.
    pub(crate) desktop: Option<Desktop>,
    episode: Option<Episode>,
    episodes: u64,
    next_seed: u64,
}

/// A saved state: what is needed to rebuild it by replay.
#[derive(Debug)]
pub struct Checkpoint {
    /// Opaque id.
    pub id: String,
    /// The owning pool (its spec is what a rebuild needs).
    pub pool: Arc<Pool>,
    /// The env it was saved from.
    pub env_id: String,
    episode: Episode,
}

impl Checkpoint {
    /// The wire form.
    pub fn to_proto(&self) -> pb::Checkpoint {
        let spec = &self.pool.spec;
        pb::Checkpoint {
            checkpoint_id: self.id.clone(),
            pool_id: self.pool.id.clone(),
            task: spec.task.id.to_string(),
            seed: self.episode.seed,
            screen: Some(pb::ScreenSize {
                width: spec.screen.width,
                height: spec.screen.height,
            }),
            step_index: self.episode.step_index,
            frame_hash: deskgym_worker::hash_hex(self.episode.frame_hash),
            env_id: self.env_id.clone(),
        }
    }

    /// The frame hash at save time.
    pub fn frame_hash(&self) -> u128 {
        self.episode.frame_hash
    }
}

/// Per-call observation options: encoding and the hashes the client already holds.
#[derive(Clone, Debug, Default)]
pub struct ObsOptions {
    /// Wire encoding (`Unspecified` = the pool's).
    pub encoding: i32,
    /// Parsed `if_none_match` hashes.
    pub known: Vec<u128>,
}

/// One env: a desktop slot of a pool.
#[derive(Debug)]
pub struct Env {
    /// Opaque id.
    pub id: String,
    /// The owning pool.
    pub pool: Arc<Pool>,
    state: Mutex<EnvState>,
}

fn encoding_or(pool: &PoolSpec, raw: i32) -> Result<pb::ImageEncoding, ServiceError> {
    match pb::ImageEncoding::try_from(raw) {
        Ok(pb::ImageEncoding::Unspecified) => Ok(pool.encoding),
        Ok(e) => Ok(e),
        Err(_) => Err(ServiceError::invalid(
            "encoding",
            format!("unknown encoding {raw}"),
        )),
    }
}

impl Env {
    /// Builds the wire observation through the fleet cache: pixels only when the client
    /// does not hold this frame already.
    #[allow(clippy::too_many_arguments)]
    fn observation(
        &self,
        cache: &FrameCache,
        frame: Frame,
        pointer: Point,
        settle: SettleReport,
        enc: pb::ImageEncoding,
        known: &[u128],
        episode: Option<&str>,
    ) -> Result<pb::Observation, ServiceError> {
        let (width, height, hash) = (frame.width, frame.height, frame.hash);
        let hash_hex = deskgym_worker::hash_hex(hash);
        let raw = Blob {
            width,
            height,
            bytes: Bytes::from(frame.rgb),
        };
        // The recorder shares the buffer and stores each distinct frame once, on its thread.
        self.pool.record(|| {
            record::frame(
                &hash_hex,
                width,
                height,
                raw.bytes.clone(),
                &self.id,
                episode,
            )
        });
        let not_modified = known.contains(&hash);
        let bytes = if not_modified {
            // Keep the raw frame cached for GetFrames; count what was not sent.
            let saved = match enc {
                pb::ImageEncoding::RawRgb | pb::ImageEncoding::Unspecified => {
                    raw.bytes.len() as u64
                }
                e => cache.get(hash, e)?.map_or(0, |b| b.bytes.len() as u64),
            };
            cache.put(hash, raw, pb::ImageEncoding::RawRgb)?;
            cache.record_not_modified(saved);
            Bytes::new()
        } else {
            cache.put(hash, raw, enc)?.bytes
        };
        Ok(pb::Observation {
            frame: bytes,
            encoding: enc as i32,
            width,
            height,
            frame_hash: hash_hex,
            pointer: Some(pb::PointPx {
                x: pointer.x,
                y: pointer.y,
            }),
            settle: Some(pb::SettleReport {
                waited_ms: settle.waited_ms,
                quiesced: settle.quiesced,
                damage_events: settle.damage_events,
            }),
            not_modified,
        })
    }

    /// A new env around an already started desktop.
    pub(crate) fn new(
        id: String,
        pool: Arc<Pool>,
        desktop: Option<Desktop>,
        first_seed: u64,
    ) -> Self {
        let state = EnvState {
            desktop,
            next_seed: first_seed,
            ..Default::default()
        };
        Self {
            id,
            pool,
            state: Mutex::new(state),
        }
    }

    /// Takes the desktop out (closing the env).
    pub(crate) fn take_desktop(&self) -> Option<Desktop> {
        let mut s = lock(&self.state);
        s.episode = None;
        s.desktop.take()
    }

    fn info(&self, ep: &Episode, started: Instant, display: Option<u32>) -> pb::StepInfo {
        let mut extra = HashMap::from([("ended".to_string(), ep.ended.unwrap_or("").to_string())]);
        if let Some(d) = display {
            // Lets an operator (and the crash tests) find the env's X server.
            extra.insert("display".to_string(), format!(":{d}"));
        }
        pb::StepInfo {
            instruction: ep.instruction.clone(),
            task: self.pool.spec.task.id.to_string(),
            step_index: ep.step_index,
            seed: ep.seed,
            episode: ep.number,
            latency_ms: started.elapsed().as_secs_f64() * 1e3,
            extra,
        }
    }

    /// Gives back the desktop, restarting it (from a warm spare when the pool has one)
    /// when it is missing or dead.
    fn live_desktop<'a>(&self, s: &'a mut EnvState) -> Result<&'a mut Desktop, ServiceError> {
        if let Some(d) = s.desktop.as_mut() {
            if d.check_alive().is_ok() {
                return s
                    .desktop
                    .as_mut()
                    .ok_or_else(|| ServiceError::Internal("desktop vanished".into()));
            }
            tracing::warn!(env = %self.id, "desktop died; restarting it");
            s.desktop = None;
        }
        let (d, warm_spare) = match self.pool.take_spare() {
            Some(d) => (d, true),
            None => (self.pool.spec.start_desktop(false)?, false),
        };
        tracing::info!(env = %self.id, display = d.display(), warm_spare, "desktop (re)started");
        self.pool.record(|| {
            record::event(
                "env_started",
                &self.id,
                serde_json::json!({"display": d.display(), "warm_spare": warm_spare}),
            )
        });
        Ok(s.desktop.insert(d))
    }

    /// Blocking: starts a new episode (restarting a dead desktop first).
    pub fn reset(
        &self,
        cache: &FrameCache,
        seed: Option<u64>,
        opts: &ObsOptions,
    ) -> Result<pb::ResetResponse, ServiceError> {
        let started = Instant::now();
        let enc = encoding_or(&self.pool.spec, opts.encoding)?;
        let mut guard = lock(&self.state);
        self.reset_locked(&mut guard, cache, seed, enc, &opts.known, started)
    }

    fn reset_locked(
        &self,
        s: &mut EnvState,
        cache: &FrameCache,
        seed: Option<u64>,
        enc: pb::ImageEncoding,
        known: &[u128],
        started: Instant,
    ) -> Result<pb::ResetResponse, ServiceError> {
        let seed = seed.unwrap_or(s.next_seed);
        let result = (|| {
            let d = self.live_desktop(s)?;
            let out = d.reset(seed)?;
            let frame = d.capture()?;
            Ok::<_, ServiceError>((out, frame, d.pointer()))
        })();
        let (out, frame, pointer) = result.inspect_err(|e| self.on_error(s, e))?;
        self.end_episode(s, "reset");
        s.episodes += 1;
        s.next_seed = seed.wrapping_add(1);
        let ep = Episode {
            seed,
            number: s.episodes,
            step_index: 0,
            reward_so_far: out.app.reward,
            instruction: out.app.instruction,
            ended: None,
            actions: Vec::new(),
            frame_hash: frame.hash,
            log: self.new_log(s.episodes),
            recorded: false,
        };
        self.pool.record(|| {
            record::event(
                "reset",
                &self.id,
                serde_json::json!({
                    "episode_id": ep.log.episode_id, "seed": seed, "instruction": ep.instruction,
                    "frame_hash": deskgym_worker::hash_hex(frame.hash),
                }),
            )
        });
        let observation = self.observation(
            cache,
            frame,
            pointer,
            out.settle,
            enc,
            known,
            Some(&ep.log.episode_id),
        )?;
        let info = self.info(&ep, started, s.desktop.as_ref().map(Desktop::display));
        s.episode = Some(ep);
        Ok(pb::ResetResponse {
            observation: Some(observation),
            info: Some(info),
        })
    }

    /// Forgets a desktop that failed fatally, so the next Reset restarts it; the running
    /// episode is recorded as ended by the crash.
    fn on_error(&self, s: &mut EnvState, e: &ServiceError) {
        self.pool.record(|| {
            record::event(
                "error",
                &self.id,
                serde_json::json!({"code": format!("{:?}", e.code()), "message": e.to_string()}),
            )
        });
        if e.code() == tonic::Code::Unavailable {
            tracing::warn!(env = %self.id, error = %e, "desktop failed");
            self.pool.record(|| {
                record::event(
                    "env_crash",
                    &self.id,
                    serde_json::json!({"message": e.to_string()}),
                )
            });
            self.end_episode(s, "env_crash");
            s.desktop = None;
        }
    }

    fn new_log(&self, number: u64) -> EpisodeLog {
        EpisodeLog {
            episode_id: format!("{}/{number}", self.id),
            start_ms: deskgym_datasets::writer::now_ms(),
            ret: 0.0,
        }
    }

    /// Writes the episodes-table row of the current episode (once), with `why` unless
    /// the episode already ended for its own reason.
    fn end_episode(&self, s: &mut EnvState, why: &str) {
        let Some(ep) = s.episode.as_mut() else { return };
        if ep.recorded {
            return;
        }
        ep.recorded = true;
        let termination = ep.ended.unwrap_or(why);
        let task = self.pool.spec.task.id;
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
    pub fn step(
        &self,
        cache: &FrameCache,
        action: &Action,
        opts: &ObsOptions,
        autoreset: bool,
    ) -> Result<pb::StepResult, ServiceError> {
        let started = Instant::now();
        let enc = encoding_or(&self.pool.spec, opts.encoding)?;
        let mut guard = lock(&self.state);
        let s = &mut *guard;
        let Some(ep) = s.episode.as_mut() else {
            return Err(ServiceError::FailedPrecondition(format!(
                "env {:?} has no episode: call Reset first",
                self.id
            )));
        };
        if let Some(why) = ep.ended {
            return Err(ServiceError::FailedPrecondition(format!(
                "the episode of env {:?} has ended ({why}); call Reset to start a new one",
                self.id
            )));
        }
        let Some(d) = s.desktop.as_mut() else {
            return Err(ServiceError::Unavailable(format!(
                "env {:?} lost its desktop; call Reset to restart it",
                self.id
            )));
        };
        let display = d.display();
        let t_start = deskgym_datasets::writer::now_ms();
        // Hex strings only when recording (the closures below run only then).
        let before = ep.frame_hash;
        let result = d
            .step(action)
            .and_then(|out| Ok((out, d.capture()?, d.pointer())));
        let (out, frame, pointer) = match result {
            Ok(r) => r,
            Err(e) => {
                let err = ServiceError::from(e);
                let (episode_id, step_index) = (ep.log.episode_id.clone(), ep.step_index + 1);
                self.pool.record(|| {
                    deskgym_datasets::Record::Step(deskgym_datasets::StepRow {
                        episode_id,
                        env_id: self.id.clone(),
                        step_index,
                        t_start_ms: t_start,
                        t_end_ms: deskgym_datasets::writer::now_ms(),
                        frame_hash_before: deskgym_worker::hash_hex(before),
                        error_code: Some(format!("{:?}", err.code())),
                        latency_ms: started.elapsed().as_secs_f64() * 1e3,
                        ..record::step_row(action)
                    })
                });
                self.on_error(s, &err);
                return Err(err);
            }
        };
        ep.step_index += 1;
        ep.actions.push(action.clone());
        ep.frame_hash = frame.hash;
        let reward = out.app.reward - ep.reward_so_far;
        ep.reward_so_far = out.app.reward;
        let terminated = out.app.done;
        let truncated = !terminated && ep.step_index >= self.pool.spec.max_steps;
        ep.ended = if terminated {
            Some(if out.app.reward > 0.0 {
                "success"
            } else {
                "failure"
            })
        } else if truncated {
            Some("max_steps")
        } else {
            None
        };
        ep.log.ret += reward;
        let after = frame.hash;
        let episode_id = ep.log.episode_id.clone();
        let observation = self.observation(
            cache,
            frame,
            pointer,
            out.settle,
            enc,
            &opts.known,
            Some(&episode_id),
        )?;
        let mut info = self.info(ep, started, Some(display));
        self.pool.record(|| {
            deskgym_datasets::Record::Step(deskgym_datasets::StepRow {
                episode_id: ep.log.episode_id.clone(),
                env_id: self.id.clone(),
                step_index: ep.step_index,
                t_start_ms: t_start,
                t_end_ms: deskgym_datasets::writer::now_ms(),
                reward,
                terminated,
                truncated,
                frame_hash_before: deskgym_worker::hash_hex(before),
                frame_hash_after: Some(deskgym_worker::hash_hex(after)),
                settle_ms: out.settle.waited_ms,
                latency_ms: info.latency_ms,
                ..record::step_row(action)
            })
        });
        if terminated || truncated {
            self.end_episode(s, "");
        }
        let reset = if autoreset && (terminated || truncated) {
            match self.reset_locked(s, cache, None, enc, &opts.known, Instant::now()) {
                Ok(r) => Some(r),
                Err(e) => {
                    info.extra.insert("autoreset_error".into(), e.to_string());
                    None
                }
            }
        } else {
            None
        };
        Ok(pb::StepResult {
            observation: Some(observation),
            reward,
            terminated,
            truncated,
            info: Some(info),
            reset,
        })
    }

    /// Blocking: a capture without acting.
    pub fn observe(
        &self,
        cache: &FrameCache,
        opts: &ObsOptions,
    ) -> Result<pb::Observation, ServiceError> {
        let enc = encoding_or(&self.pool.spec, opts.encoding)?;
        let mut s = lock(&self.state);
        let Some(d) = s.desktop.as_mut() else {
            return Err(ServiceError::Unavailable(format!(
                "env {:?} lost its desktop; call Reset to restart it",
                self.id
            )));
        };
        let captured = d
            .check_alive()
            .and_then(|_| Ok((d.capture()?, d.pointer())));
        match captured {
            Ok((frame, pointer)) => {
                let settle = SettleReport {
                    quiesced: true,
                    ..Default::default()
                };
                self.observation(cache, frame, pointer, settle, enc, &opts.known, None)
            }
            Err(e) => {
                let err = ServiceError::from(e);
                self.on_error(&mut s, &err);
                Err(err)
            }
        }
    }

    /// Blocking: snapshots what is needed to rebuild the current state.
    pub fn save(&self, id: String) -> Result<Checkpoint, ServiceError> {
        let s = lock(&self.state);
        let ep = s.episode.clone().ok_or_else(|| {
            ServiceError::FailedPrecondition(format!(
                "env {:?} has no episode to save: call Reset first",
                self.id
            ))
        })?;
        Ok(Checkpoint {
            id,
            pool: self.pool.clone(),
            env_id: self.id.clone(),
            episode: ep,
        })
    }

    /// Blocking: rebuilds `cp` on this env by replaying its actions on a freshly reset
    /// desktop, and reports whether the result looks exactly like the checkpoint.
    pub fn restore(
        &self,
        cache: &FrameCache,
        cp: &Checkpoint,
        opts: &ObsOptions,
    ) -> Result<pb::RestoreResponse, ServiceError> {
        let started = Instant::now();
        let (ours, theirs) = (&self.pool.spec, &cp.pool.spec);
        if ours.task.id != theirs.task.id || ours.screen != theirs.screen {
            return Err(ServiceError::FailedPrecondition(format!(
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
            let d = self.live_desktop(s)?;
            let mut out = d.reset(cp.episode.seed)?;
            for a in &cp.episode.actions {
                out = d.step(a)?;
            }
            let frame = d.capture()?;
            Ok::<_, ServiceError>((out, frame, d.pointer(), d.display()))
        })();
        let (out, frame, pointer, display) = result.inspect_err(|e| {
            self.on_error(s, e);
            s.episode = None;
        })?;
        let exact = frame.hash == cp.episode.frame_hash;
        if !exact {
            tracing::warn!(env = %self.id, checkpoint = %cp.id, "rebuild diverged from its checkpoint");
        }
        self.end_episode(s, "restore");
        s.episodes += 1;
        s.next_seed = cp.episode.seed.wrapping_add(1);
        let log = EpisodeLog {
            ret: cp.episode.log.ret,
            ..self.new_log(s.episodes)
        };
        let ep = Episode {
            number: s.episodes,
            frame_hash: frame.hash,
            log,
            recorded: false,
            ..cp.episode.clone()
        };
        self.pool.record(|| {
            record::event(
                "restore",
                &self.id,
                serde_json::json!({
                    "checkpoint": cp.id, "episode_id": ep.log.episode_id, "exact": exact,
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
        Ok(pb::RestoreResponse {
            observation: Some(observation),
            info: Some(info),
            fidelity: if exact {
                pb::Fidelity::Exact
            } else {
                pb::Fidelity::Diverged
            } as i32,
            expected_hash: deskgym_worker::hash_hex(cp.episode.frame_hash),
        })
    }
}
