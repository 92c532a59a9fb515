//! A verb that needs facilities this platform lacks: it parses any arguments and fails with
//! one clear line (exit 2) instead of the binary not building there.
//!
//! `bench` (kernel `flock` floors, FIFOs, `/proc` thread states: Linux only) and, on Windows,
//! `torture` (it kills a worker's whole process group, which Windows can only do through a job
//! object) and `flock` (`flock(2)` and inherited descriptor numbers, which Windows leases have
//! not) are included from this file; `cmd/mod.rs` says which.

use std::ffi::OsString;

use clap::Args;

use crate::exit::{Failure, Outcome};

/// Accepts whatever follows the verb; nothing of it is used.
#[derive(Args, Debug)]
pub struct Unsupported {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _args: Vec<OsString>,
}

/// The arguments of `bench` on this platform.
#[allow(dead_code)] // each inclusion of this file uses one of the aliases
pub type BenchArgs = Unsupported;
/// The arguments of `flock` on this platform.
#[allow(dead_code)]
pub type FlockArgs = Unsupported;
/// The arguments of `torture` on this platform.
#[allow(dead_code)]
pub type TortureArgs = Unsupported;

/// Fails with a one-line explanation naming the verb (this module's name).
pub fn main(_args: Unsupported) -> Outcome {
    let verb = module_path!().rsplit("::").next().unwrap_or("this verb");
    let why = match verb {
        "bench" => "it measures Linux kernel floors (flock, /proc); it runs on Linux only",
        "flock" => {
            "Windows leases are named semaphores, with no flock(2) and no descriptor to lock or inherit (FILE or NUMBER); use `leasehold run`"
        }
        _ => "it kills workers' process groups, which this build does only on POSIX systems",
    };
    Err(Failure::usage(format!(
        "{verb}: not available on this platform: {why}"
    )))
}
