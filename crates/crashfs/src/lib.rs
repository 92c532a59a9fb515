//! crashfs: a crash-simulating FUSE file system for leasehold's power-loss torture.
//!
//! A pass-through over a backing directory that keeps every change not yet made durable by
//! `fsync`/`fdatasync` (of the file for its data, of the directory for its names) in a
//! volatile layer, and on a *power cut* discards that layer — optionally keeping a random
//! prefix of each file's unsynced operations, as a real disk may have written some of them.
//! The rules are in [`model`]; the FUSE face and the mount guard in [`fs`]; the backing
//! directory (always the durable state) in [`backing`]; the torture in [`torture`].
#![deny(unsafe_code)]

#[cfg(target_os = "linux")]
pub mod backing;
#[cfg(target_os = "linux")]
pub mod fs;
pub mod model;
#[cfg(target_os = "linux")]
pub mod torture;

#[cfg(target_os = "linux")]
pub use fs::{Handle, Mounted, lazy_unmount, unavailable};
pub use model::{CutPolicy, CutReport, Faults, Model};
