//! The name a clean release left, for this host's next waiter ([`Hint`]): a guess that
//! saves it a listing of the lease directory (three round trips to the server), never a
//! thing the protocol relies on.
//!
//! A holder that gives the baton back as `free.<token>` writes that name into a small file
//! in a host-local directory of this user's (Linux: `/dev/shm/leasehold-<euid>`), named after
//! the lock file's device and inode, before it releases the kernel lease on the lock path;
//! the waiter the kernel wakes next (the only process that can read it before another
//! release: it holds the kernel lease) reads it and renames that very name to its grant. A
//! rename from an exact name succeeds only if that name is the baton now, and a free baton
//! is always granted its token + 1, so a grant made on the guess is exactly the grant a
//! listing would have led to; a guess that is wrong (stale, torn, planted) makes the rename
//! fail and the waiter lists as before. A holder clears the file when it is granted, so a
//! holder that dies leaves no guess to try: its successor lists at once.

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
#[cfg(any(target_os = "linux", target_os = "android"))]
use std::sync::OnceLock;

use crate::kind::FileId;
use crate::sys;

/// The directory hints are kept in, opened once per process (for the effective user it was
/// opened for; another user's is opened afresh): where there is none (not Linux, no
/// `/dev/shm`) or it is not this user's alone, no hints are read or written.
pub(super) fn directory() -> Option<Arc<OwnedFd>> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        static OPENED: OnceLock<(u32, Option<Arc<OwnedFd>>)> = OnceLock::new();
        let euid = rustix::process::geteuid().as_raw();
        match OPENED.get_or_init(|| (euid, open(euid).map(Arc::new))) {
            (uid, dir) if *uid == euid => dir.clone(),
            _ => open(euid).map(Arc::new),
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    None
}

/// `/dev/shm/leasehold-<euid>`, made if missing, if it is `euid`'s and nobody else's.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn open(euid: u32) -> Option<OwnedFd> {
    let shm = sys::open_dir_at(sys::cwd(), Path::new("/dev/shm"), true).ok()?;
    let name = format!("leasehold-{euid}");
    let _ = sys::mkdir_at(shm.as_fd(), Path::new(&name), 0o700);
    let dir = sys::open_dir_at(shm.as_fd(), Path::new(&name), false).ok()?;
    let st = rustix::fs::fstat(&dir).ok()?;
    (st.st_uid == euid && st.st_mode & 0o077 == 0).then_some(dir)
}

/// The hint of one lock file (by device and inode: this host's processes that share its
/// kernel lock share its hint).
#[derive(Debug)]
pub(super) struct Hint {
    dir: Arc<OwnedFd>,
    name: String,
}

/// The most a hint holds: a `free.<token>` name.
const MAX_HINT: u64 = 64;

impl Hint {
    pub(super) fn new(dir: Arc<OwnedFd>, id: FileId) -> Hint {
        Hint {
            dir,
            name: format!("{:x}-{:x}.free", id.dev, id.ino),
        }
    }

    /// The name left by the last clean release, if any (unchecked: a guess).
    pub(super) fn read(&self) -> Option<String> {
        let fd = sys::open_data_file(self.dir.as_fd(), Path::new(&self.name), false, false).ok()?;
        let mut text = String::new();
        std::fs::File::from(fd)
            .take(MAX_HINT)
            .read_to_string(&mut text)
            .ok()?;
        Some(text)
    }

    /// Leaves `name` for the next waiter (replacing any earlier hint; failures are ignored:
    /// the next waiter then lists).
    pub(super) fn write(&self, name: &str) {
        self.clear();
        if let Ok(fd) = sys::create_new_at(self.dir.as_fd(), Path::new(&self.name), 0o600) {
            let _ = std::fs::File::from(fd).write_all(name.as_bytes());
        }
    }

    /// Removes the hint (a holder just granted: what it says is no longer the baton).
    pub(super) fn clear(&self) {
        let _ = sys::unlink_at(self.dir.as_fd(), Path::new(&self.name));
    }

    /// Where the hint is, for the tests.
    #[cfg(all(test, any(target_os = "linux", target_os = "android")))]
    pub(super) fn file(&self) -> std::path::PathBuf {
        let euid = rustix::process::geteuid().as_raw();
        Path::new("/dev/shm")
            .join(format!("leasehold-{euid}"))
            .join(&self.name)
    }
}
