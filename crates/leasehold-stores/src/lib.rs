//! Stores built on leasehold's patterns: the multi-root workspace registry, the session log
//! and the isolated result store.
//!
//! ## Async (feature `tokio`, off by default)
//!
//! Each store has an async face that never blocks an executor thread: a wait for a lease is
//! driven by tokio's reactor (no thread per waiter; dropping the future abandons the wait),
//! and the durable file work — which fsyncs — runs on tokio's blocking pool:
//! `Registry::acquire_async` and its `refresh_async`, `add_async`, `remove_async` and
//! `teardown_async` (drains in-flight writes, releases the lease last);
//! `SessionStore::open_writer_async` and `AsyncSessionWriter`; and the result store's
//! `stage_async`, `paths_async`, `finish_async`, `apply_async`, `discard_async`,
//! `abort_async` and `sweep_async`.
//!
//! A runnable example of an async service that takes the registry authority at start
//! (waiting asynchronously while another process holds it), serves a few mutations and hands
//! over on shutdown:
//!
//! ```text
//! cargo run -p leasehold-stores --example async_registry --features tokio
//! ```
#![deny(unsafe_code)]
#![deny(missing_docs)]
// docs.rs (`--cfg docsrs`, nightly) marks each item with the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod document;
pub mod registry;
pub mod results;
pub mod session;
