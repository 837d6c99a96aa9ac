//! Locking that survives a panicked holder.

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, recovering from poisoning: a panicked step is reported as INTERNAL and
/// must not take every later call on that env down with it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counts of something each owner holds (screencast slots, step-thread slots), each
/// bounded by that owner's share.
pub(crate) type Holdings =
    std::sync::Arc<Mutex<std::collections::HashMap<std::sync::Arc<str>, u32>>>;

/// One of an owner's [`Holdings`], given back on drop.
#[derive(Debug)]
pub(crate) struct Held {
    holdings: Holdings,
    owner: std::sync::Arc<str>,
}

impl Held {
    /// Takes one for `owner` if it holds fewer than `share` (`None`: no share, no
    /// bound); else `Err` with how many it holds.
    pub(crate) fn take(
        holdings: &Holdings,
        owner: &std::sync::Arc<str>,
        share: Option<u32>,
    ) -> Result<Self, u32> {
        let mut h = lock(holdings);
        let n = h.entry(owner.clone()).or_default();
        if share.is_some_and(|s| *n >= s) {
            return Err(*n);
        }
        *n += 1;
        Ok(Self {
            holdings: holdings.clone(),
            owner: owner.clone(),
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut h = lock(&self.holdings);
        if let Some(n) = h.get_mut(&self.owner) {
            *n -= 1;
            if *n == 0 {
                h.remove(&self.owner);
            }
        }
    }
}
