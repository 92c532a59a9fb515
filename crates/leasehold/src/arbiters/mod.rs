//! Arbiters beyond the kernel lease (which lives in [`crate::patterns::authority`] as
//! `KernelArbiter`): engines that decide who the single writer is when the processes are
//! spread over several machines.

#[cfg(all(feature = "etcd", unix))]
pub mod etcd;
