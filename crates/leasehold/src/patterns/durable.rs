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
//!
//! Temporary names are `.NAME.tmp.PID.N` ([`temporary_name`]; [`temporary_of`] reads one
//! back). A process killed mid-rewrite leaves its temporary behind (harmless: never read as
//! the document); [`remove_temporaries`] removes them, and a store calls it under its lease
//! when it opens the document (nobody else can be writing one then). A leftover whose name
//! a later process would pick (its pid reused) is stepped over: the exclusive create fails
//! with `EEXIST` and the rewrite tries a fresh name. A writer that holds an exclusive kernel
//! lease every writer of the file takes uses one fixed name instead
//! ([`replace_file_held`]): a killed writer's leftover is then the name the next rewrite
//! removes and creates afresh, and nothing needs listing.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::lease::LockDir;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Atomically replaces the file at `path` with `bytes` (see the module docs for the order).
///
/// On error the previous file, if any, is left exactly as it was. The temporary is created
/// through [`LockDir::create_new`], whose names are `str`s: a file name that is not valid
/// UTF-8 is refused (`InvalidInput`) before anything is written.
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
    /// Creates the temporary file exclusively (mode 0600, final component not followed):
    /// [`LockDir::create_new`] in its directory, the crate's one careful creation.
    fn create(&mut self, tmp: &Path) -> io::Result<File> {
        InDir(&LockDir::open(parent_of(tmp))?).create(tmp)
    }
    /// Writes some of `buf` (a short count is retried with the rest, as `write(2)` allows).
    fn write(&mut self, file: &mut File, buf: &[u8]) -> io::Result<usize> {
        file.write(buf)
    }
    /// Flushes the temporary file's data and metadata to the device.
    fn sync(&mut self, file: &File) -> io::Result<()> {
        file.sync_all()
    }
    /// Renames the temporary file over the target. On POSIX both names are looked up in one
    /// handle of their directory: `rename(2)` resolves its two paths one after the other, so
    /// a directory above them swapped in between would move the file from the old directory
    /// into the one now at the path.
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        #[cfg(unix)]
        if parent_of(from) == parent_of(to) {
            return InDir(&LockDir::open(parent_of(to))?).rename(from, to);
        }
        std::fs::rename(from, to)
    }
    /// Flushes the directory, making the rename durable.
    fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        sync_dir(dir)
    }
    /// Removes the temporary file (its name: a symlink there is removed, never followed; a
    /// directory there is an error): a failed rewrite's, or the leftover a killed writer left
    /// at [`held_temporary_name`].
    fn remove(&mut self, tmp: &Path) -> io::Result<()> {
        std::fs::remove_file(tmp)
    }
}

/// The real system calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealIo;

impl DurableIo for RealIo {}

/// The real system calls, made in one open directory: for a caller that rewrites a file of a
/// directory it already holds open (and read the file through), so that the rewrite opens it
/// no more (a `Document` update: one directory open per update instead of four). The paths
/// given to its methods must name entries of that directory; only their file names are used.
/// The same calls as [`RealIo`] otherwise (the temporary created by
/// [`LockDir::create_new`], the rename by [`LockDir::rename`] on POSIX, the directory synced
/// by [`LockDir::sync`]).
#[derive(Debug, Clone, Copy)]
pub struct InDir<'a>(pub &'a LockDir);

impl DurableIo for InDir<'_> {
    fn create(&mut self, tmp: &Path) -> io::Result<File> {
        let name = tmp
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a temporary's name"))?;
        self.0.create_new(name, 0o600)?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{}: the name is taken", tmp.display()),
            )
        })
    }

    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        #[cfg(unix)]
        if let (Some(from_name), Some(to_name)) = (
            from.file_name().and_then(|n| n.to_str()),
            to.file_name().and_then(|n| n.to_str()),
        ) {
            return match self.0.rename(from_name, self.0, to_name)? {
                true => Ok(()),
                false => Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{}: no such file to rename", from.display()),
                )),
            };
        }
        std::fs::rename(from, to)
    }

    fn sync_dir(&mut self, _dir: &Path) -> io::Result<()> {
        self.0.sync()
    }

    fn remove(&mut self, tmp: &Path) -> io::Result<()> {
        let name = tmp
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a temporary's name"))?;
        self.0.remove_file(name).map(drop).map_err(io::Error::from)
    }
}

