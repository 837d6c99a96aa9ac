//! Pools of desktops, warm spares, checkpoints and fork, and the blocking thread pool
//! that drives them.
//!
//! Capacity: the desktops alive are counted from the pools themselves (envs + spares +
//! spares being started) plus creations in progress (`pending`), all checked under one
//! lock before anything starts, so a request over `max_envs` creates nothing.
//!
//! Concurrency, in one paragraph: every env operation goes through `on_env`
//! (`executor.rs`), so at most one call is in flight per env (a second one answers
//! ABORTED at once); blocking work runs on the step pool, admitted up to
//! `Limits::max_queued_ops` (beyond: RESOURCE_EXHAUSTED) and skipped when its caller
//! has gone; async handlers never take an env's state lock and await every job with a
//! deadline (`Limits::op_timeout`), past which a running env's desktop is killed.
//!
//! Lock order (the only one the code takes; every other lock is taken alone, for a
//! statement): an env's `state` → `pending` → `pools` → a pool's `spares` / `last_used`
//! → `envs` → `checkpoints`. A pool's recorder is a leaf read lock, taken only to send.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use deskgym_proto::v1 as pb;
use tokio::sync::oneshot;

use crate::auth::Principal;
use crate::config::Limits;
use crate::env::{Call, Checkpoint, Env, EnvError, ObsOptions};
use crate::frame_cache::FrameCache;
use crate::pool_state::PoolState;
use crate::record::{self, RecordSettings, RecordingError};
use crate::spec::{Invalid, PoolSpec, Screen, Usage};
use crate::sync::lock;
use deskgym_worker::{Backend, Desktop};

mod checkpoints;
mod error;
mod executor;
mod fork;
mod parked;

pub(crate) use error::PoolError;
pub(crate) use executor::EnvJob;

/// How long ClosePool waits for a recording to finish (flush, roll, final manifest).
const RECORDING_CLOSE_LIMIT: Duration = Duration::from_secs(60);

/// Owns every pool, env and checkpoint, the fleet frame cache and the step pool.
pub(crate) struct PoolManager {
    limits: Limits,
    /// What starts desktops (real Xvfb desktops, or a fake in unit tests).
    backend: Arc<dyn Backend>,
    executor: executor::Workers,
    /// Blocking jobs admitted and not finished (bounded by `limits.max_queued_ops`).
    queued: Arc<AtomicUsize>,
    /// Jobs on each owner's envs admitted and not finished (bounded by the owner's
    /// `threads=` share, so one principal's slow desktops cannot hold every thread).
    queued_by_owner: crate::sync::Holdings,
    /// The fleet frame cache, shared by every pool.
    pub cache: FrameCache,
    pools: Mutex<HashMap<String, Arc<PoolState>>>,
    envs: Mutex<HashMap<String, Arc<Env>>>,
    checkpoints: Mutex<Vec<Arc<Checkpoint>>>,
    /// Desktops being started for pools not yet registered.
    pending: Mutex<PendingState>,
    next_id: AtomicU64,
    /// Keys of the id generator: ids are a keyed hash (SipHash, random 128-bit key per
    /// server) of a counter, so they never repeat and cannot be guessed from others.
    id_keys: RandomState,
    record: RecordSettings,
    /// Profiles and the capabilities pools may be granted.
    policy: crate::spec::Policy,
    /// When the reaper last looked (its lateness tells a stalled server).
    last_reap: Mutex<Option<tokio::time::Instant>>,
}

/// A reaper round this late after the last means the server itself did not run (an
/// overloaded host, a stopped process): renewals could not land meanwhile.
const STALLED: Duration = Duration::from_secs(1);

impl std::fmt::Debug for PoolManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolManager")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Desktops being started, in all and per owner.
#[derive(Debug, Default)]
struct PendingState {
    total: Usage,
    by_owner: HashMap<Arc<str>, Usage>,
    /// Each owner's shares as its latest request carried them (warm spares are
    /// started within them, with no request at hand).
    shares: HashMap<Arc<str>, Principal>,
}

