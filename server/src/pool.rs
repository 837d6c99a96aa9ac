//! Pools of desktops, their envs and episodes, and the blocking thread pool that drives
//! them.
//!
//! Locking: the `pools`/`envs` maps are held only to look up or insert; each env has its
//! own `Mutex` held for the whole of one reset/step (std mutex: held across blocking X
//! work on the step pool, never across an `.await`). Two calls on the same env queue up;
//! calls on different envs never wait on each other.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use deskgym_proto::v1 as pb;
use deskgym_worker::{Action, Desktop, DesktopConfig, Frame, Settle, SettleReport, TaskSpec};
use tokio::sync::oneshot;

use crate::config::Limits;
use crate::convert::Screen;
use crate::encode::encode;
use crate::error::ServiceError;

/// Server defaults applied where a request leaves a field at zero.
pub const DEFAULT_WIDTH: u32 = 1280;
/// See [`DEFAULT_WIDTH`].
pub const DEFAULT_HEIGHT: u32 = 720;

/// Locks a mutex, recovering from poisoning: a panicked step is reported as INTERNAL and
/// must not take every later call on that env down with it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What every env of a pool runs.
#[derive(Clone, Debug)]
pub struct PoolSpec {
    /// The bundled task.
    pub task: &'static TaskSpec,
    /// Screen size.
    pub screen: Screen,
    /// Base seed.
    pub seed: u64,
    /// Settle policy.
    pub settle: Settle,
    /// Episode bound.
    pub max_steps: u32,
    /// Default frame encoding.
    pub encoding: pb::ImageEncoding,
}

/// A pool: a set of envs created together.
#[derive(Debug)]
pub struct Pool {
    /// Opaque id.
    pub id: String,
    /// What its envs run.
    pub spec: PoolSpec,
    /// Its envs, in creation order.
    pub env_ids: Vec<String>,
    last_used: Mutex<Instant>,
}

impl Pool {
    fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }
}

/// The running episode of an env.
#[derive(Debug)]
struct Episode {
    seed: u64,
    number: u64,
    step_index: u32,
    /// Reward reported by the app so far; a step's reward is the increase.
    reward_so_far: f64,
    instruction: String,
    /// Why the episode ended, once it has.
    ended: Option<&'static str>,
}

#[derive(Debug, Default)]
struct EnvState {
    /// `None` before the first start and after the desktop died; Reset starts one.
    desktop: Option<Desktop>,
    episode: Option<Episode>,
    episodes: u64,
    next_seed: u64,
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

/// Owns every pool and env and the step thread pool.
pub struct PoolManager {
    limits: Limits,
    executor: rayon::ThreadPool,
    pools: Mutex<HashMap<String, Arc<Pool>>>,
    envs: Mutex<HashMap<String, Arc<Env>>>,
    /// Envs alive or being started, checked against `max_envs` before starting any.
    reserved: Mutex<u32>,
    next_id: AtomicU64,
    /// Distinguishes ids of this server instance from a previous one's.
    nonce: String,
}

impl std::fmt::Debug for PoolManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolManager")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Gives reserved env slots back unless the creation succeeded.
struct Reservation<'a> {
    mgr: &'a PoolManager,
    n: u32,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        *lock(&self.mgr.reserved) -= self.n;
    }
}

impl PoolManager {
    /// Creates a manager whose blocking work runs on `threads` dedicated threads.
    pub fn new(limits: Limits, threads: usize) -> std::io::Result<Self> {
        let executor = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(|i| format!("deskgym-step-{i}"))
            .build()
            .map_err(std::io::Error::other)?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() ^ d.as_secs() as u32)
            .unwrap_or(0);
        Ok(Self {
            limits,
            executor,
            pools: Mutex::default(),
            envs: Mutex::default(),
            reserved: Mutex::new(0),
            next_id: AtomicU64::new(1),
            nonce: format!("{:06x}", nanos & 0xff_ffff),
        })
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Number of envs alive (or being started).
    pub fn env_count(&self) -> u32 {
        *lock(&self.reserved)
    }

