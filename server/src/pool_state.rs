//! The pool as its envs see it: id, owner, spec, warm spares, the recording sink and
//! the lease clock. Envs and checkpoints hold this state; the manager's bookkeeping
//! (`pool/`, whose `PoolManager` owns the pools) stays out of their reach.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crate::spec::{PoolSpec, Usage};
use crate::sync::lock;
use deskgym_worker::Desktop;

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
        let desktops = self.env_ids.len() as u32
            + lock(&self.spares).len() as u32
            + self.spares_starting.load(Ordering::Relaxed);
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
