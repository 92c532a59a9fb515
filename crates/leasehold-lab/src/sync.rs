//! The lab's one way to take a mutex.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, ignoring poison: a thread of the lab that panicked while holding it left the
/// state as it was (counters, violations, a child's pipes), and the run's report should still
/// be made from it rather than a second panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