    fn new_id(&self, prefix: &str) -> String {
        format!(
            "{prefix}{}-{}",
            self.nonce,
            self.next_id.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Runs blocking work on the step pool. A panic becomes INTERNAL, not an abort.
    pub fn spawn<T, F>(&self, f: F) -> oneshot::Receiver<Result<T, ServiceError>>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, ServiceError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.executor.spawn(move || {
            let r = std::panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::error!(%msg, "step worker panicked");
                Err(ServiceError::Internal(format!("worker panicked: {msg}")))
            });
            let _ = tx.send(r);
        });
        rx
    }

    /// Awaits a [`spawn`](Self::spawn)ed job.
    pub async fn join<T>(
        rx: oneshot::Receiver<Result<T, ServiceError>>,
    ) -> Result<T, ServiceError> {
        rx.await
            .unwrap_or_else(|_| Err(ServiceError::Internal("step worker went away".into())))
    }

    /// Validates a CreatePool request into a spec.
    pub fn spec(&self, req: &pb::CreatePoolRequest) -> Result<PoolSpec, ServiceError> {
        let task = deskgym_worker::task_spec(&req.task).ok_or_else(|| {
            let known: Vec<_> = deskgym_worker::TASKS.iter().map(|t| t.id).collect();
            ServiceError::invalid(
                "task",
                format!(
                    "unknown task {:?}; known tasks: {}",
                    req.task,
                    known.join(", ")
                ),
            )
        })?;
        if req.num_envs == 0 {
            return Err(ServiceError::invalid("num_envs", "must be at least 1"));
        }
        let l = &self.limits;
        let screen = req.screen.unwrap_or_default();
        let width = if screen.width == 0 {
            DEFAULT_WIDTH
        } else {
            screen.width
        };
        let height = if screen.height == 0 {
            DEFAULT_HEIGHT
        } else {
            screen.height
        };
        for (field, v) in [("screen.width", width), ("screen.height", height)] {
            if !(l.min_screen_side..=l.max_screen_side).contains(&v) {
                return Err(ServiceError::invalid(
                    field,
                    format!(
                        "{v} is outside {}..={}",
                        l.min_screen_side, l.max_screen_side
                    ),
                ));
            }
        }
        let settle_req = req.settle.unwrap_or_default();
        let default = Settle::default();
        let settle = Settle {
            settle_ms: settle_req.settle_ms.unwrap_or(default.settle_ms),
            settle_max_ms: if settle_req.settle_max_ms == 0 {
                default.settle_max_ms
            } else {
                settle_req.settle_max_ms
            },
        };
        if settle.settle_max_ms > l.max_settle_ms || settle.settle_ms > l.max_settle_ms {
            return Err(ServiceError::invalid(
                "settle",
                format!(
                    "settle_ms and settle_max_ms must be at most {} ms",
                    l.max_settle_ms
                ),
            ));
        }
        let encoding = pb::ImageEncoding::try_from(req.encoding).map_err(|_| {
            ServiceError::invalid("encoding", format!("unknown encoding {}", req.encoding))
        })?;
        Ok(PoolSpec {
            task,
            screen: Screen { width, height },
            seed: req.seed,
            settle,
            max_steps: if req.max_steps == 0 {
                task.default_max_steps
            } else {
                req.max_steps
            },
            encoding: if encoding == pb::ImageEncoding::Unspecified {
                pb::ImageEncoding::RawRgb
            } else {
                encoding
            },
        })
    }

    /// Starts every desktop of a new pool in parallel. All or nothing: if one fails, the
    /// others are stopped and the reservation is released.
    pub async fn create_pool(
        self: &Arc<Self>,
        spec: PoolSpec,
        n: u32,
    ) -> Result<Arc<Pool>, ServiceError> {
        let reservation = {
            let mut reserved = lock(&self.reserved);
            if *reserved + n > self.limits.max_envs {
                return Err(ServiceError::ResourceExhausted(format!(
                    "asked for {n} envs but only {} of the server's max_envs={} are free",
                    self.limits.max_envs - *reserved,
                    self.limits.max_envs
                )));
            }
            *reserved += n;
            Reservation { mgr: self, n }
        };
        let config = DesktopConfig {
            task: spec.task.id.to_string(),
            width: spec.screen.width,
            height: spec.screen.height,
            settle: spec.settle,
        };
        let jobs: Vec<_> = (0..n)
            .map(|_| {
                let c = config.clone();
                self.spawn(move || Desktop::start(c).map_err(ServiceError::from))
            })
            .collect();
        let mut desktops = Vec::with_capacity(n as usize);
        let mut first_err = None;
        for job in jobs {
            match Self::join(job).await {
                Ok(d) => desktops.push(d),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            // Dropping stops the desktops that did start; do it off the runtime.
            let _ = Self::join(self.spawn(move || {
                drop(desktops);
                Ok(())
            }))
            .await;
            return Err(e);
        }
        let pool_id = self.new_id("p");
        let env_ids: Vec<String> = (0..n).map(|_| self.new_id("e")).collect();
        let pool = Arc::new(Pool {
            id: pool_id.clone(),
            spec: spec.clone(),
            env_ids: env_ids.clone(),
            last_used: Mutex::new(Instant::now()),
        });
        {
            let mut envs = lock(&self.envs);
            for ((i, id), desktop) in env_ids.iter().enumerate().zip(desktops) {
                let state = EnvState {
                    desktop: Some(desktop),
                    next_seed: spec.seed.wrapping_add(i as u64),
                    ..Default::default()
                };
                envs.insert(
                    id.clone(),
                    Arc::new(Env {
                        id: id.clone(),
                        pool: pool.clone(),
                        state: Mutex::new(state),
                    }),
                );
            }
        }
        lock(&self.pools).insert(pool_id.clone(), pool.clone());
        std::mem::forget(reservation);
        tracing::info!(pool = %pool_id, task = spec.task.id, n, w = spec.screen.width, h = spec.screen.height, "pool created");
        Ok(pool)
    }

    /// Stops every desktop of a pool. Waits for in-flight steps on its envs.
    pub async fn close_pool(self: &Arc<Self>, pool_id: &str) -> Result<u32, ServiceError> {
        let pool = lock(&self.pools).remove(pool_id).ok_or_else(|| {
            ServiceError::NotFound(format!(
                "pool {pool_id:?} not found (closed, reaped, or never created)"
            ))
        })?;
        let envs: Vec<Arc<Env>> = {
            let mut map = lock(&self.envs);
            pool.env_ids
                .iter()
                .filter_map(|id| map.remove(id))
                .collect()
        };
        let n = envs.len() as u32;
        Self::join(self.spawn(move || {
            for env in envs {
                let mut s = lock(&env.state);
                s.desktop = None;
                s.episode = None;
            }
            Ok(())
        }))
        .await?;
        *lock(&self.reserved) -= n;
        tracing::info!(pool = %pool_id, envs = n, "pool closed");
        Ok(n)
    }

    /// Closes every pool (shutdown).
    pub async fn close_all(self: &Arc<Self>) {
        let ids: Vec<String> = lock(&self.pools).keys().cloned().collect();
        for id in ids {
            let _ = self.close_pool(&id).await;
        }
    }

    /// Closes pools untouched for longer than `idle`; returns their ids.
    pub async fn reap_idle(self: &Arc<Self>, idle: Duration) -> Vec<String> {
        let stale: Vec<String> = lock(&self.pools)
            .values()
            .filter(|p| lock(&p.last_used).elapsed() > idle)
            .map(|p| p.id.clone())
            .collect();
        for id in &stale {
            tracing::warn!(pool = %id, idle_s = idle.as_secs(), "reaping idle pool");
            let _ = self.close_pool(id).await;
        }
        stale
    }

    /// Looks up an env and marks its pool as used.
    pub fn env(&self, env_id: &str) -> Result<Arc<Env>, ServiceError> {
        let env = lock(&self.envs).get(env_id).cloned().ok_or_else(|| {
            ServiceError::NotFound(format!(
                "env {env_id:?} not found (its pool was closed, reaped, or never created)"
            ))
        })?;
        env.pool.touch();
        Ok(env)
    }
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

fn observation(
    frame: Frame,
    pointer: deskgym_worker::Point,
    settle: SettleReport,
    enc: pb::ImageEncoding,
) -> Result<pb::Observation, ServiceError> {
    let (width, height, hash) = (frame.width, frame.height, frame.hash_hex());
    Ok(pb::Observation {
        frame: encode(frame, enc)?,
        encoding: enc as i32,
        width,
        height,
        frame_hash: hash,
        pointer: Some(pb::PointPx {
            x: pointer.x,
            y: pointer.y,
        }),
        settle: Some(pb::SettleReport {
            waited_ms: settle.waited_ms,
            quiesced: settle.quiesced,
            damage_events: settle.damage_events,
        }),
    })
}

impl Env {
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

    /// Gives back the desktop, restarting it when it is missing or dead.
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
        let spec = &self.pool.spec;
        let d = Desktop::start(DesktopConfig {
            task: spec.task.id.to_string(),
            width: spec.screen.width,
            height: spec.screen.height,
            settle: spec.settle,
        })?;
        tracing::info!(env = %self.id, display = d.display(), "desktop (re)started");
        Ok(s.desktop.insert(d))
    }

    /// Blocking: starts a new episode (restarting a dead desktop first).
    pub fn reset(
        &self,
        seed: Option<u64>,
        encoding: i32,
    ) -> Result<pb::ResetResponse, ServiceError> {
        let started = Instant::now();
        let enc = encoding_or(&self.pool.spec, encoding)?;
        let mut guard = lock(&self.state);
        self.reset_locked(&mut guard, seed, enc, started)
    }

    fn reset_locked(
        &self,
        s: &mut EnvState,
        seed: Option<u64>,
        enc: pb::ImageEncoding,
        started: Instant,
    ) -> Result<pb::ResetResponse, ServiceError> {
        let seed = seed.unwrap_or(s.next_seed);
        let result = (|| {
            let d = self.live_desktop(s)?;
            let out = d.reset(seed)?;
            let frame = d.capture()?;
            Ok::<_, ServiceError>((out, frame, d.pointer()))
        })();
        let (out, frame, pointer) = result.inspect_err(|e| {
            if e.code() == tonic::Code::Unavailable {
                s.desktop = None;
            }
            s.episode = None;
        })?;
        s.episodes += 1;
        s.next_seed = seed.wrapping_add(1);
        let ep = Episode {
            seed,
            number: s.episodes,
            step_index: 0,
            reward_so_far: out.app.reward,
            instruction: out.app.instruction,
            ended: None,
        };
        let observation = observation(frame, pointer, out.settle, enc)?;
        let info = self.info(&ep, started, s.desktop.as_ref().map(Desktop::display));
        s.episode = Some(ep);
        Ok(pb::ResetResponse {
            observation: Some(observation),
            info: Some(info),
        })
    }

    /// Blocking: one action, settle, capture.
    /// With `autoreset`, an episode that ends here is followed at once by the next one
    /// (Gymnasium's same-step autoreset); a failed autoreset is reported in
    /// `info.extra["autoreset_error"]` and leaves the env for an explicit Reset.
    pub fn step(
        &self,
        action: &Action,
        encoding: i32,
        autoreset: bool,
    ) -> Result<pb::StepResult, ServiceError> {
        let started = Instant::now();
        let enc = encoding_or(&self.pool.spec, encoding)?;
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
        let result = d
            .step(action)
            .and_then(|out| Ok((out, d.capture()?, d.pointer())));
        let display = d.display();
        let (out, frame, pointer) = match result {
            Ok(r) => r,
            Err(e) => {
                let fatal = e.is_fatal();
                let err = ServiceError::from(e);
                if fatal {
                    tracing::warn!(env = %self.id, error = %err, "desktop failed during step");
                    s.desktop = None;
                }
                return Err(err);
            }
        };
        ep.step_index += 1;
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
        let observation = observation(frame, pointer, out.settle, enc)?;
        let mut info = self.info(ep, started, Some(display));
        let reset = if autoreset && (terminated || truncated) {
            match self.reset_locked(s, None, enc, Instant::now()) {
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
    pub fn observe(&self, encoding: i32) -> Result<pb::Observation, ServiceError> {
        let enc = encoding_or(&self.pool.spec, encoding)?;
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
            Ok((frame, pointer)) => observation(
                frame,
                pointer,
                SettleReport {
                    quiesced: true,
                    ..Default::default()
                },
                enc,
            ),
            Err(e) => {
                if e.is_fatal() {
                    s.desktop = None;
                }
                Err(e.into())
            }
        }
    }
}
