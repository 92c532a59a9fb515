//! The host-local pass ([`Pass`]): how a holder hands the record lease to the next waiter
//! of its *domain* — the processes that share its kernel lock on the lock file — with no
//! operation on the server (docs/design.md, "The host-local pass").
//!
//! Two files beside the release's hint (`/dev/shm/leasehold-<euid>`, Linux only), named
//! after the lock file's device and inode:
//!
//! * `<dev>-<ino>.pass`, the *pass record*, written only by the holder of the kernel lock
//!   and read only by it (so in place: nobody else reads or writes it meanwhile, and a
//!   record its writer died writing parses as none): the baton's name N, the boot-clock time B at
//!   which the rename that created N began, the server token T, the local count k, the TTL,
//!   the writer's host identity (which includes the lock file's device and inode), the
//!   lease directory's device and inode and the lock file's status-change time (so that a
//!   lock file and lease directory made anew, reusing inode numbers, are not taken for the
//!   old ones). It is never trusted blindly: it is parsed strictly
//!   and believed only if everything in it matches the reader's own.
//! * `<dev>-<ino>.wait`, on which a waiter holds a shared `flock` while it queues for the
//!   kernel lock: a releasing holder that cannot lock it exclusively knows a waiter is there.
//!
//! A holder releasing with a waiter queued and validity to spare leaves the baton as it is and
//! the record current, and only releases the kernel lock; the waiter that gets it writes
//! k + 1 into the record, then believes N until B + TTL − margin with the token
//! `T·2^20 + k + 1`. Otherwise the holder removes the record before it renames the baton to
//! `free.T`, and a process removes it before a grant's or a takeover's rename: a record never
//! outlives the name it gives.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use crate::kind::FileId;
use crate::sys;

/// Local counts stay below this: a holder whose k + 1 would reach it releases to free.
pub(super) const K_LIMIT: u64 = 1 << TOKEN_SHIFT;

/// How far the server token is shifted in a fencing token (`T·2^20 + k`).
pub(super) const TOKEN_SHIFT: u32 = 20;

/// The most a record holds.
const MAX_RECORD: u64 = 512;

/// What a pass record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PassRecord {
    /// The baton's name N (a live name of token `token` and TTL `ttl`).
    pub(super) name: String,
    /// B on the boot clock: when the rename that created N began.
    pub(super) base: Duration,
    /// The server token T.
    pub(super) token: u64,
    /// The local count k of the last believer.
    pub(super) k: u64,
    pub(super) ttl: Duration,
    /// The writer's host identity (16 hex digits: host, boot, PID namespace and the lock
    /// file's device and inode).
    pub(super) host: String,
    /// The lease directory's device and inode.
    pub(super) lease_dir: FileId,
    /// The lock file's status-change time (`st_ctime` in nanoseconds): with its device and
    /// inode (the record's name), it tells the lock file from a later one that reuses its
    /// inode.
    pub(super) lock_file: u64,
}

impl PassRecord {
    pub(super) fn text(&self) -> String {
        format!(
            "leasehold-pass-1 {} {} {} {} {} {} {} {} {}\n",
            self.name,
            self.base.as_nanos(),
            self.token,
            self.k,
            self.ttl.as_millis(),
            self.host,
            self.lease_dir.dev,
            self.lease_dir.ino,
            self.lock_file
        )
    }

    /// Parses a record strictly: the exact fields, in decimal, one final newline; `None` for
    /// anything else (torn, planted). Whether its name is a live baton of its token and TTL
    /// is the reader's check (`record.rs`, where batons are read).
    pub(super) fn parse(text: &str) -> Option<PassRecord> {
        let line = text.strip_suffix('\n')?;
        let mut f = line.split(' ');
        if f.next()? != "leasehold-pass-1" {
            return None;
        }
        let name = f.next()?.to_owned();
        let base = Duration::from_nanos(decimal(f.next()?)?);
        let token = decimal(f.next()?)?;
        let k = decimal(f.next()?)?;
        let ttl = Duration::from_millis(decimal(f.next()?)?);
        let host = f.next()?.to_owned();
        let dev = decimal(f.next()?)?;
        let ino = decimal(f.next()?)?;
        let lock_file = decimal(f.next()?)?;
        if f.next().is_some() || k >= K_LIMIT {
            return None;
        }
        let hex = host.len() == 16 && host.bytes().all(|b| b.is_ascii_hexdigit());
        hex.then_some(PassRecord {
            name,
            base,
            token,
            k,
            ttl,
            host,
            lease_dir: FileId { dev, ino },
            lock_file,
        })
    }
}