/// [`replace_file_observed`] with every system call going through `io` (fault injection).
pub fn replace_file_with(
    path: &Path,
    bytes: &[u8],
    io: &mut dyn DurableIo,
    after_step: &mut dyn FnMut(Step, &Path) -> io::Result<()>,
) -> io::Result<()> {
    rewrite(path, bytes, io, after_step, false)
}

/// [`replace_file_with`] for a writer that holds, for the whole rewrite, an exclusive kernel
/// lease that every writer of `path` takes (a `Document` under its kernel lease): no two
/// rewrites of `path` are ever under way at once, so the temporary has one fixed name,
/// [`held_temporary_name`], instead of a fresh one. The leftover a killed writer left is
/// then the very name the next rewrite creates: that rewrite removes it (through `io`,
/// never following it) and creates the name afresh, so leftovers cannot pile up and no
/// listing of the directory is needed to collect them.
///
/// Never call it under a lease that does not exclude every other writer of `path` at the
/// kernel (a record lease across hosts: a paused predecessor could rename the successor's
/// half-written temporary into place); use [`replace_file_with`] there.
pub fn replace_file_held(
    path: &Path,
    bytes: &[u8],
    io: &mut dyn DurableIo,
    after_step: &mut dyn FnMut(Step, &Path) -> io::Result<()>,
) -> io::Result<()> {
    rewrite(path, bytes, io, after_step, true)
}

/// The rewrite of [`replace_file_with`] (`held`: the temporary's name is
/// [`held_temporary_name`], see [`replace_file_held`]).
fn rewrite(
    path: &Path,
    bytes: &[u8],
    io: &mut dyn DurableIo,
    after_step: &mut dyn FnMut(Step, &Path) -> io::Result<()>,
    held: bool,
) -> io::Result<()> {
    let dir = parent_of(path);
    let mut tmp = match held {
        true => path.with_file_name(held_temporary_name(&file_name_of(path))),
        false => temp_name(path),
    };
    let mut renamed = false;
    let mut created = false;
    let result = (|| {
        let mut taken = 0;
        let mut f = loop {
            match io.create(&tmp) {
                Ok(f) => break f,
                // A killed writer's leftover at the one name: nobody else's rewrite.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && held && taken == 0 => {
                    taken += 1;
                    if io.remove(&tmp).is_err() {
                        // Not removable (a directory planted there): a fresh name instead.
                        tmp = temp_name(path);
                    }
                }
                // A leftover of a killed rewrite whose pid we now have: step over it.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && taken < TEMP_NAME_TRIES => {
                    taken += 1;
                    tmp = temp_name(path);
                }
                Err(e) => return Err(e),
            }
        };
        created = true;
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
    if result.is_err() && !renamed && created {
        let _ = io.remove(&tmp);
    }
    result
}

/// Creates the directory `dir` (and any missing parents, mode 0700) so that its name
/// survives a power cut, and makes the names from `base` down to `dir` durable too.
///
/// A new name lives in its parent directory, and only an `fsync` of that parent makes it
/// durable: a document saved with [`replace_file`] into a directory that was just created
/// (a fresh home, `storages/`, a session directory) would otherwise vanish with its
/// directory after a power loss, acknowledged write and all. So this `fsync`s the parent of
/// every directory it creates, and — because another process (a lease taking its lock file
/// beside the document, say) may have created part of the path without syncing it — also
/// the parent of every directory from `dir` up to and including `base`, whether created now
/// or not. `base` is the root of what the caller owns (the store's home); pass `dir` itself
/// when only `dir`'s own name matters. Directories above `base` that already existed are
/// taken to be durable. Proven by the power-loss torture (`crates/crashfs`), which loses
/// such writes without it.
pub fn create_dir_durable(dir: &Path, base: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut probe = dir;
    while std::fs::symlink_metadata(probe).is_err() {
        missing.push(probe.to_path_buf());
        match probe.parent() {
            Some(p) if !p.as_os_str().is_empty() => probe = p,
            _ => break,
        }
    }
    create_dirs(dir)?;
    let mut parents: Vec<PathBuf> = Vec::new();
    let mut push_parent = |d: &Path| {
        let parent = match d.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !parents.contains(&parent) {
            parents.push(parent);
        }
    };
    for d in &missing {
        push_parent(d);
    }
    if dir.starts_with(base) {
        let mut d = dir;
        loop {
            push_parent(d);
            if d == base {
                break;
            }
            match d.parent() {
                Some(p) => d = p,
                None => break,
            }
        }
    } else {
        push_parent(dir);
    }
    // Deepest first: a name is synced before the name of the directory holding it.
    for parent in parents {
        sync_dir(&parent)?;
    }
    Ok(())
}

