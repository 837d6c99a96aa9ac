//! Locking that survives a panicked holder.

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, recovering from poisoning: a panicked step is reported as INTERNAL and
/// must not take every later call on that env down with it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
