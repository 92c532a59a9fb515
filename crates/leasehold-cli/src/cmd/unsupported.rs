//! A verb that needs facilities this platform lacks: it parses any arguments and fails with
//! one clear line (exit 2) instead of the binary not building there.
//!
//! `bench` on macOS and the BSDs (it reads `/proc` thread states: Linux and Windows only) and
//! `flock` on Windows (`flock(2)` and inherited descriptor numbers, which Windows leases have
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

/// Fails with a one-line explanation naming the verb (this module's name).
pub fn main(_args: Unsupported) -> Outcome {
    let verb = module_path!().rsplit("::").next().unwrap_or("this verb");
    let why = match verb {
        "bench" => "it reads /proc to know that a waiter waits; it runs on Linux and Windows",
        _ => {
            "Windows leases are named semaphores, with no flock(2) and no descriptor to lock or inherit (FILE or NUMBER); use `leasehold run`"
        }
    };
    Err(Failure::usage(format!(
        "{verb}: not available on this platform: {why}"
    )))
}
