//! Registration of descriptors with tokio's reactor (feature `tokio`, POSIX): the async
//! driver's one `unsafe` call.
//!
//! tokio's safe `AsyncFd` constructors are deprecated as unsound (tokio-rs/tokio#8587): they
//! accept any `AsRawFd`, whose descriptor may change or close while the reactor still has it
//! registered. Their replacement, `AsyncFd::register_with_interest`, is `unsafe` and states
//! that contract instead; this module keeps it, and the argument that it holds, in one place.

use std::os::fd::{BorrowedFd, OwnedFd};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// Registers a borrowed descriptor with the current tokio reactor for readability. A
/// duplicate is registered, because one descriptor (a shared cancellation pipe) cannot be
/// registered twice with epoll. `None` when the duplicate or the registration fails (the
/// waiter then sleeps on its budget alone, as the caller decides).
///
/// Must be called inside a tokio runtime (tokio panics otherwise; the async driver runs only
/// inside one).
pub(crate) fn register_readable(fd: BorrowedFd<'_>) -> Option<AsyncFd<OwnedFd>> {
    let owned = fd.try_clone_to_owned().ok()?;
    // SAFETY: `register_with_interest` requires that the descriptor `as_raw_fd` reports is
    // open, refers to the same open file description and is the same number for as long as
    // the `AsyncFd` owns it. `owned` is an `OwnedFd` moved into the `AsyncFd`: it is open
    // (just duplicated), nothing else owns or can close its number, and an `OwnedFd`'s
    // `as_raw_fd` always reports the descriptor it was made with, until the `AsyncFd` drops
    // it (or gives it back through `into_inner`).
    unsafe { AsyncFd::register_with_interest(owned, Interest::READABLE) }.ok()
}
