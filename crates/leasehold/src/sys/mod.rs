//! The platform boundary: the only module that issues system calls.
//!
//! Everything above `sys` speaks in terms of "open this lock file without following or
//! blocking", "try an exclusive lock", "what is the identity of this file", "who holds it" and
//! "wait until something changes". Linux and the BSDs/macOS share the POSIX implementation
//! (`flock`); Linux adds `/proc/locks` for holders and inotify for prompt, cheap wake-ups.

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub use unix::FileId;
#[cfg(unix)]
pub(crate) use unix::*;

#[cfg(not(unix))]
compile_error!("leasehold supports Unix-like systems (Linux, macOS, BSD) so far");
