//! Stores built on leasehold's patterns, for several processes of one product that share one
//! home directory: the multi-root workspace registry ([`registry`]: one writer for the whole
//! store, and nothing granted by any other process), append-only session logs ([`session`]:
//! one writer per log, lock-free readers) and the isolated result store ([`results`]: one
//! owner per result ID). Each writes only under its lease, durably (an acknowledged write
//! survives a crash), and refuses — rather than follows or overwrites — a symlink, a FIFO or
//! a document that does not parse. Every error implements [`leasehold::Classify`]: its
//! `class()` tells contended, unusable input, cancelled and failed apart.
//!
//! For a file of the user's own — settings or state several processes of one product read
//! and rewrite — [`Document`]: reads take no lock and always see one whole version (the file
//! is only ever replaced by a rename); an update re-reads the durable content under the
//! document's lease (a sibling lock file), applies the caller's change and writes it durably,
//! so no process's update is lost; [`Document::update_if`] is a compare-and-set on the
//! version (a digest of the content); [`Document::watch`] yields the new versions. A document
//! that does not parse is reported and never overwritten by an update.
//!
//! ## One example per store
//!
//! **A document of your own**: several processes may run this at once; none loses another's
//! increment.
//!
//! ```
//! use leasehold::Budget;
//! use leasehold_stores::{Document, DocumentOptions};
//! use std::time::Duration;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let dir = tempfile::tempdir()?;
//!     let doc = Document::open(dir.path().join("settings.json"), DocumentOptions::new().json(true));
//!     let wait = Budget::timeout(Duration::from_secs(5));
//!     let (n, _version) = doc.update_json(&wait, |n: &mut u64| *n += 1)?;
//!     assert_eq!(n, 1);
//!     assert_eq!(doc.read()?.map(|v| v.content), Some(b"1\n".to_vec())); // lock-free
//!     Ok(())
//! }
//! ```
//!
//!
//! **The registry**: become the authority, grant a root, tear down (drain, close, release).
//!
//! ```
//! use leasehold::Budget;
//! use leasehold_stores::registry::{Registry, RegistryPaths};
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let (home, project, extra) = (tempfile::tempdir()?, tempfile::tempdir()?, tempfile::tempdir()?);
//!     let registry = Registry::new(RegistryPaths::in_home(home.path(), None));
//!     registry.acquire(&Budget::no_wait())?; // Contended while another process is the writer
//!     registry.add(project.path(), extra.path())?; // durable when it returns
//!     assert!(registry.grants(project.path(), &extra.path().join("notes.md")));
//!     registry.teardown();
//!     assert!(!registry.grants(project.path(), extra.path())); // not the authority: nothing
//!     Ok(())
//! }
//! ```
//!
//! **A session log**: the write lease is taken before the first record (a session that never
//! writes leaves nothing on disk); readers see whole records only.
//!
//! ```
//! use leasehold_stores::session::{SessionId, SessionStore};
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let dir = tempfile::tempdir()?;
//!     let (store, id) = (SessionStore::new(dir.path()), SessionId::new("run-42")?);
//!     let mut writer = store.open_writer(&id)?;
//!     writer.append_json(r#"{"event":"start"}"#)?; // one write and one fsync
//!     assert!(store.open_writer(&id).unwrap_err().is_contended()); // one writer per session
//!     let records = store.reader(&id)?.collect::<Result<Vec<_>, _>>()?;
//!     assert_eq!(records, [br#"{"event":"start"}"#.to_vec()]);
//!     Ok(())
//! }
//! ```
//!
//! **The result store**: stage a candidate, publish it, apply it to a target — each step
//! under the ID's lease, which no other process holds meanwhile.
//!
//! ```
//! use leasehold::Budget;
//! use leasehold_stores::results::ResultStore;
//! use std::time::Duration;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let (root, src, target) = (tempfile::tempdir()?, tempfile::tempdir()?, tempfile::tempdir()?);
//!     std::fs::write(src.path().join("patch.txt"), "proposed")?;
//!     let results = ResultStore::new(root.path());
//!     let wait = Budget::timeout(Duration::from_secs(5));
//!     results.stage("r1", src.path(), &wait)?;
//!     assert_eq!(results.finish("r1", &wait)?, ["patch.txt"]); // published
//!     assert_eq!(results.pending()?, ["r1"]);
//!     results.apply("r1", target.path(), &wait)?; // written into target; r1 is gone
//!     assert_eq!(std::fs::read_to_string(target.path().join("patch.txt"))?, "proposed");
//!     Ok(())
//! }
//! ```
//!
//! **The registry on etcd** (feature `etcd`, POSIX), for processes on several machines: the
//! document lives in etcd, and every write is a transaction that succeeds only while the
//! writer still holds the lock it was granted.
//!
//! ```no_run
//! # #[cfg(all(feature = "etcd", unix))]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use leasehold::Budget;
//! use leasehold_stores::registry::Registry;
//! use std::{path::Path, time::Duration};
//!
//! let registry = Registry::on_etcd("http://10.0.0.5:2379", "app/registry", Duration::from_secs(10), None)?;
//! registry.acquire(&Budget::timeout(Duration::from_secs(30)))?;
//! registry.add(Path::new("/srv/project"), Path::new("/srv/shared"))?;
//! # Ok(())
//! # }
//! # #[cfg(not(all(feature = "etcd", unix)))]
//! # fn main() {}
//! ```
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
//! `abort_async` and `sweep_async`; `Document::begin_async`, `update_async` and
//! `watch_async`.
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
mod fence;
pub mod id;
mod read;
pub mod registry;
pub mod results;
pub mod session;

pub use document::{Document, DocumentError, DocumentOptions, Snapshot, Version};

/// The repository README's examples, compiled and run as doc tests of this crate (they use
/// both `leasehold` and the stores): `cargo test --doc -p leasehold-stores --all-features`,
/// which the README's own test command runs.
#[cfg(all(doctest, feature = "tokio", feature = "etcd", unix))]
#[doc = include_str!("../../../README.md")]
mod readme {}

/// The examples of docs/examples.md, compiled and run as the README's are.
#[cfg(all(doctest, feature = "tokio", feature = "etcd", unix))]
#[doc = include_str!("../../../docs/examples.md")]
mod examples {}
