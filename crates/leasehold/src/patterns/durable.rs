//! Durable whole-file replacement.
//!
//! The order of operations is the contract, and each step is there because of what a crash
//! or a full disk would otherwise do:
//!
//! 1. write the new content to a temporary file *in the same directory* (a rename across file
//!    systems is not atomic), created exclusively with mode 0600;
//! 2. `fsync` it — otherwise the rename can reach the disk before the data, and a crash leaves
//!    a zero-length or partial document under the real name;
//! 3. `rename` over the target — atomic: readers see the old or the new file, never a mix;
//! 4. `fsync` the directory — otherwise the rename itself may be lost in a crash and an
//!    acknowledged write silently rolls back.
//!
//! If any step fails the temporary file is removed and the old document is untouched.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
#[cfg(unix)]
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Atomically replaces the file at `path` with `bytes` (see the module docs for the order).
///
/// On error the previous file, if any, is left exactly as it was.
pub fn replace_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace_file_observed(path, bytes, &mut |_, _| Ok(()))
}

/// A step of [`replace_file`], in the order they happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The temporary file was created (empty).
    Created,
    /// The new content was written to the temporary file (not yet synced).
    Written,
    /// The temporary file was fsynced.
    Synced,
    /// The temporary file was renamed over the target.
    Renamed,
    /// The directory was fsynced: the replacement is durable.
    DirSynced,
}

impl Step {
    /// Every step, in order.
    pub const ALL: [Step; 5] = [
        Step::Created,
        Step::Written,
        Step::Synced,
        Step::Renamed,
        Step::DirSynced,
    ];
}

/// [`replace_file`], calling `after_step(step, temp_path)` once each step has completed.
///
/// This is the seam crash and fault-injection tests use: a test can snapshot the directory at
/// every step (what a crash there would leave) or return an error to fail that step. An
/// error from `after_step` is handled like an I/O error of the step: the temporary file is
/// removed, and before [`Step::Renamed`] the old document is untouched.
pub fn replace_file_observed(
    path: &Path,
    bytes: &[u8],
    after_step: &mut dyn FnMut(Step, &Path) -> io::Result<()>,
) -> io::Result<()> {
    replace_file_with(path, bytes, &mut RealIo, after_step)
}

/// The system calls of a durable rewrite, one method each, in the order they are made.
///
/// [`RealIo`] makes the real calls. A test substitutes one that fails a chosen call (with
/// ENOSPC, EIO, EDQUOT, EROFS…) or writes only part of a buffer, to prove what a full disk or
/// a failing device does to a store: before the rename the old file is untouched; a failed
/// directory fsync leaves the new file in place but not known to be durable, and the caller
/// must not acknowledge the write.
pub trait DurableIo {
    /// Creates the temporary file exclusively (mode 0600, final component not followed).
    fn create(&mut self, tmp: &Path) -> io::Result<File> {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        options
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32);
        options.open(tmp)
    }
    /// Writes some of `buf` (a short count is retried with the rest, as `write(2)` allows).
    fn write(&mut self, file: &mut File, buf: &[u8]) -> io::Result<usize> {
        file.write(buf)
    }
    /// Flushes the temporary file's data and metadata to the device.
    fn sync(&mut self, file: &File) -> io::Result<()> {
        file.sync_all()
    }
    /// Renames the temporary file over the target.
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    /// Flushes the directory, making the rename durable.
    fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        sync_dir(dir)
    }
}

/// The real system calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealIo;

impl DurableIo for RealIo {}

/// [`replace_file_observed`] with every system call going through `io` (fault injection).
pub fn replace_file_with(
    path: &Path,
    bytes: &[u8],
    io: &mut dyn DurableIo,
    after_step: &mut dyn FnMut(Step, &Path) -> io::Result<()>,
) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let tmp = temp_name(path);
    let mut renamed = false;
    let result = (|| {
        let mut f = io.create(&tmp)?;
        after_step(Step::Created, &tmp)?;
        let mut rest = bytes;
        while !rest.is_empty() {
            match io.write(&mut f, rest) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => rest = rest.get(n..).unwrap_or_default(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        after_step(Step::Written, &tmp)?;
        io.sync(&f)?;
        drop(f);
        after_step(Step::Synced, &tmp)?;
        io.rename(&tmp, path)?;
        renamed = true;
        after_step(Step::Renamed, &tmp)?;
        io.sync_dir(dir)?;
        after_step(Step::DirSynced, &tmp)
    })();
    if result.is_err() && !renamed {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Makes a rename, creation or removal in `dir` durable: `fsync` of the directory on POSIX;
/// nothing on Windows (below). The one directory sync of the crate and of the stores.
///
/// # Errors
/// Opening or syncing the directory failed.
#[cfg(unix)]
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Windows cannot `fsync` a directory (a directory handle needs backup semantics and write
/// access); NTFS records the rename in its metadata journal instead.
#[cfg(windows)]
pub fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

/// A temporary name beside `path`, unique within this process and across processes.
fn temp_name(path: &Path) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let base = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{base}.tmp.{pid}.{n}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_content_and_leaves_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("doc.json");
        replace_file(&p, b"one").unwrap();
        replace_file(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "temporary files left behind");
    }

    #[test]
    fn failure_leaves_old_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("doc.json");
        replace_file(&p, b"old").unwrap();
        // A directory cannot be renamed over by a file: the rename step fails.
        let d = dir.path().join("sub");
        std::fs::create_dir(&d).unwrap();
        assert!(replace_file(&d, b"new").is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert!(d.is_dir());
    }

    #[test]
    fn a_failure_at_any_step_before_the_rename_leaves_the_old_document_and_no_temporary() {
        for fail_at in [Step::Created, Step::Written, Step::Synced] {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("doc.json");
            replace_file(&p, b"old").unwrap();
            let err = replace_file_observed(&p, b"new", &mut |step, _| {
                if step == fail_at {
                    Err(io::Error::other("injected"))
                } else {
                    Ok(())
                }
            });
            assert!(err.is_err(), "{fail_at:?}");
            assert_eq!(std::fs::read(&p).unwrap(), b"old", "{fail_at:?}");
            assert_eq!(
                std::fs::read_dir(dir.path()).unwrap().count(),
                1,
                "{fail_at:?}"
            );
        }
    }
}