/// Gives pending slots back when a creation ends, whether it succeeded or not (a
/// successful one is counted through its pool from then on).
struct Pending<'a> {
    mgr: &'a PoolManager,
    n: Usage,
    owner: Arc<str>,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let mut p = lock(&self.mgr.pending);
        p.total.desktops -= self.n.desktops;
        p.total.pixels -= self.n.pixels;
        if let Some(c) = p.by_owner.get_mut(&self.owner) {
            c.desktops -= self.n.desktops;
            c.pixels -= self.n.pixels;
            if c.desktops == 0 {
                p.by_owner.remove(&self.owner);
            }
        }
    }
}

impl PoolManager {
    /// Creates a manager of real desktops whose blocking work runs on `threads`
    /// dedicated threads (the server picks its backend: [`Self::with_backend`]).
    #[cfg(test)]
    pub(crate) fn new(
        limits: Limits,
        threads: usize,
        record: RecordSettings,
    ) -> std::io::Result<Self> {
        Self::with_backend(
            limits,
            threads,
            record,
            Arc::new(deskgym_worker::LocalBackend),
        )
    }

    /// Creates a manager whose desktops come from `backend`.
    pub(crate) fn with_backend(
        limits: Limits,
        threads: usize,
        record: RecordSettings,
        backend: Arc<dyn Backend>,
    ) -> std::io::Result<Self> {
        let executor = executor::Workers::new(threads)?;
        Ok(Self {
            backend,
            queued: Arc::default(),
            queued_by_owner: Arc::default(),
            cache: FrameCache::new(limits.frame_cache_bytes),
            limits,
            executor,
            pools: Mutex::default(),
            envs: Mutex::default(),
            checkpoints: Mutex::default(),
            pending: Mutex::default(),
            next_id: AtomicU64::new(1),
            id_keys: RandomState::new(),
            record,
            last_reap: Mutex::default(),
            policy: {
                let catalog =
                    crate::profiles::Catalog::load(None).map_err(std::io::Error::other)?;
                let tasks = crate::tasks::Tasks::load(None, None, &catalog)
                    .map_err(std::io::Error::other)?;
                crate::spec::Policy {
                    catalog,
                    tasks,
                    ..Default::default()
                }
            },
        })
    }

    /// Sets the profiles and the capability policy (the default: the bundled catalog,
    /// no capabilities).
    pub(crate) fn with_policy(mut self, policy: crate::spec::Policy) -> Self {
        self.policy = policy;
        self
    }

    /// The profiles and the capability policy.
    pub(crate) fn policy(&self) -> &crate::spec::Policy {
        &self.policy
    }

    /// The limits in force.
    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Desktops alive or being started, over all pools.
    pub(crate) fn env_count(&self) -> u32 {
        let pending = lock(&self.pending).total;
        pending.desktops + self.held_by_pools().desktops
    }

    /// Desktops (and pixels) alive or being started, over all pools.
    pub(crate) fn usage(&self) -> Usage {
        let pending = lock(&self.pending).total;
        pending.plus(self.held_by_pools()).unwrap_or(pending)
    }

