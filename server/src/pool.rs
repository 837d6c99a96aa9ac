//! Pools of desktops, warm spares, checkpoints and fork, and the blocking thread pool
//! that drives them.
//!
//! Capacity: the desktops alive are counted from the pools themselves (envs + spares +
//! spares being started) plus creations in progress (`pending`), all checked under one
//! lock before anything starts, so a request over `max_envs` creates nothing.
//!
//! Lock order: `pending` → `pools` → a pool's `spares` → `envs` → `checkpoints`; an env's
//! own mutex is only taken on the step pool, never while holding these.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deskgym_proto::v1 as pb;
use deskgym_worker::{Desktop, DesktopConfig, Settle, TaskSpec};
use tokio::sync::oneshot;

use crate::config::Limits;
use crate::convert::Screen;
use crate::env::{Checkpoint, Env, ObsOptions, lock};
use crate::error::ServiceError;
use crate::frame_cache::FrameCache;
use crate::record::{self, RecordSettings};

/// Server defaults applied where a request leaves a field at zero.
pub const DEFAULT_WIDTH: u32 = 1280;
/// See [`DEFAULT_WIDTH`].
pub const DEFAULT_HEIGHT: u32 = 720;

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
    /// Desktops to keep started beside the envs.
    pub warm_spares: u32,
}

impl PoolSpec {
    fn desktop_config(&self) -> DesktopConfig {
        DesktopConfig {
            task: self.task.id.to_string(),
            width: self.screen.width,
            height: self.screen.height,
            settle: self.settle,
        }
    }

    /// Starts a desktop; a spare is also reset to the task's initial state and captured
    /// once, so its first real use skips the first-draw and first-capture costs
    /// (measured at ~40 ms on a fresh desktop).
    pub(crate) fn start_desktop(&self, spare: bool) -> Result<Desktop, ServiceError> {
        let mut d = Desktop::start(self.desktop_config())?;
        if spare {
            d.reset(self.seed)?;
            d.capture()?;
        }
        Ok(d)
    }
}

/// A pool: a set of envs created together, and its warm spares.
#[derive(Debug)]
pub struct Pool {
    /// Opaque id.
    pub id: String,
    /// What its envs run.
    pub spec: PoolSpec,
    /// Its envs, in creation order.
    pub env_ids: Vec<String>,
    last_used: Mutex<Instant>,
    spares: Mutex<Vec<Desktop>>,
    spares_starting: AtomicU32,
    closed: AtomicBool,
    /// The pool's recording, when it records; taken (and closed) with the pool.
    recorder: Mutex<Option<deskgym_datasets::Recorder>>,
    /// Where the recording goes.
    pub recording_path: Option<std::path::PathBuf>,
}

impl Pool {
    /// Queues a record when the pool records; `make` is not even called otherwise.
    pub(crate) fn record(&self, make: impl FnOnce() -> deskgym_datasets::Record) {
        if self.recording_path.is_some()
            && let Some(r) = lock(&self.recorder).as_ref()
        {
            r.send(make());
        }
    }

    fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    /// A started desktop, if a spare is ready (the pool tops spares up in the background).
    pub(crate) fn take_spare(&self) -> Option<Desktop> {
        lock(&self.spares).pop()
    }

    fn desktops_held(&self) -> u32 {
        self.env_ids.len() as u32
            + lock(&self.spares).len() as u32
            + self.spares_starting.load(Ordering::Relaxed)
    }
}

/// Owns every pool, env and checkpoint, the fleet frame cache and the step pool.
pub struct PoolManager {
    limits: Limits,
    executor: rayon::ThreadPool,
    /// The fleet frame cache, shared by every pool.
    pub cache: FrameCache,
    pools: Mutex<HashMap<String, Arc<Pool>>>,
    envs: Mutex<HashMap<String, Arc<Env>>>,
    checkpoints: Mutex<Vec<Arc<Checkpoint>>>,
    /// Desktops being started for pools not yet registered.
    pending: Mutex<u32>,
    next_id: AtomicU64,
    /// Distinguishes ids of this server instance from a previous one's.
    nonce: String,
    record: RecordSettings,
}

impl std::fmt::Debug for PoolManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolManager")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Gives pending slots back when a creation ends, whether it succeeded or not (a
/// successful one is counted through its pool from then on).
struct Pending<'a> {
    mgr: &'a PoolManager,
    n: u32,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        *lock(&self.mgr.pending) -= self.n;
    }
}

