//! The platform boundary: the only module that issues system calls.
//!
//! Everything above `sys` speaks in terms of "open this lock file without following or
//! blocking", "try an exclusive lock", "what is the identity of this file", "who holds it" and
//! "wait until something changes". Linux and the BSDs/macOS share the POSIX implementation
//! (`flock`); Linux adds `/proc/locks` for holders and waiting marks (POSIX read locks) for
//! fair hand-over. `--cfg leasehold_portable` switches those two off, so that
//! CI runs on Linux the code macOS and the BSDs run (README, "Platforms").
//! Windows has no equivalent of these calls that leasehold could use safely; its leases are
//! named kernel semaphores (see `windows.rs`), named by [`naming`] on every platform so that
//! the naming rules are tested everywhere. WASI (`wasm32-wasip1`) has no lock at all:
//! `wasi.rs` offers only the file-system look-ups of the single-process lease
//! (`lease/single.rs`). A waiter's wake-up (`wake.rs`) is the same everywhere: a flag with a
//! thread to unpark or a task to wake.

/// Whether an overlay's layer directories are reachable here (Linux; see `unix.rs`'s
/// `overlay_judged`).
#[cfg(any(target_os = "linux", target_os = "android"))]
mod overlay;
#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub(crate) use unix::{
    Chain, Entry, Looked, MountSeen, Unfit, boot_clock, chain_untrusted, create_dirs,
    create_new_at, cwd, dir_id_at, dir_judged, dir_names, dup_cloexec, entry_at, fd_entry_judged,
    fd_entry_mode, fd_gate_usable, fd_id, fd_identity, fd_modified, fd_unlinked, holders,
    host_identity, is_plain_name, lock_blocking, lookup, mkdir_at, mount_seen, network_fs,
    network_fs_path, nofile_limit, open_data_file, open_dir_at, open_lock_file, read_exact_at,
    remove_dir_at, rename_at, set_inheritable, sync_dir_fd, try_lock, unlink_at, unlock,
    untrusted_at,
};
/// Linux's waiting marks (see `unix.rs`); `--cfg leasehold_portable` leaves them out.
#[cfg(all(target_os = "linux", not(leasehold_portable)))]
pub(crate) use unix::{mark_waiting, others_waiting, unmark_waiting};
/// A record lease's same-host liveness check (see `unix.rs`).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) use unix::{proc_is_own, process_start};

#[cfg(windows)]
#[allow(unsafe_code)] // raw Win32 calls (see its docs)
mod windows;
#[cfg(windows)]
pub(crate) use windows::{
    Created, Looked, Stood, create_dir, create_dirs, create_named, create_new, dir_names, holders,
    is_plain_name, lookup, open_data_file, read_exact_at, real_path, remove_dir, remove_file,
    rename, stat_follow, stat_nofollow,
};

#[cfg(target_os = "wasi")]
mod wasi;
#[cfg(target_os = "wasi")]
pub(crate) use wasi::{
    Looked, Stood, create_dir, create_dirs, create_new, dir_names, fd_modified, fd_stood, holders,
    is_plain_name, lookup, open_data_file, open_lock_file, read_exact_at, remove_dir, rename,
    stat_follow, stat_nofollow, sync_dir, unlink,
};

pub(crate) mod naming;

/// Tests only: a signal handler without `SA_RESTART` and a signal sent to one thread, which
/// make a blocked `flock` fail with `EINTR` (the inline wait's interrupt hook is tested with
/// them); raw libc calls, for which no safe wrapper exists.
#[cfg(all(test, target_os = "linux"))]
#[allow(unsafe_code)]
pub(crate) mod test_signal;

/// In a forked child, descriptors let go by number (`dup2` of `/dev/null` over them): the
/// numbers come from a table, and rustix's safe calls take owned or borrowed descriptors.
#[cfg(unix)]
#[allow(unsafe_code)]
pub(crate) mod fork;

/// Tests only: a closure run in a forked child (`fork`, `waitpid`: raw libc calls, for which
/// no safe wrapper exists).
#[cfg(all(test, target_os = "linux"))]
#[allow(unsafe_code)]
pub(crate) mod test_fork;

/// A waiter's wake-up, the same on every platform (a parked thread or a task's waker).
mod wake;
pub(crate) use wake::Notifier;

/// This process's id, where the platform has processes with ids: WASI has none
/// (`std::process::id` panics there), and `None` is the answer.
pub(crate) fn process_id() -> Option<u32> {
    #[cfg(target_os = "wasi")]
    return None;
    #[cfg(not(target_os = "wasi"))]
    Some(std::process::id())
}

#[cfg(not(any(unix, windows, target_os = "wasi")))]
compile_error!(
    "leasehold supports Unix-like systems (Linux, macOS, BSD), Windows and WASI (wasm32-wasip1, single-process leases only); wasm32-unknown-unknown has no file system to lease in"
);
