//! The one way this crate locks a mutex.
//!
//! Every mutex of the crate guards plain data that each holder changes in one step (a
//! table entry inserted or removed, a field set), so a holder that panicked cannot have
//! left it half-changed: the poison flag carries no information here, and honouring it
//! would turn one panic into a panic of every later caller (a waiter, a `Drop`).

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, ignoring poisoning (see the module documentation for why that is sound).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
