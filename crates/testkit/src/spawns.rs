//! One lock between "a test is checking lock states" and "this binary spawns a process".

use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// A spawned child shares this process's descriptors — and so the locks on them — from fork
/// until exec (close-on-exec acts at exec), so a lease released by one test can look held to
/// another for that moment. Tests that check lock states right after a release hold [`quiet`];
/// the long-lived children of this crate ([`Proc::spawn`](crate::Proc::spawn),
/// [`FlockHolder::hold`](crate::FlockHolder::hold)) are spawned while holding the write side
/// (std's `spawn` returns only after the child has exec'd, so the window is covered).
/// Each test binary links its own copy, which is the scope that matters: fork copies only
/// this process's descriptors.
static SPAWNS: RwLock<()> = RwLock::new(());

/// Keeps this test binary's testkit helpers from spawning processes while the guard lives:
/// a child shares this process's lock descriptors from fork until exec, so a lease released
/// meanwhile could look held. A test holding it must not spawn through testkit itself: that would
/// wait for its own guard.
pub fn quiet() -> RwLockReadGuard<'static, ()> {
    SPAWNS.read().unwrap_or_else(PoisonError::into_inner)
}

/// The write side of [`SPAWNS`], held across a `spawn()`.
#[cfg_attr(not(unix), allow(dead_code))]
pub(crate) fn spawning() -> RwLockWriteGuard<'static, ()> {
    SPAWNS.write().unwrap_or_else(PoisonError::into_inner)
}