/// [`replace_file`] through a directory handle: durably replaces the file `name` in `dir`
/// with what `fill` writes, in the same order and for the same reasons (module docs) — a
/// temporary beside it ([`temporary_name`], created exclusively with `mode`: permission
/// bits, the umask applying; never following, a taken name stepped over), written, flushed,
/// fsynced, renamed over `name` (a symlink standing there is replaced, never followed), then
/// `dir` fsynced. Nothing is reached through a path string, so a directory swapped after
/// `dir` was opened cannot redirect the write. If any step fails the temporary is removed
/// and the old file is untouched.
///
/// # Errors
/// The first step's I/O error (or `fill`'s), naming the path.
pub fn replace_at(
    dir: &LockDir,
    name: &str,
    mode: u32,
    fill: &mut dyn FnMut(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    let mut taken = 0;
    let (tmp, mut file) = loop {
        let tmp = temporary_name(name);
        match dir.create_new(&tmp, mode)? {
            Some(file) => break (tmp, file),
            // A leftover of a killed rewrite whose pid we now have: step over it.
            None if taken < TEMP_NAME_TRIES => taken += 1,
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{}: {TEMP_NAME_TRIES} temporary names taken; remove the leftovers of killed rewrites",
                        dir.path().join(&tmp).display()
                    ),
                ));
            }
        }
    };
    let done = (|| {
        fill(&mut file)?;
        file.flush()?;
        file.sync_all()?;
        drop(file);
        match dir.rename(&tmp, dir, name)? {
            true => Ok(()),
            false => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{}: the temporary vanished before it was renamed into place",
                    dir.path().join(&tmp).display()
                ),
            )),
        }
    })();
    if done.is_err() {
        let _ = dir.remove_file(&tmp);
        return done;
    }
    dir.sync()
}

/// Creates the directory `path` and its missing parents, private to this user (mode 0700 on
/// POSIX; the umask may take more away), as a lock file's missing parents are made: the one
/// place the crate and the stores create directories for their state. An existing directory
/// is fine, and concurrent creators do not fail each other. It syncs nothing: for a name that
/// must survive a power cut, [`create_dir_durable`].
///
/// # Errors
/// The I/O error of the first directory that could not be created (a file in the way, no
/// permission, …).
pub fn create_dirs(path: &Path) -> io::Result<()> {
    crate::lease::create_dirs(path)
}

/// The directory of `path`, `.` for a bare name.
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// How many taken temporary names a rewrite steps over before it gives up (`EEXIST`).
const TEMP_NAME_TRIES: u32 = 64;

