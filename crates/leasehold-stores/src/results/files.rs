//! The file-system steps the operations share, all through directory handles
//! ([`LockDir`]'s data operations: one component at a time, never following a symlink, never
//! blocking on a FIFO): opening the root, an area or a TARGET, walking a source, copying one
//! file, reading a record, removing a tree; and the clock.

use std::io;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use leasehold::patterns::durable::{create_dir_durable, replace_at};
use leasehold::{Error as LeaseError, FileKind, LockDir};

use super::error::{Result, ResultError};

/// The mode of directories the store creates under its root, and in TARGET (where the umask
/// applies on top).
pub(super) const PRIVATE_DIR: u32 = 0o700;
pub(super) const TARGET_DIR: u32 = 0o777;

/// Collects the regular files under `dir` as `/`-separated paths (prefixed with `prefix`),
/// through handles: a symlink, FIFO, socket or device anywhere is refused, never followed.
pub(super) fn walk(dir: &LockDir, prefix: &str, out: &mut Vec<String>) -> Result<()> {
    let source = |path: &Path, reason: String| ResultError::Source {
        path: path.to_path_buf(),
        reason,
    };
    let names =
        names(dir, true).map_err(|e| source(dir.path(), format!("cannot read directory: {e}")))?;
    for name in names {
        let rel = format!("{prefix}{name}");
        let path = dir.path().join(&name);
        match dir
            .entry(&name)
            .map_err(|e| source(&path, format!("cannot inspect: {e}")))?
        {
            Some(FileKind::Directory) => {
                let child = child(dir, &name, None).map_err(|e| source(&path, e.to_string()))?;
                if let Some(child) = child {
                    walk(&child, &format!("{rel}/"), out)?;
                }
            }
            Some(FileKind::Regular) => out.push(rel),
            Some(what) => {
                return Err(source(
                    &path,
                    format!("is {what} (only regular files and directories are staged)"),
                ));
            }
            None => {} // gone meanwhile
        }
    }
    Ok(())
}

/// `rel` split into its directory part and its file name.
pub(super) fn split(rel: &str) -> (&str, &str) {
    rel.rsplit_once('/').unwrap_or(("", rel))
}

/// Copies the regular file `rel` from `from` into `to` (creating directories with
/// `dir_mode`), through handles on both sides: the source is opened without following and
/// checked regular (a FIFO swapped in is refused at once), the copy gets the source's
/// permission bits without set-id bits at creation (umask applying), and replaces the
/// destination durably. `Err(Ok(e))`: the source is unusable; `Err(Err(e))`: writing failed.
pub(super) fn copy(
    from: &LockDir,
    to: &LockDir,
    rel: &str,
    dir_mode: u32,
) -> std::result::Result<(), (bool, io::Error)> {
    let (dir, name) = split(rel);
    let gone = || io::Error::new(io::ErrorKind::NotFound, format!("{rel}: vanished"));
    let src_dir = descend(from, dir, None).map_err(|e| (true, e))?;
    let src_dir = src_dir.ok_or_else(|| (true, gone()))?;
    let (mut file, mode) = src_dir
        .open_read(name)
        .map_err(|e| (true, e.into()))?
        .ok_or_else(|| (true, gone()))?;
    let dst_dir = descend(to, dir, Some(dir_mode))
        .map_err(|e| (false, e))?
        .ok_or_else(|| (false, gone()))?;
    replace_at(&dst_dir, name, mode & 0o777, &mut |out| {
        io::copy(&mut file, out).map(drop)
    })
    .map_err(|e| (false, e))
}

/// The directory at `path` (the caller's configuration, so symlinks in it are followed, as
/// for any configured path); with `create`, it and missing parents are created first (mode
/// 0700), their names made durable: a power cut must not take an answered `stage` or `apply`
/// away with a directory (found by the power-loss torture, crashfs). `Ok(None)`: it does not
/// exist and `create` is false.
pub(super) fn open_dir(path: &Path, create: bool) -> io::Result<Option<LockDir>> {
    if create {
        create_dir_durable(path, path)?;
    }
    found(LockDir::open(path))
}

/// The real child directory `name` of `dir` (a symlink or anything else is refused); with
/// `create`, made with that mode when missing (durably). `Ok(None)`: missing, and not made.
pub(super) fn child(dir: &LockDir, name: &str, create: Option<u32>) -> io::Result<Option<LockDir>> {
    match create {
        Some(mode) => Ok(Some(dir.create_child(name, mode)?)),
        None => found(dir.child(name, false)),
    }
}

