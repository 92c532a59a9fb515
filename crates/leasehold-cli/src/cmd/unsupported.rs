//! A verb that needs facilities this platform lacks (POSIX on Windows; `/proc` for `bench`): it parses any arguments and fails with one
//! clear line (exit 2) instead of the binary not building there.
//!
//! `registry` (its `serve` waits on POSIX signals through `signal_hook::iterator`),
//! `session` (the append-only log opens files relative to directory descriptors with
//! `O_APPEND`), and `bench` and `torture` (worker processes, SIGKILL, `/proc`) are included
//! from this file on Windows; `cmd/mod.rs` says which.

use std::ffi::OsString;

use clap::Args;

use crate::exit::{Failure, Outcome};

/// Accepts whatever follows the verb; nothing of it is used.
#[derive(Args, Debug)]
pub struct Unsupported {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _args: Vec<OsString>,
}

/// The arguments of `registry` on this platform.
#[allow(dead_code)] // each inclusion of this file uses one of the aliases
pub type RegistryArgs = Unsupported;
/// The arguments of `session` on this platform.
#[allow(dead_code)]
pub type SessionArgs = Unsupported;
/// The arguments of `bench` on this platform.
#[allow(dead_code)]
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
    Err(Failure::usage(format!(
        "{verb}: not available on this platform (it needs facilities this system lacks); `run` and `status` work everywhere, the rest on Linux"
    )))
}
