//! Patterns built on the [`Lease`](crate::Lease) primitive: durable files, a store-wide
//! single-writer authority, per-key operation leases and an append-only log.

#[cfg(unix)] // O_APPEND through descriptors opened relative to a directory handle
pub mod append;
pub mod authority;
pub mod durable;
pub mod keyed;
