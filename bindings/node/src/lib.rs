//! The native half of the npm package `leasehold` (napi-rs): a thin face over `leasehold` and
//! `leasehold-stores`, loaded by `index.js`, which adds what only JavaScript can (the
//! `AbortSignal` listener, `Symbol.dispose`, thrown errors). Nothing here decides what the
//! library decides: every wait, open, check and store operation is the library's.
//!
//! * [`lease`]: `Lease.acquire` / `tryAcquire`, `holders`, and the [`lease::Waiter`] that
//!   carries an `AbortSignal` to the library's `CancelToken`;
//! * [`stores`]: `Registry`, `SessionLog`, `ResultStore`;
//! * [`document`]: `Document`, a file of the user's own (lock-free reads, updates under its
//!   lease with the caller's function run in JavaScript, a watch);
//! * [`errors`]: the one table from the library's errors to the surface's `code`s.
//!
//! Async calls never take a thread of libuv's pool (no `AsyncTask`): `Lease.acquire`'s wait
//! is the library's future polled on the JS thread itself (`drive.rs`), so a
//! grant wakes the event loop directly (a record lease's wait, which polls across hosts,
//! blocks a thread of napi's tokio blocking pool instead, its outcome delivered the same way); the stores' calls are `#[napi] async fn`s on napi's
//! tokio runtime.
//!
//! Every item of ours has a doc comment; `missing_docs` is not denied only because napi-derive
//! generates undocumented public glue (the constructors and callbacks of each `#[napi] impl`).

// No unsafe of ours: the FFI is napi-rs's (its generated glue allows its own).
#![deny(unsafe_code)]

pub mod document;
mod drive;
pub mod errors;
pub mod lease;
pub mod stores;