    /// Whose folder `who`'s recordings are in (`None`: the data dir, no tokens).
    fn runs_owner<'a>(&self, who: &'a Principal) -> Option<&'a str> {
        self.policy().tenants.then_some(&*who.name)
    }

    /// Blocking: `who`'s recordings.
    pub(crate) fn recordings(&self, who: &Principal) -> Vec<record::RunInfo> {
        record::list(&self.record, self.runs_owner(who))
    }

    /// Blocking: where one of `who`'s recordings is (NOT_FOUND for another's).
    pub(crate) fn recording_dir(
        &self,
        who: &Principal,
        run: &str,
    ) -> Result<std::path::PathBuf, PoolError> {
        Ok(record::bundle_of(&self.record, self.runs_owner(who), run)?)
    }

    /// Blocking: a piece of one of `who`'s recordings' files.
    pub(crate) fn recording_file(
        &self,
        who: &Principal,
        run: &str,
        path: &str,
        offset: u64,
    ) -> Result<(u64, Vec<u8>, bool), PoolError> {
        let max = self.limits.max_file_bytes;
        Ok(record::read_file(
            &self.record,
            self.runs_owner(who),
            run,
            path,
            offset,
            max,
        )?)
    }

    /// Blocking: deletes one of `who`'s finished recordings.
    pub(crate) fn delete_recording(&self, who: &Principal, run: &str) -> Result<(), PoolError> {
        let writing: Vec<std::path::PathBuf> = lock(&self.pools)
            .values()
            .filter_map(|p| p.recording_path.clone())
            .collect();
        Ok(record::delete(
            &self.record,
            self.runs_owner(who),
            run,
            |dir| writing.iter().any(|w| w == dir),
        )?)
    }

    /// What `owner`'s pools hold.
    pub(crate) fn usage_of(&self, owner: &str) -> Usage {
        lock(&self.pools)
            .values()
            .filter(|p| &*p.owner == owner)
            .map(|p| p.usage())
            .fold(Usage::default(), |a, b| a.plus(b).unwrap_or(a))
    }

    /// Pools open, and how many of them record.
    pub(crate) fn pool_counts(&self) -> (usize, usize) {
        let pools = lock(&self.pools);
        let recording = pools
            .values()
            .filter(|p| p.recording_path.is_some())
            .count();
        (pools.len(), recording)
    }

    /// `who`'s pools, oldest first, each with its envs (for the console).
    pub(crate) fn pools_of(&self, who: &Principal) -> Vec<(Arc<PoolState>, Vec<Arc<Env>>)> {
        let mut pools: Vec<Arc<PoolState>> = lock(&self.pools)
            .values()
            .filter(|p| p.owner == who.name && !p.closed.load(Ordering::Acquire))
            .cloned()
            .collect();
        // Ids are `p<n>-...`: creation order is numeric order of n.
        pools.sort_by_key(|p| {
            let n = p.id.trim_start_matches('p');
            let digits = n.find(|c: char| !c.is_ascii_digit()).unwrap_or(n.len());
            (n[..digits].parse::<u64>().unwrap_or(u64::MAX), p.id.clone())
        });
        let envs = lock(&self.envs);
        pools
            .into_iter()
            .map(|p| {
                let of = p
                    .env_ids
                    .iter()
                    .filter_map(|id| envs.get(id).cloned())
                    .collect();
                (p, of)
            })
            .collect()
    }

    /// Checks `who`'s shares (desktops and pixels) for `more` (the caller holds
    /// `pending`).
    fn fits_owner(
        &self,
        pending: &PendingState,
        who: &Principal,
        more: Usage,
    ) -> Result<(), PoolError> {
        let owner = &*who.name;
        let waiting = pending.by_owner.get(owner).copied().unwrap_or_default();
        let used = waiting.plus(self.usage_of(owner)).unwrap_or(waiting);
        let after = used.plus(more);
        let quota = who.max_desktops;
        if after.is_none_or(|a| a.desktops > quota) {
            return Err(PoolError::Limit(format!(
                "principal {owner} holds {} desktops of its quota of {quota}; this needs \
                 {} more (close pools, or ask for a larger quota)",
                used.desktops, more.desktops
            )));
        }
        let share = who.max_pixels;
        if after.is_none_or(|a| a.pixels > share) {
            return Err(PoolError::Limit(format!(
                "principal {owner} holds {} pixels of desktops of its share of {share}; this \
                 needs {} more (ask for fewer or smaller screens, or a larger `pixels=` share)",
                used.pixels, more.pixels
            )));
        }
        Ok(())
    }

    fn held_by_pools(&self) -> Usage {
        lock(&self.pools)
            .values()
            .map(|p| p.usage())
            .fold(Usage::default(), |a, b| a.plus(b).unwrap_or(a))
    }

    /// Checks that `more` fits beside everything held and pending; the caller holds the
    /// `pending` lock, so no concurrent creation can slip in between.
    fn fits(&self, pending: Usage, more: Usage, what: &str) -> Result<(), PoolError> {
        let used = pending.plus(self.held_by_pools()).unwrap_or(pending);
        let l = &self.limits;
        let after = used.plus(more);
        if after.is_none_or(|a| a.desktops > l.max_envs) {
            return Err(PoolError::Limit(format!(
                "{what} needs {} desktops but only {} of the server's max_envs={} are free",
                more.desktops,
                l.max_envs.saturating_sub(used.desktops),
                l.max_envs
            )));
        }
        if after.is_none_or(|a| a.pixels > l.max_total_pixels) {
            return Err(PoolError::Limit(format!(
                "{what} needs {} pixels of desktops but only {} of the server's \
                 max_total_pixels={} are free; ask for fewer or smaller screens",
                more.pixels,
                l.max_total_pixels.saturating_sub(used.pixels),
                l.max_total_pixels
            )));
        }
        Ok(())
    }

    /// Reserves `n` desktops of `screen` or fails with RESOURCE_EXHAUSTED, creating
    /// nothing. Parked replicas give way: while the reservation does not fit, the least
    /// recently parked one is stopped (`who`'s own where its quota is short).
    fn reserve(
        &self,
        n: u32,
        screen: Screen,
        who: &Principal,
        what: &str,
    ) -> Result<Pending<'_>, PoolError> {
        loop {
            let e = match self.try_reserve(n, screen, who, what) {
                Ok(p) => return Ok(p),
                Err(e) => e,
            };
            let quota_short = {
                let pending = lock(&self.pending);
                self.fits_owner(&pending, who, Usage::of(n, screen))
                    .is_err()
            };
            let owner = quota_short.then_some(&*who.name);
            if !self.evict_parked(owner, None) {
                return Err(e);
            }
        }
    }

    /// [`Self::reserve`] without stopping parked replicas. Hostile counts cannot wrap:
    /// sums are checked.
    fn try_reserve(
        &self,
        n: u32,
        screen: Screen,
        who: &Principal,
        what: &str,
    ) -> Result<Pending<'_>, PoolError> {
        let mut pending = lock(&self.pending);
        let more = Usage::of(n, screen);
        self.fits(pending.total, more, what)?;
        self.fits_owner(&pending, who, more)?;
        pending.shares.insert(who.name.clone(), who.clone());
        self.cache.scope(&who.name, &who.cache_scope);
        // The checks above proved the sums are in range.
        pending.total = pending.total.plus(more).unwrap_or(pending.total);
        let own = pending.by_owner.entry(who.name.clone()).or_default();
        *own = own.plus(more).unwrap_or(*own);
        Ok(Pending {
            mgr: self,
            n: more,
            owner: who.name.clone(),
        })
    }

    fn new_id(&self, prefix: &str) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let a = self.id_keys.hash_one((n, 0u8));
        let b = self.id_keys.hash_one((n, 1u8));
        format!("{prefix}{a:016x}{b:016x}")
    }

    /// Validates a CreatePool request into a spec.
    pub(crate) fn spec(&self, req: &pb::CreatePoolRequest) -> Result<PoolSpec, PoolError> {
        Ok(crate::spec::validate(
            req,
            &self.limits,
            &self.backend,
            &self.policy,
        )?)
    }

    /// Starts `n` desktops in parallel, the last `spares` of them as warm spares; all or
    /// nothing.
    async fn start_desktops(
        &self,
        spec: &PoolSpec,
        n: u32,
        spares: u32,
    ) -> Result<Vec<Box<dyn Desktop>>, PoolError> {
        let jobs: Vec<_> = (0..n)
            .map(|i| {
                let spec = spec.clone();
                self.spawn(move || {
                    spec.start_desktop(i >= n - spares)
                        .map_err(PoolError::Start)
                })
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
                let _ = Self::join(self.spawn_internal(move || {
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
        mut desktops: Vec<Box<dyn Desktop>>,
        n: u32,
        recorder: Option<deskgym_datasets::Recorder>,
        who: &Principal,
    ) -> Arc<PoolState> {
        let spares = desktops.split_off((n as usize).min(desktops.len()));
        let spec_lease = spec.lease;
        let pool_id = self.new_id("p");
        let env_ids: Vec<String> = (0..n).map(|_| self.new_id("e")).collect();
        let pool = Arc::new(PoolState {
            id: pool_id.clone(),
            owner: who.name.clone(),
            owner_quota: who.max_desktops,
            spec,
            env_ids: env_ids.clone(),
            last_used: Mutex::new(tokio::time::Instant::now()),
            spares: Mutex::new(spares),
            spares_starting: AtomicU32::new(0),
            parked: Mutex::default(),
            in_flight: AtomicU32::new(0),
            closed: AtomicBool::new(false),
            recording_path: recorder.as_ref().map(|r| r.dir().to_path_buf()),
            recorder: RwLock::new(recorder),
            lease: spec_lease,
        });
        pool.record(|| {
            record::event(
                "pool_created",
                "",
                serde_json::json!({
                    "pool_id": pool.id, "task": pool.spec.task.id, "envs": pool.env_ids,
                    "screen": [pool.spec.screen.width, pool.spec.screen.height],
                    "max_steps": pool.spec.max_steps, "settle_ms": pool.spec.settle.settle_ms,
                    "settle_policy": pool.spec.settle.policy.name(),
                }),
            )
        });
        let envs: Vec<_> = env_ids
            .iter()
            .zip(desktops)
            .enumerate()
            .map(|(i, (id, d))| {
                let seed_base = pool.spec.seed.wrapping_add(i as u64);
                let display = d.display();
                let env = Env::new(id.clone(), pool.clone(), Some(d), seed_base);
                env.event(
                    "env_started",
                    || serde_json::json!({"display": display, "warm_spare": false}),
                );
                (id.clone(), Arc::new(env))
            })
            .collect();
        // Pool before envs: the pool's count takes over from `pending` in one step.
        lock(&self.pools).insert(pool_id, pool.clone());
        lock(&self.envs).extend(envs);
        pool
    }

    /// Starts every desktop of a new pool (and its warm spares) in parallel. All or
    /// nothing: over the limit, or if one fails to start, nothing is left behind.
    pub(crate) async fn create_pool(
        self: &Arc<Self>,
        spec: PoolSpec,
        n: u32,
        record_as: Option<&str>,
        who: &Principal,
    ) -> Result<Arc<PoolState>, PoolError> {
        let total = n.checked_add(spec.warm_spares).ok_or_else(|| {
            PoolError::Limit(format!(
                "num_envs + warm_spares overflows; the server's max_envs is {}",
                self.limits.max_envs
            ))
        })?;
        let pending = self.reserve(total, spec.screen, who, "this pool")?;
        let recorder = match record_as.map(str::to_string) {
            // Blocking (counts the principal's runs, writes the first manifest): off the runtime.
            Some(name) => {
                let (settings, spec, who) = (self.record.clone(), spec.clone(), who.clone());
                let owner = self.runs_owner(&who).map(str::to_string);
                let open = move || record::open(&settings, &name, &spec, owner.as_deref(), &who);
                Some(Self::join(self.spawn_internal(move || open().map_err(Into::into))).await?)
            }
            None => None,
        };
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
        let pool = self.register(spec, desktops, n, recorder, who);
        drop(pending);
        tracing::info!(pool = %pool.id, task = pool.spec.task.id, n, spares = pool.spec.warm_spares,
            w = pool.spec.screen.width, h = pool.spec.screen.height, "pool created");
        Ok(pool)
    }

    /// Starts missing warm spares of every pool (called periodically), as far as the
    /// limits allow.
    pub(crate) fn top_up_spares(self: &Arc<Self>) {
        let pools: Vec<Arc<PoolState>> = lock(&self.pools).values().cloned().collect();
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
                    let one = Usage::of(1, pool.spec.screen);
                    let fits_owner = pending
                        .shares
                        .get(&pool.owner)
                        .map(|who| Principal {
                            // The quota the pool was made under, as before shares.
                            max_desktops: pool.owner_quota,
                            ..who.clone()
                        })
                        .is_some_and(|who| self.fits_owner(&pending, &who, one).is_ok());
                    if self.fits(pending.total, one, "a spare").is_err() || !fits_owner {
                        break;
                    }
                    pool.spares_starting.fetch_add(1, Ordering::Relaxed);
                }
                let p = pool.clone();
                drop(self.spawn_internal(move || {
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

    /// Stops every desktop of a pool and deletes its checkpoints. A call in flight on
    /// one of its envs finishes first (within its op_timeout); that wait happens on the
    /// step pool, never on an async worker.
    ///
    /// `who`: the caller, who must own the pool (anyone else gets NOT_FOUND); `None` for
    /// the server itself (shutdown, reaping).
    pub(crate) async fn close_pool(
        self: &Arc<Self>,
        pool_id: &str,
        who: Option<&Principal>,
    ) -> Result<(u32, Option<std::path::PathBuf>), PoolError> {
        let pool = {
            let mut pools = lock(&self.pools);
            match pools.get(pool_id) {
                Some(p) if who.is_none_or(|w| w.name == p.owner) => pools.remove(pool_id),
                _ => None,
            }
        }
        .ok_or_else(|| PoolError::not_found("pool", pool_id, "closed, reaped, or never created"))?;
        pool.closed.store(true, Ordering::Relaxed);
        let envs: Vec<Arc<Env>> = {
            let mut map = lock(&self.envs);
            pool.env_ids
                .iter()
                .filter_map(|id| map.remove(id))
                .collect()
        };
        lock(&self.checkpoints).retain(|c| c.pool.id != pool.id);
        // Rebuilds still running see the pool closed and stop their desktops.
        let parked = std::mem::take(&mut *lock(&pool.parked)).ready;
        let n = envs.len() as u32;
        // Each env: end its recording and stop its desktop, all at once, on the step
        // pool (taking an env's state waits for its call in flight, if any).
        let stops: Vec<_> = envs
            .iter()
            .map(|e| {
                let e = e.clone();
                self.spawn_internal(move || {
                    e.finish_recording("closed");
                    drop(e.take_desktop());
                    // Before the pool's `pool_closed` and the recorder's close.
                    e.end_asks("closed");
                    e.close_events();
                    Ok(())
                })
            })
            .collect();
        // Its own statement: the spares guard must not live while anything else locks.
        let spares = std::mem::take(&mut *lock(&pool.spares));
        let spare_stops: Vec<_> = spares
            .into_iter()
            .map(|d| {
                self.spawn_internal(move || {
                    drop(d);
                    Ok(())
                })
            })
            .collect();
        let parked_stop = self.spawn_internal(move || {
            drop(parked);
            Ok(())
        });
        for s in stops.into_iter().chain(spare_stops).chain([parked_stop]) {
            Self::join(s).await?;
        }
        pool.record(|| record::event("pool_closed", "", serde_json::json!({"pool_id": pool.id})));
        let recorder = pool
            .recorder
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(r) = recorder {
            let closing = Self::join(self.spawn_internal(move || {
                r.close().map_err(|e| {
                    RecordingError::Finish(format!("finishing the recording failed: {e}")).into()
                })
            }));
            // A writer stuck on its disk must not hold ClosePool forever: the pool is
            // closed either way, and an unfinished bundle is recovered at the next start.
            let m = tokio::time::timeout(RECORDING_CLOSE_LIMIT, closing)
                .await
                .map_err(|_| {
                    RecordingError::Finish(format!(
                        "the recording did not finish within {} s (its disk is stalled); \
                         the next server start recovers what was written",
                        RECORDING_CLOSE_LIMIT.as_secs()
                    ))
                })??;
            tracing::info!(pool = %pool_id, run = %m.run_id, episodes = m.counts.episodes, steps = m.counts.steps,
                frames_stored = m.counts.frames_stored, frames_observed = m.counts.frames_observed,
                dropped = m.dropped_records, "recording closed");
        }
        tracing::info!(pool = %pool_id, envs = n, "pool closed");
        Ok((n, pool.recording_path.clone()))
    }

    /// Closes every pool (shutdown).
    pub(crate) async fn close_all(self: &Arc<Self>) {
        let ids: Vec<String> = lock(&self.pools).keys().cloned().collect();
        for id in ids {
            let _ = self.close_pool(&id, None).await;
        }
    }

    /// Closes pools whose lease expired (or, without a lease, untouched for longer
    /// than `idle`); returns their ids.
    ///
    /// A round that finds the server was stalled (over [`STALLED`] since the last)
    /// reaps nothing and restarts every lease: the clients were not the ones away.
    pub(crate) async fn reap_idle(self: &Arc<Self>, idle: Option<Duration>) -> Vec<String> {
        let now = tokio::time::Instant::now();
        let last = lock(&self.last_reap).replace(now);
        if last.is_some_and(|t| now - t > STALLED) {
            let pools = lock(&self.pools);
            tracing::warn!(
                stalled_ms = last.map_or(0, |t| (now - t).as_millis() as u64),
                pools = pools.len(),
                "the server did not run for a while; leases restarted, nothing reaped"
            );
            pools.values().for_each(|p| p.touch());
            return Vec::new();
        }
        let stale: Vec<(String, bool)> = lock(&self.pools)
            .values()
            .filter(|p| p.expired(idle))
            .map(|p| (p.id.clone(), p.lease.is_some()))
            .collect();
        for (id, leased) in &stale {
            if *leased {
                tracing::warn!(pool = %id, "lease expired (client gone?); closing pool");
            } else {
                tracing::warn!(pool = %id, "reaping idle pool");
            }
            let _ = self.close_pool(id, None).await;
        }
        stale.into_iter().map(|(id, _)| id).collect()
    }

    /// Renews the leases of `who`'s `pool_ids`; returns the ids that are not (or no
    /// longer) its pools.
    pub(crate) fn keep_alive(&self, pool_ids: &[String], who: &Principal) -> Vec<String> {
        let pools = lock(&self.pools);
        pool_ids
            .iter()
            .filter(|id| match pools.get(id.as_str()) {
                Some(p) if p.owner == who.name => {
                    p.touch();
                    false
                }
                _ => true,
            })
            .cloned()
            .collect()
    }

    /// Looks up one of `who`'s envs and marks its pool as used. Another principal's
    /// env is NOT_FOUND, exactly like one that does not exist.
    pub(crate) fn env(&self, env_id: &str, who: &Principal) -> Result<Arc<Env>, PoolError> {
        let env = self.env_of(env_id, who)?;
        match env.control.holder() {
            None => Ok(env),
            Some(holder) => Err(PoolError::HumanControl {
                env: env.id.clone(),
                holder,
                lease_s: crate::env::HOLD_LEASE.as_secs(),
            }),
        }
    }

    /// `who`'s env `env_id` whoever drives it: for watching it, and for the console
    /// (whose calls check the hold themselves).
    pub(crate) fn env_of(&self, env_id: &str, who: &Principal) -> Result<Arc<Env>, PoolError> {
        let env = lock(&self.envs)
            .get(env_id)
            .filter(|e| e.pool.owner == who.name)
            .cloned()
            .ok_or_else(|| {
                PoolError::not_found(
                    "env",
                    env_id,
                    "its pool was closed, reaped, or never created",
                )
            })?;
        env.pool.touch();
        Ok(env)
    }
}

/// Pool machinery against the in-memory fake backend (no Xvfb): capacity, spares,
/// fork all-or-nothing, crash restart, leases with paused time.
#[cfg(test)]
mod tests;