impl PoolManager {
    /// Creates a manager whose blocking work runs on `threads` dedicated threads.
    pub fn new(limits: Limits, threads: usize, record: RecordSettings) -> std::io::Result<Self> {
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
            cache: FrameCache::new(limits.frame_cache_bytes),
            limits,
            executor,
            pools: Mutex::default(),
            envs: Mutex::default(),
            checkpoints: Mutex::default(),
            pending: Mutex::new(0),
            next_id: AtomicU64::new(1),
            nonce: format!("{:06x}", nanos & 0xff_ffff),
            record,
        })
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Desktops alive or being started, over all pools.
    pub fn env_count(&self) -> u32 {
        let pending = lock(&self.pending);
        *pending + self.held_by_pools()
    }

    fn held_by_pools(&self) -> u32 {
        lock(&self.pools).values().map(|p| p.desktops_held()).sum()
    }

    /// Reserves `n` desktop slots or fails with RESOURCE_EXHAUSTED, creating nothing.
    fn reserve(&self, n: u32, what: &str) -> Result<Pending<'_>, ServiceError> {
        let mut pending = lock(&self.pending);
        let used = *pending + self.held_by_pools();
        let max = self.limits.max_envs;
        if used + n > max {
            return Err(ServiceError::ResourceExhausted(format!(
                "{what} needs {n} desktops but only {} of the server's max_envs={max} are free",
                max.saturating_sub(used)
            )));
        }
        *pending += n;
        Ok(Pending { mgr: self, n })
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
            warm_spares: req.warm_spares,
        })
    }

    /// Starts `n` desktops in parallel, the last `spares` of them as warm spares; all or
    /// nothing.
    async fn start_desktops(
        &self,
        spec: &PoolSpec,
        n: u32,
        spares: u32,
    ) -> Result<Vec<Desktop>, ServiceError> {
        let jobs: Vec<_> = (0..n)
            .map(|i| {
                let spec = spec.clone();
                self.spawn(move || spec.start_desktop(i >= n - spares))
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
        match first_err {
            None => Ok(desktops),
            Some(e) => {
                // Dropping stops the desktops that did start; do it off the runtime.
                let _ = Self::join(self.spawn(move || {
                    drop(desktops);
                    Ok(())
                }))
                .await;
                Err(e)
            }
        }
    }

    /// Registers a pool around started desktops (envs first, the rest become spares).
    fn register(
        &self,
        spec: PoolSpec,
        mut desktops: Vec<Desktop>,
        n: u32,
        recorder: Option<deskgym_datasets::Recorder>,
    ) -> Arc<Pool> {
        let spares = desktops.split_off(n as usize);
        let pool_id = self.new_id("p");
        let env_ids: Vec<String> = (0..n).map(|_| self.new_id("e")).collect();
        let pool = Arc::new(Pool {
            id: pool_id.clone(),
            spec,
            env_ids: env_ids.clone(),
            last_used: Mutex::new(Instant::now()),
            spares: Mutex::new(spares),
            spares_starting: AtomicU32::new(0),
            closed: AtomicBool::new(false),
            recording_path: recorder.as_ref().map(|r| r.dir().to_path_buf()),
            recorder: Mutex::new(recorder),
        });
        pool.record(|| {
            record::event(
                "pool_created",
                "",
                serde_json::json!({
                    "pool_id": pool.id, "task": pool.spec.task.id, "envs": pool.env_ids,
                    "screen": [pool.spec.screen.width, pool.spec.screen.height],
                    "max_steps": pool.spec.max_steps, "settle_ms": pool.spec.settle.settle_ms,
                }),
            )
        });
        let envs: Vec<_> = env_ids
            .iter()
            .zip(desktops)
            .enumerate()
            .map(|(i, (id, d))| {
                let first_seed = pool.spec.seed.wrapping_add(i as u64);
                pool.record(|| {
                    record::event(
                        "env_started",
                        id,
                        serde_json::json!({"display": d.display(), "warm_spare": false}),
                    )
                });
                (
                    id.clone(),
                    Arc::new(Env::new(id.clone(), pool.clone(), Some(d), first_seed)),
                )
            })
            .collect();
        // Pool before envs: the pool's count takes over from `pending` in one step.
        lock(&self.pools).insert(pool_id, pool.clone());
        lock(&self.envs).extend(envs);
        pool
    }

    /// Starts every desktop of a new pool (and its warm spares) in parallel. All or
    /// nothing: over the limit, or if one fails to start, nothing is left behind.
    pub async fn create_pool(
        self: &Arc<Self>,
        spec: PoolSpec,
        n: u32,
        record_as: Option<&str>,
    ) -> Result<Arc<Pool>, ServiceError> {
        let total = n + spec.warm_spares;
        let pending = self.reserve(total, "this pool")?;
        let recorder = record_as
            .map(|name| record::open(&self.record, name, &spec))
            .transpose()?;
        let desktops = match self.start_desktops(&spec, total, spec.warm_spares).await {
            Ok(d) => d,
            Err(e) => {
                // Nothing half-created: not even an empty bundle.
                if let Some(r) = recorder {
                    let dir = r.dir().to_path_buf();
                    drop(r.close());
                    let _ = std::fs::remove_dir_all(dir);
                }
                return Err(e);
            }
        };
        let pool = self.register(spec, desktops, n, recorder);
        drop(pending);
        tracing::info!(pool = %pool.id, task = pool.spec.task.id, n, spares = pool.spec.warm_spares,
            w = pool.spec.screen.width, h = pool.spec.screen.height, "pool created");
        Ok(pool)
    }

    /// Starts missing warm spares of every pool (called periodically), as far as the
    /// limits allow.
    pub fn top_up_spares(self: &Arc<Self>) {
        let pools: Vec<Arc<Pool>> = lock(&self.pools).values().cloned().collect();
        for pool in pools {
            loop {
                let have =
                    lock(&pool.spares).len() as u32 + pool.spares_starting.load(Ordering::Relaxed);
                if have >= pool.spec.warm_spares || pool.closed.load(Ordering::Relaxed) {
                    break;
                }
                {
                    // Under the capacity lock, so a concurrent creation sees this spare.
                    let pending = lock(&self.pending);
                    if *pending + self.held_by_pools() + 1 > self.limits.max_envs {
                        return;
                    }
                    pool.spares_starting.fetch_add(1, Ordering::Relaxed);
                }
                let p = pool.clone();
                drop(self.spawn(move || {
                    let started = p.spec.start_desktop(true);
                    p.spares_starting.fetch_sub(1, Ordering::Relaxed);
                    match started {
                        Ok(d) if !p.closed.load(Ordering::Relaxed) => lock(&p.spares).push(d),
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(pool = %p.id, error = %e, "warm spare failed to start")
                        }
                    }
                    Ok(())
                }));
            }
        }
    }

    /// Stops every desktop of a pool and deletes its checkpoints. Waits for in-flight
    /// steps on its envs.
    pub async fn close_pool(
        self: &Arc<Self>,
        pool_id: &str,
    ) -> Result<(u32, Option<std::path::PathBuf>), ServiceError> {
        let pool = lock(&self.pools).remove(pool_id).ok_or_else(|| {
            ServiceError::NotFound(format!(
                "pool {pool_id:?} not found (closed, reaped, or never created)"
            ))
        })?;
        pool.closed.store(true, Ordering::Relaxed);
        let envs: Vec<Arc<Env>> = {
            let mut map = lock(&self.envs);
            pool.env_ids
                .iter()
                .filter_map(|id| map.remove(id))
                .collect()
        };
        lock(&self.checkpoints).retain(|c| c.pool.id != pool.id);
        let n = envs.len() as u32;
        if pool.recording_path.is_some() {
            let (p, e) = (pool.clone(), envs.clone());
            Self::join(self.spawn(move || {
                for env in &e {
                    env.finish_recording("closed");
                }
                p.record(|| record::event("pool_closed", "", serde_json::json!({"pool_id": p.id})));
                Ok(())
            }))
            .await?;
        }
        // Stopping a desktop waits for its processes to exit: stop them all at once.
        let desktops: Vec<Desktop> = std::mem::take(&mut *lock(&pool.spares))
            .into_iter()
            .chain(envs.iter().filter_map(|e| e.take_desktop()))
            .collect();
        let stops: Vec<_> = desktops
            .into_iter()
            .map(|d| {
                self.spawn(move || {
                    drop(d);
                    Ok(())
                })
            })
            .collect();
        for s in stops {
            Self::join(s).await?;
        }
        let recorder = lock(&pool.recorder).take();
        if let Some(r) = recorder {
            let m = Self::join(self.spawn(move || {
                r.close().map_err(|e| {
                    ServiceError::Internal(format!("finishing the recording failed: {e}"))
                })
            }))
            .await?;
            tracing::info!(pool = %pool_id, run = %m.run_id, episodes = m.counts.episodes, steps = m.counts.steps,
                frames_stored = m.counts.frames_stored, frames_observed = m.counts.frames_observed,
                dropped = m.dropped_records, "recording closed");
        }
        tracing::info!(pool = %pool_id, envs = n, "pool closed");
        Ok((n, pool.recording_path.clone()))
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

    /// Saves an env's state as a new checkpoint, within `max_checkpoints`.
    pub async fn save(self: &Arc<Self>, env_id: &str) -> Result<Arc<Checkpoint>, ServiceError> {
        let env = self.env(env_id)?;
        let id = self.new_id("c");
        let cp = Arc::new(Self::join(self.spawn(move || env.save(id))).await?);
        let mut all = lock(&self.checkpoints);
        if all.len() >= self.limits.max_checkpoints as usize {
            return Err(ServiceError::ResourceExhausted(format!(
                "the server holds max_checkpoints={} checkpoints; delete some first",
                self.limits.max_checkpoints
            )));
        }
        all.push(cp.clone());
        Ok(cp)
    }

    /// Looks up a checkpoint.
    pub fn checkpoint(&self, id: &str) -> Result<Arc<Checkpoint>, ServiceError> {
        lock(&self.checkpoints)
            .iter()
            .find(|c| c.id == id)
            .cloned()
            .ok_or_else(|| {
                ServiceError::NotFound(format!(
                    "checkpoint {id:?} not found (deleted, its pool closed, or never saved)"
                ))
            })
    }

    /// Checkpoints of one pool (or all, for an empty id), in creation order.
    pub fn list_checkpoints(&self, pool_id: &str) -> Vec<Arc<Checkpoint>> {
        lock(&self.checkpoints)
            .iter()
            .filter(|c| pool_id.is_empty() || c.pool.id == pool_id)
            .cloned()
            .collect()
    }

    /// Deletes a checkpoint.
    pub fn delete_checkpoint(&self, id: &str) -> Result<(), ServiceError> {
        let mut all = lock(&self.checkpoints);
        let before = all.len();
        all.retain(|c| c.id != id);
        if all.len() == before {
            return Err(ServiceError::NotFound(format!(
                "checkpoint {id:?} not found"
            )));
        }
        Ok(())
    }

    /// Creates a pool of `n` replicas of a checkpoint: desktops come from the source
    /// pool's warm spares first, then fresh starts; each is rebuilt by replay and its
    /// frame hash compared with the checkpoint's. All or nothing.
    pub async fn fork(
        self: &Arc<Self>,
        cp_id: &str,
        n: u32,
        encoding: i32,
    ) -> Result<pb::ForkResponse, ServiceError> {
        let t0 = Instant::now();
        let cp = self.checkpoint(cp_id)?;
        if n == 0 {
            return Err(ServiceError::invalid("n", "must be at least 1"));
        }
        let mut spec = cp.pool.spec.clone();
        spec.warm_spares = 0;
        // Spares first: they already hold a slot, so only the rest is reserved.
        let mut desktops: Vec<Desktop> = {
            let mut spares = lock(&cp.pool.spares);
            let keep = spares.len().saturating_sub(n as usize);
            spares.split_off(keep)
        };
        let from_spares = desktops.len() as u32;
        let pending = match self.reserve(n - from_spares, "this fork") {
            Ok(p) => p,
            Err(e) => {
                lock(&cp.pool.spares).append(&mut desktops);
                return Err(e);
            }
        };
        // Until registered, the moved spares are counted as pending too.
        *lock(&self.pending) += from_spares;
        let moved = Pending {
            mgr: self,
            n: from_spares,
        };
        match self.start_desktops(&spec, n - from_spares, 0).await {
            Ok(more) => desktops.extend(more),
            Err(e) => {
                drop(self.spawn(move || {
                    drop(desktops);
                    Ok(())
                }));
                return Err(e);
            }
        }
        let pool = self.register(spec, desktops, n, None);
        drop((pending, moved));
        let t_desktops = t0.elapsed();

        let opts = ObsOptions {
            encoding,
            known: Vec::new(),
        };
        let jobs: Vec<_> = pool
            .env_ids
            .iter()
            .map(|id| {
                let (env, cp, opts, mgr) = (self.env(id), cp.clone(), opts.clone(), self.clone());
                self.spawn(move || env?.restore(&mgr.cache, &cp, &opts))
            })
            .collect();
        let mut replicas = Vec::with_capacity(jobs.len());
        for (job, env_id) in jobs.into_iter().zip(&pool.env_ids) {
            match Self::join(job).await {
                Ok(r) => replicas.push(pb::Replica {
                    env_id: env_id.clone(),
                    fidelity: r.fidelity,
                    observation: r.observation,
                    info: r.info,
                }),
                Err(e) => {
                    let _ = self.close_pool(&pool.id).await;
                    return Err(e);
                }
            }
        }
        tracing::info!(checkpoint = %cp.id, pool = %pool.id, n, from_spares,
            desktops_ms = t_desktops.as_millis() as u64, total_ms = t0.elapsed().as_millis() as u64, "forked");
        // The source pool's spares are refilled by housekeeping shortly after: starting
        // servers here would compete with this reply and the replicas' first steps.
        Ok(pb::ForkResponse {
            pool_id: pool.id.clone(),
            replicas,
            expected_hash: deskgym_worker::hash_hex(cp.frame_hash()),
            from_spares,
        })
    }
}