/// Walks the `/`-separated directories of `rel` below `dir` (each a real directory),
/// creating missing ones with `create`'s mode when asked; `rel` empty: `dir` itself.
pub(super) fn descend(
    dir: &LockDir,
    rel: &str,
    create: Option<u32>,
) -> io::Result<Option<LockDir>> {
    let mut here = dir.clone();
    for part in rel.split('/').filter(|p| !p.is_empty()) {
        match child(&here, part, create)? {
            Some(next) => here = next,
            None => return Ok(None),
        }
    }
    Ok(Some(here))
}

/// `Ok(None)` for what does not exist.
fn found(r: leasehold::Result<LockDir>) -> io::Result<Option<LockDir>> {
    match r {
        Ok(dir) => Ok(Some(dir)),
        Err(LeaseError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Reads the regular file `name` in `dir` (at most `limit` bytes; a larger file is refused,
/// not read into memory). `Ok(None)`: nothing there.
pub(super) fn read(dir: &LockDir, name: &str, limit: u64) -> io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let Some((file, _)) = dir.open_read(name)? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: larger than a record can be; refused",
                dir.path().join(name).display()
            ),
        ));
    }
    Ok(Some(bytes))
}

/// Durably replaces the file `name` in `dir` with `bytes` (mode: permission bits, the umask
/// applying), through the handle ([`replace_at`]).
pub(super) fn write(dir: &LockDir, name: &str, mode: u32, bytes: &[u8]) -> io::Result<()> {
    replace_at(dir, name, mode, &mut |f| io::Write::write_all(f, bytes))
}

/// The names in `dir`, sorted. `strict`: a name that is not UTF-8 is an error (in the
/// store's own directories, where every name is ours); otherwise such names are left out
/// (a directory of the user's, where only our own UTF-8 names are looked for).
pub(super) fn names(dir: &LockDir, strict: bool) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    for name in dir.names()? {
        match name.into_string() {
            Ok(n) => names.push(n),
            Err(_) if !strict => {}
            Err(n) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{}: a name that is not valid UTF-8; refused",
                        dir.path().join(n).display()
                    ),
                ));
            }
        }
    }
    names.sort();
    Ok(names)
}

/// How a [`remove_tree_until`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Removal {
    /// The directory and everything in it are gone.
    Removed,
    /// Nothing stood there.
    Missing,
    /// Asked to stop before it was done: what was not yet removed is still there.
    Stopped,
}

/// Removes the directory `name` of `dir` and everything in it, through handles: a symlink
/// inside is removed as a link, never followed. `Ok(false)`: nothing there.
pub(super) fn remove_tree(dir: &LockDir, name: &str) -> io::Result<bool> {
    Ok(remove_tree_until(dir, name, &|| false)? == Removal::Removed)
}

/// [`remove_tree`], asking `stop` before each entry: once it answers `true` the removal
/// ends there ([`Removal::Stopped`]), leaving the rest.
pub(super) fn remove_tree_until(
    dir: &LockDir,
    name: &str,
    stop: &dyn Fn() -> bool,
) -> io::Result<Removal> {
    let Some(inner) = child(dir, name, None)? else {
        return Ok(Removal::Missing);
    };
    for entry in names(&inner, true)? {
        if stop() {
            return Ok(Removal::Stopped);
        }
        match inner.entry(&entry)? {
            Some(FileKind::Directory)
                if remove_tree_until(&inner, &entry, stop)? == Removal::Stopped =>
            {
                return Ok(Removal::Stopped);
            }
            Some(FileKind::Directory) => {}
            Some(_) => {
                inner.remove_file(&entry)?;
            }
            None => {}
        }
    }
    Ok(match dir.remove_dir(name)? {
        true => Removal::Removed,
        false => Removal::Missing,
    })
}

/// Locks the directory `dir` exclusively for the caller, waiting within `budget`: a `flock`
/// on the handle's own open file description (the library's `lock_descriptor`), held until
/// the handle and every handle opened below it are dropped. Windows: no descriptor to lock
/// (the store's per-ID lease is the only exclusion there).
pub(super) fn lock(dir: &LockDir, budget: &leasehold::Budget) -> leasehold::Result<()> {
    #[cfg(unix)]
    return leasehold::LeaseOptions::new().lock_descriptor(
        dir.as_fd(),
        leasehold::LockMode::Exclusive,
        budget,
    );
    #[cfg(not(unix))]
    {
        let _ = (dir, budget);
        Ok(())
    }
}

pub(super) fn describe_files(verb: &str, files: &[String], target: &Path) -> String {
    if files.is_empty() {
        "nothing".into()
    } else {
        format!("{verb} {} file(s) into {}", files.len(), target.display())
    }
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