/// A decimal number of digits only (no sign, no spaces).
fn decimal(s: &str) -> Option<u64> {
    match !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit()) {
        true => s.parse().ok(),
        false => None,
    }
}

/// What a read of the record found.
#[derive(Debug)]
pub(super) struct Found {
    /// Whether a file stands at the record's name (readable or not).
    pub(super) present: bool,
    /// The record, if it parsed.
    pub(super) record: Option<PassRecord>,
    /// The record file, open for its rewrite in place, where it is a regular file, and how
    /// many bytes it held.
    pub(super) file: Option<(OwnedFd, usize)>,
}

/// The pass files of one lock file.
#[derive(Debug)]
pub(super) struct Pass {
    dir: Arc<OwnedFd>,
    record: String,
    wait: String,
}

impl Pass {
    pub(super) fn new(dir: Arc<OwnedFd>, id: FileId) -> Pass {
        let stem = format!("{:x}-{:x}", id.dev, id.ino);
        Pass {
            dir,
            record: format!("{stem}.pass"),
            wait: format!("{stem}.wait"),
        }
    }

    /// Opens the record file for reading and writing in place (`create`: creating it), never
    /// through a symlink, never blocking on a FIFO; `Ok(None)` when it is no regular file.
    fn open_record(&self, create: bool) -> Result<Option<OwnedFd>, Errno> {
        let mut flags =
            OFlags::RDWR | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        if create {
            flags |= OFlags::CREATE;
        }
        let fd = rustix::fs::openat(
            self.dir.as_fd(),
            Path::new(&self.record),
            flags,
            Mode::from_raw_mode(0o600),
        )?;
        let regular = rustix::fs::fstat(&fd)
            .is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_file());
        Ok(regular.then_some(fd))
    }

    /// Reads the record (a symlink or anything but a regular file at its name is no record),
    /// keeping the file open for an adopter's rewrite of it ([`rewrite`](Self::rewrite)).
    pub(super) fn read(&self) -> Found {
        let fd = match self.open_record(false) {
            Ok(Some(fd)) => fd,
            Err(Errno::NOENT) => {
                return Found {
                    present: false,
                    record: None,
                    file: None,
                };
            }
            Ok(None) | Err(_) => {
                return Found {
                    present: true,
                    record: None,
                    file: None,
                };
            }
        };
        // One read (this is the hand-over's path): the record's writers hold the kernel lock
        // this reader holds, so none writes meanwhile; a file longer than a record is none.
        let mut buf = [0u8; MAX_RECORD as usize + 1];
        let (record, len) = match rustix::io::read(&fd, &mut buf) {
            Ok(n) if n <= MAX_RECORD as usize => (
                std::str::from_utf8(&buf[..n])
                    .ok()
                    .and_then(PassRecord::parse),
                n,
            ),
            _ => (None, buf.len()),
        };
        Found {
            present: true,
            record,
            file: Some((fd, len)),
        }
    }

    /// Writes the record (creating its file); `false` if that failed, and then what the file
    /// holds parses as no record or as the one it held.
    pub(super) fn write(&self, record: &PassRecord) -> bool {
        match self.open_record(true) {
            Ok(Some(fd)) => Self::rewrite(&fd, None, record),
            _ => false,
        }
    }

    /// Writes `record` over the record file `fd` in place: the text, then the file cut to its
    /// length unless it held exactly that many bytes (`held`, as read). Killed between the
    /// two, the file holds the text and the end of a longer one, which parses as no record.
    pub(super) fn rewrite(fd: &OwnedFd, held: Option<usize>, record: &PassRecord) -> bool {
        let text = record.text();
        matches!(rustix::io::pwrite(fd, text.as_bytes(), 0), Ok(n) if n == text.len())
            && (held == Some(text.len()) || rustix::fs::ftruncate(fd, text.len() as u64).is_ok())
    }

    /// Removes the record.
    ///
    /// # Errors
    ///
    /// The error of an `unlink` that failed otherwise than finding nothing there.
    pub(super) fn remove(&self) -> Result<(), Errno> {
        match sys::unlink_at(self.dir.as_fd(), Path::new(&self.record)) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Says this process waits: a shared lock on the `.wait` file (made if missing), held
    /// as long as the handle returned is open and not [`admitted`](Self::admitted). Never
    /// blocks: `None` if the lock is not to be had at once (a holder testing it this very
    /// moment) or the file cannot be opened — a waiter not seen, so no pass to it.
    pub(super) fn queue(&self) -> Option<OwnedFd> {
        let fd = self.open_wait()?;
        matches!(sys::try_lock(fd.as_fd(), true), Ok(true)).then_some(fd)
    }

    /// The `.wait` file (made if missing), unlocked: a holder that did not queue opens it
    /// when granted, so that its test at release opens nothing.
    pub(super) fn open_wait(&self) -> Option<OwnedFd> {
        sys::open_data_file(self.dir.as_fd(), Path::new(&self.wait), false, true).ok()
    }

    /// Whether another process waits: the `.wait` file cannot be locked exclusively (through
    /// `fd`, this process's handle on it, or one opened now; no file, no waiter). A holder
    /// that queued still holds its shared lock through `fd` (it is no waiter once it holds
    /// the kernel lock, and only the holder tests): the exclusive lock asked for on the same
    /// handle converts it, and is refused only for another process's shared lock.
    pub(super) fn waiter(&self, fd: Option<&OwnedFd>) -> bool {
        let opened;
        let fd = match fd {
            Some(fd) => fd,
            None => {
                match sys::open_data_file(self.dir.as_fd(), Path::new(&self.wait), false, false) {
                    Ok(fd) => opened = fd,
                    Err(_) => return false,
                }
                &opened
            }
        };
        match sys::try_lock(fd.as_fd(), false) {
            Ok(true) => {
                let _ = sys::unlock(fd.as_fd());
                false
            }
            Ok(false) => true,
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PassRecord {
        PassRecord {
            name: "live.7.3.1000.0123456789abcdef.42.99".into(),
            base: Duration::from_nanos(123_456_789),
            token: 7,
            k: 5,
            ttl: Duration::from_millis(1000),
            host: "0123456789abcdef".into(),
            lease_dir: FileId { dev: 12, ino: 34 },
            lock_file: 1_700_000_000_123_456_789,
        }
    }

    #[test]
    fn a_record_reads_back_as_written_and_nothing_else_parses() {
        let r = sample();
        assert_eq!(PassRecord::parse(&r.text()), Some(r.clone()));
        let text = r.text();
        // Torn anywhere, with a field too many, a count at the limit, signs and spaces: none
        // is a record.
        for cut in 0..text.len() {
            assert_eq!(PassRecord::parse(&text[..cut]), None, "{:?}", &text[..cut]);
        }
        let bad = [
            text.replace('\n', " 1\n"),
            text.replace(" 5 ", &format!(" {K_LIMIT} ")),
            text.replace(" 5 ", " +5 "),
            text.replace(" 5 ", "  5 "),
            text.replace("leasehold-pass-1", "leasehold-pass-2"),
            text.replace(" 0123456789abcdef ", " 0123456789abcdeg "),
            format!("{text}\n"),
        ];
        for b in bad {
            assert_eq!(PassRecord::parse(&b), None, "{b:?}");
        }
    }
}
