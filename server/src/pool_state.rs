//! The pool as its envs see it: id, owner, spec, warm spares, the recording sink and
//! the lease clock. Envs and checkpoints hold this state; the manager's bookkeeping
//! (`pool/`, whose `PoolManager` owns the pools) stays out of their reach.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::spec::{PoolSpec, Usage};
use crate::sync::lock;
use deskgym_worker::{Desktop, Outcome};

/// What the envs of one pool (a set created together) share: its id, owner, spec, warm
/// spares, recording and lease. The manager's map of pools holds these.
#[derive(Debug)]
pub(crate) struct PoolState {
    /// Opaque id.
    pub id: String,
    /// The principal that created it (and owns its envs and checkpoints).
    pub owner: Arc<str>,
    /// The owner's desktop quota (warm spares are refilled only within it).
    pub(crate) owner_quota: u32,
    /// What its envs run.
    pub spec: PoolSpec,
    /// Its envs, in creation order.
    pub env_ids: Vec<String>,
    /// Last call or renewal (tokio's clock, so tests can pause time).
    pub(crate) last_used: Mutex<tokio::time::Instant>,
    /// Calls on its envs now running ([`crate::env::Env::begin`] to the flight's end):
    /// a pool in use is not expired, however long a call takes on a loaded host.
    pub(crate) in_flight: AtomicU32,
    pub(crate) spares: Mutex<Vec<Box<dyn Desktop>>>,
    pub(crate) spares_starting: AtomicU32,
    /// Desktops held at its checkpoints' states for forks (`SaveRequest.park`), and
    /// those being rebuilt: counted in its usage like its envs and spares.
    pub(crate) parked: Mutex<Parked>,
    pub(crate) closed: AtomicBool,
    /// The pool's recording, when it records; taken (and closed) with the pool. A read
    /// lock to send: envs sending at once never wait on each other, only on the
    /// writer's channel (backpressure by design, `--record-overflow`).
    pub(crate) recorder: RwLock<Option<deskgym_datasets::Recorder>>,
    /// Lease TTL: the pool is closed when untouched (no call, no KeepAlive) this long.
    pub lease: Option<Duration>,
    /// Where the recording goes.
    pub recording_path: Option<std::path::PathBuf>,
}

impl PoolState {
    /// Queues a record when the pool records; `make` is not even called otherwise.
    pub(crate) fn record(&self, make: impl FnOnce() -> deskgym_datasets::Record) {
        if self.recording_path.is_some()
            && let Some(r) = self
                .recorder
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
        {
            r.send(make());
        }
    }

    /// Marks the pool as used now (calls and KeepAlive renew its lease).
    pub(crate) fn touch(&self) {
        *lock(&self.last_used) = tokio::time::Instant::now();
    }

    /// A started desktop, if a spare is ready (the pool tops spares up in the background).
    pub(crate) fn take_spare(&self) -> Option<Box<dyn Desktop>> {
        lock(&self.spares).pop()
    }

    pub(crate) fn usage(&self) -> Usage {
        let parked = lock(&self.parked).held();
        let desktops = self.env_ids.len() as u32
            + lock(&self.spares).len() as u32
            + self.spares_starting.load(Ordering::Relaxed)
            + parked;
        Usage::of(desktops, self.spec.screen)
    }

    /// True when untouched for longer than its lease (or `idle`, without one) and
    /// no call on its envs is running.
    pub(crate) fn expired(&self, idle: Option<Duration>) -> bool {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return false;
        }
        match self.lease.or(idle) {
            Some(ttl) => lock(&self.last_used).elapsed() > ttl,
            None => false,
        }
    }
}

/// A desktop held at a checkpoint's state outside any env (a parked replica): a fork
/// or restore of that checkpoint takes it and replays nothing, one of a later
/// checkpoint that extends it replays only the steps between.
#[derive(Debug)]
pub(crate) struct ParkedReplica {
    /// The checkpoint whose state it shows (by id: a checkpoint holds its pool, so the
    /// pool holds no checkpoint).
    pub cp_id: String,
    /// That checkpoint's action count: the replica shows the state after them.
    pub steps: usize,
    /// The last action's outcome (a later replay starts from it).
    pub out: Outcome,
    /// The desktop.
    pub desktop: Box<dyn Desktop>,
    /// When it was parked: the least recently parked is evicted first.
    pub since: Instant,
}

/// What Save asked parking for one checkpoint, and how it went.
#[derive(Clone, Debug, Default)]
pub(crate) struct ParkAsk {
    /// Replicas asked for.
    pub n: u32,
    /// Where the latest parked replica's replay began (0: a reset).
    pub from_step: u32,
    /// Why fewer than `n` were parked; empty if none was refused.
    pub note: String,
}

/// A pool's parked replicas, those being rebuilt, and what each checkpoint asked.
#[derive(Debug, Default)]
pub(crate) struct Parked {
    /// Replicas at their checkpoints' states.
    pub ready: Vec<ParkedReplica>,
    /// Replicas being rebuilt: job number -> the checkpoint it is for now. A Save
    /// that extends that checkpoint moves the job on to itself; the job, done with
    /// its replay, continues to wherever it is for then.
    pub building: HashMap<u64, String>,
    /// Per checkpoint id: what its Save asked.
    pub asked: HashMap<String, ParkAsk>,
    /// The next job number.
    next_job: u64,
}

impl Parked {
    /// Desktops held: parked and being rebuilt.
    pub(crate) fn held(&self) -> u32 {
        (self.ready.len() + self.building.len()) as u32
    }

    /// Replicas parked at `cp_id`, and those being rebuilt for it.
    pub(crate) fn of(&self, cp_id: &str) -> (u32, u32) {
        let ready = self.ready.iter().filter(|r| r.cp_id == cp_id).count() as u32;
        let building = self.building.values().filter(|c| *c == cp_id).count() as u32;
        (ready, building)
    }

    /// Counts one more replica being rebuilt for `cp_id`; its job number.
    pub(crate) fn start(&mut self, cp_id: &str) -> u64 {
        self.next_job += 1;
        self.building.insert(self.next_job, cp_id.to_string());
        self.next_job
    }

    /// Moves up to `n` rebuilds for checkpoints in `from` on to `to`; how many.
    pub(crate) fn redirect(&mut self, from: &HashSet<String>, to: &str, n: u32) -> u32 {
        let mut moved = 0;
        for target in self.building.values_mut() {
            if moved < n && target != to && from.contains(target.as_str()) {
                *target = to.to_string();
                moved += 1;
            }
        }
        moved
    }

    /// Takes out every replica of `cp_id` (its checkpoint was deleted), forgetting
    /// what it asked.
    pub(crate) fn remove(&mut self, cp_id: &str) -> Vec<ParkedReplica> {
        self.asked.remove(cp_id);
        let (gone, keep) = std::mem::take(&mut self.ready)
            .into_iter()
            .partition(|r| r.cp_id == cp_id);
        self.ready = keep;
        gone
    }
}