/// Removes the temporaries that killed rewrites of `path` left beside it (`.NAME.tmp.*`):
/// regular files only — a symlink, directory or anything else of that name is left as it is,
/// and nothing is followed (`unlink` removes a name, never what a link points to). Returns
/// how many were removed; a missing directory has none. [`remove_temporaries_in`] with the
/// directory opened from `path`'s parent.
///
/// Call it only while holding the lease that guards `path`: a temporary is then nobody's
/// rewrite in progress (every writer holds that lease while it rewrites).
///
/// # Errors
/// An I/O error listing the directory or removing a temporary.
pub fn remove_temporaries(path: &Path) -> io::Result<usize> {
    let Some(name) = path.file_name() else {
        return Ok(0);
    };
    let dir = match LockDir::open(parent_of(path)) {
        Ok(dir) => dir,
        Err(crate::Error::NotFound { .. }) => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    remove_temporaries_in(&dir, &name.to_string_lossy())
}

/// [`remove_temporaries`] of the file `name` in the open directory `dir`: for a caller that
/// holds the directory open for the rest of its update (one open, and the names looked up in
/// the directory it opened). The listing does not update the directory's access time where
/// the platform lets it (Linux: `O_NOATIME` on a directory of ours): under `relatime` every
/// listing after a rename would otherwise add an inode update to the next `fsync`.
///
/// # Errors
/// An I/O error listing the directory or removing a temporary.
pub fn remove_temporaries_in(dir: &LockDir, name: &str) -> io::Result<usize> {
    let mut removed = 0;
    for found in dir.names()? {
        let found = found.to_string_lossy();
        if temporary_of(&found).is_none_or(|(of, _)| of != name) {
            continue;
        }
        // `entry` does not follow a symlink.
        if dir.entry(&found)? != Some(crate::FileKind::Regular) {
            continue;
        }
        if dir.remove_file(&found)? {
            removed += 1;
        }
    }
    Ok(removed)
}

/// Makes a rename, creation or removal in `dir` durable: `fsync` of the directory on POSIX
/// and WASI; nothing on Windows (below). The one directory sync of the crate and of the
/// stores.
///
/// # Errors
/// Opening or syncing the directory failed.
#[cfg(not(windows))]
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Windows cannot `fsync` a directory (a directory handle needs backup semantics and write
/// access); NTFS records the rename in its metadata journal instead.
#[cfg(windows)]
pub fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

/// The file name of `path`, lossily as a string (empty for none).
fn file_name_of(path: &Path) -> String {
    path.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A temporary name beside `path`, unique within this process and across processes.
fn temp_name(path: &Path) -> PathBuf {
    path.with_file_name(temporary_name(&file_name_of(path)))
}

/// The one temporary name of the rewrites of the file `name` made under an exclusive kernel
/// lease ([`replace_file_held`]): `.NAME.tmp.0.0`, a name of [`temporary_name`]'s form, so
/// that [`remove_temporaries`] and [`temporary_of`] know it as a temporary of `NAME`.
pub fn held_temporary_name(name: &str) -> String {
    format!(".{name}.tmp.0.0")
}

/// The next temporary name for a rewrite of the file `name`: `.NAME.tmp.PID.N`, the one
/// naming [`remove_temporaries`] and [`temporary_of`] recognise (for rewrites made through
/// directory handles). A name may be taken by a leftover of a killed process whose pid was
/// reused: create it exclusively and take the next name on `EEXIST`.
pub fn temporary_name(name: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let pid = temporary_pid();
    format!(".{name}.tmp.{pid}.{n}")
}

/// The process number this process's temporary names carry (see [`temporary_name`]): its
/// pid; 0 on WASI, which has no process ids (a clash with another instance's leftover is
/// stepped over like any other).
pub fn temporary_pid() -> u32 {
    // WASI has no process ids: 0 there (a clash with another instance's leftover is stepped
    // over like any other, see `temporary_name`).
    crate::lease::process_id().unwrap_or(0)
}

/// Which file, and which process, the temporary name `candidate` belongs to, if it is one
/// [`temporary_name`] gives: `.NAME.tmp.PID.N` → `(NAME, PID)`. The one reading of the
/// naming: a store that removes its own leftovers through directory handles (or knows which
/// process was killed) asks this instead of matching names itself.
pub fn temporary_of(candidate: &str) -> Option<(&str, u32)> {
    let rest = candidate.strip_prefix('.')?;
    let (rest, n) = rest.rsplit_once('.')?;
    let (rest, pid) = rest.rsplit_once('.')?;
    let name = rest.strip_suffix(".tmp")?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if name.is_empty() || !digits(n) || !digits(pid) {
        return None;
    }
    Some((name, pid.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;

    use super::*;

    #[test]
    fn create_dir_durable_creates_missing_parents_and_accepts_an_existing_directory() {
        let dir = crate::test_dir();
        let deep = dir.path().join("a/b/c");
        create_dir_durable(&deep, &dir.path().join("a")).unwrap();
        assert!(deep.is_dir());
        create_dir_durable(&deep, &deep).unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        assert!(create_dir_durable(&file.join("d"), &file).is_err());
    }

    #[test]
    fn a_stale_temporary_under_the_chosen_name_does_not_fail_the_write() {
        // What a rewrite killed before its rename leaves under a name this process picks
        // again (a reused pid): creating it exclusively fails with EEXIST.
        struct Stale {
            left: usize,
            tried: Vec<PathBuf>,
        }
        impl DurableIo for Stale {
            fn create(&mut self, tmp: &Path) -> io::Result<File> {
                self.tried.push(tmp.to_path_buf());
                if self.left > 0 {
                    self.left -= 1;
                    std::fs::write(tmp, b"stale")?;
                }
                let mut options = OpenOptions::new();
                options.write(true).create_new(true);
                options.open(tmp)
            }
        }
        let dir = crate::test_dir();
        let p = dir.path().join("doc.json");
        let mut io = Stale {
            left: 3,
            tried: Vec::new(),
        };
        replace_file_with(&p, b"new", &mut io, &mut |_, _| Ok(())).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(io.tried.len(), 4, "one fresh name per stale one");
        let mut names = io.tried.clone();
        names.dedup();
        assert_eq!(names.len(), 4);
    }

    #[test]
    fn replaces_content_and_leaves_no_temporaries() {
        let dir = crate::test_dir();
        let p = dir.path().join("doc.json");
        replace_file(&p, b"one").unwrap();
        replace_file(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "temporary files left behind");
    }

    #[test]
    fn a_leftover_temporary_with_our_next_name_is_stepped_over() {
        let dir = crate::test_dir();
        let p = dir.path().join("doc.json");
        // The names the next rewrites of this process would pick, as a killed process whose
        // pid we now have would have left them.
        let next = COUNTER.load(Ordering::Relaxed);
        let pid = temporary_pid();
        for n in next..next + 8 {
            std::fs::write(dir.path().join(format!(".doc.json.tmp.{pid}.{n}")), b"old").unwrap();
        }
        replace_file(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        // The leftovers are not ours to remove here; under the lease they are removed.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 9);
        assert_eq!(remove_temporaries(&p).unwrap(), 8);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_held_rewrite_reuses_the_one_name_a_killed_writer_left() {
        let dir = crate::test_dir();
        let p = dir.path().join("doc.json");
        let held = dir.path().join(held_temporary_name("doc.json"));
        assert_eq!(
            temporary_of(&held_temporary_name("doc.json")),
            Some(("doc.json", 0))
        );
        std::fs::write(&held, b"half a version").unwrap();
        let mut used = Vec::new();
        replace_file_held(&p, b"one", &mut RealIo, &mut |_, tmp| {
            used.push(tmp.to_path_buf());
            Ok(())
        })
        .unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        assert!(used.iter().all(|t| *t == held), "{used:?}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "nothing left"
        );
        // A failed held rewrite removes its temporary like any other.
        let failed = replace_file_held(&p, b"two", &mut RealIo, &mut |step, _| match step {
            Step::Synced => Err(io::Error::other("injected")),
            _ => Ok(()),
        });
        assert!(failed.is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "nothing left"
        );
    }

    #[test]
    fn a_held_rewrite_steps_over_what_cannot_be_removed_at_its_name() {
        let dir = crate::test_dir();
        let p = dir.path().join("doc.json");
        let held = dir.path().join(held_temporary_name("doc.json"));
        std::fs::create_dir(&held).unwrap();
        std::fs::write(held.join("inside"), b"kept").unwrap();
        replace_file_held(&p, b"new", &mut RealIo, &mut |_, _| Ok(())).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(std::fs::read(held.join("inside")).unwrap(), b"kept");
        // A symlink there is removed as a name, never followed.
        #[cfg(unix)]
        {
            let victim = crate::test_dir();
            std::fs::write(victim.path().join("secret"), b"s").unwrap();
            std::fs::remove_dir_all(&held).unwrap();
            std::os::unix::fs::symlink(victim.path().join("secret"), &held).unwrap();
            replace_file_held(&p, b"newer", &mut RealIo, &mut |_, _| Ok(())).unwrap();
            assert_eq!(std::fs::read(&p).unwrap(), b"newer");
            assert_eq!(std::fs::read(victim.path().join("secret")).unwrap(), b"s");
            assert!(
                std::fs::symlink_metadata(&held).is_err(),
                "the link is gone"
            );
        }
    }

    #[cfg(unix)]
    #[test]
    fn remove_temporaries_removes_regular_files_only_and_follows_nothing() {
        let dir = crate::test_dir();
        let victim = crate::test_dir();
        std::fs::write(victim.path().join("secret"), b"s").unwrap();
        let p = dir.path().join("doc.json");
        std::fs::write(&p, b"{}").unwrap();
        std::fs::write(dir.path().join(".doc.json.tmp.1.0"), b"x").unwrap();
        std::fs::write(dir.path().join(".other.json.tmp.1.0"), b"x").unwrap();
        std::os::unix::fs::symlink(
            victim.path().join("secret"),
            dir.path().join(".doc.json.tmp.2.0"),
        )
        .unwrap();
        std::fs::create_dir(dir.path().join(".doc.json.tmp.3.0")).unwrap();
        std::fs::write(dir.path().join(".doc.json.tmp.3.0").join("inner"), b"i").unwrap();
        assert_eq!(remove_temporaries(&p).unwrap(), 1);
        assert!(!dir.path().join(".doc.json.tmp.1.0").exists());
        assert!(dir.path().join(".other.json.tmp.1.0").exists());
        assert!(
            dir.path()
                .join(".doc.json.tmp.2.0")
                .symlink_metadata()
                .is_ok()
        );
        assert!(dir.path().join(".doc.json.tmp.3.0").join("inner").exists());
        assert_eq!(std::fs::read(victim.path().join("secret")).unwrap(), b"s");
        assert_eq!(std::fs::read(&p).unwrap(), b"{}");
        assert_eq!(
            remove_temporaries(&dir.path().join("absent").join("x")).unwrap(),
            0
        );
    }

    /// The collection a store makes at every update leaves the directory's access time alone:
    /// under `relatime` a listing after a change would otherwise update it, an inode update
    /// that rides into the next `fsync`. (On a file system mounted `noatime` this passes
    /// either way.)
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn collecting_temporaries_leaves_the_directory_access_time_alone() {
        use rustix::fs::{AtFlags, CWD, Timespec, Timestamps, statat, utimensat};
        let dir = crate::test_dir();
        let p = dir.path().join("doc.json");
        replace_file(&p, b"one").unwrap();
        std::fs::write(dir.path().join(".doc.json.tmp.1.0"), b"x").unwrap();
        // An access time older than the last change: the next listing would update it.
        let old = Timespec {
            tv_sec: 1_000_000,
            tv_nsec: 0,
        };
        let now = statat(CWD, dir.path(), AtFlags::empty()).unwrap();
        let times = Timestamps {
            last_access: old,
            last_modification: Timespec {
                tv_sec: now.st_mtime,
                tv_nsec: now.st_mtime_nsec as _,
            },
        };
        utimensat(CWD, dir.path(), &times, AtFlags::empty()).unwrap();
        assert_eq!(remove_temporaries(&p).unwrap(), 1);
        let after = statat(CWD, dir.path(), AtFlags::empty()).unwrap();
        assert_eq!(
            after.st_atime, old.tv_sec,
            "the listing updated the access time"
        );
    }

    #[test]
    fn temporary_names_are_read_back_as_their_file_and_process() {
        let made = temporary_name("a.tmp.b.json");
        assert_eq!(temporary_of(&made), Some(("a.tmp.b.json", temporary_pid())));
        assert_eq!(temporary_of(".doc.json.tmp.42.7"), Some(("doc.json", 42)));
        for not in [
            "doc.json",
            ".doc.json.tmp.42",
            ".doc.json.tmp.x.7",
            ".doc.json.tmp.42.",
            "..tmp.1.2",
            "doc.json.tmp.1.2",
            ".doc.json.tmq.1.2",
        ] {
            assert_eq!(temporary_of(not), None, "{not}");
        }
    }

    #[test]
    fn failure_leaves_old_content() {
        let dir = crate::test_dir();
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
            let dir = crate::test_dir();
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
