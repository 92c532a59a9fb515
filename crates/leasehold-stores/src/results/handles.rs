//! Result data through directory handles: every read, write, rename and removal below a
//! managed root (or a TARGET, or a SRC) is made relative to an opened directory descriptor,
//! one component at a time with `O_NOFOLLOW` (`openat`, `mkdirat`, `renameat`, `unlinkat`),
//! so a symlink anywhere below the directory we were given is refused by the kernel itself
//! rather than followed, and a directory swapped after we looked cannot redirect a write.
//!
//! Why per-component `openat(O_NOFOLLOW)` rather than cap-std: cap-std confines resolution to
//! a directory but *follows* symlinks that stay inside it, and we want none followed (a link
//! inside TARGET is another user's redirection even when it points inside); rustix, already
//! our system-call layer, gives the kernel's own no-follow check per component on Linux and
//! macOS alike, with no path-string checks of ours.
//!
//! Files are opened `O_NOFOLLOW|O_NONBLOCK` (a FIFO swapped in cannot hang us) and checked with
//! `fstat` to be regular before a byte is read; new files get their mode at creation on the
//! descriptor (the source's permission bits without set-id bits, the umask applying, as `cp`
//! does), never by path afterwards.

#[cfg(unix)]
pub(super) use unix::Tree;
#[cfg(windows)]
pub(super) use windows::Tree;

/// What stands at a name (never following a symlink).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    File,
    Dir,
    /// A symlink, FIFO, socket or device.
    Other(&'static str),
}

/// How a [`Tree::remove_tree_until`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Removal {
    /// The directory and everything in it are gone.
    Removed,
    /// Nothing stood there.
    Missing,
    /// Asked to stop before it was done: what was not yet removed is still there.
    Stopped,
}

fn refused(path: &std::path::Path, what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!(
            "{} is {what}; refused (nothing below the root is followed or opened unless it is a real directory or regular file)",
            path.display()
        ),
    )
}

impl Tree {
    /// Reads the regular file `name` (at most `limit` bytes; a larger file is refused).
    pub(in crate::results) fn read(
        &self,
        name: &str,
        limit: u64,
    ) -> std::io::Result<Option<Vec<u8>>> {
        use std::io::Read;
        let Some((file, _)) = self.open_file(name)? else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        file.take(limit + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > limit {
            return Err(refused(&self.join(name), "larger than a record can be"));
        }
        Ok(Some(bytes))
    }
}

#[cfg(unix)]
#[allow(clippy::unnecessary_cast)] // st_mode is u32 on Linux, u16 on macOS
mod unix {
    use std::fs::File;
    use std::io::{self, Write};
    use std::os::fd::{AsFd, OwnedFd};
    use std::path::{Path, PathBuf};

    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    use rustix::io::Errno;

    use super::{Kind, Removal, refused};

    /// An opened directory that data is reached through.
    #[derive(Debug)]
    pub(in crate::results) struct Tree {
        fd: OwnedFd,
        path: PathBuf,
    }

    fn ctx(path: &Path, e: Errno) -> io::Error {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("{}: {e}", path.display()),
        )
    }

    fn kind_of(mode: u32) -> Kind {
        match FileType::from_raw_mode(mode as _) {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Other("a symbolic link"),
            FileType::Fifo => Kind::Other("a FIFO"),
            FileType::Socket => Kind::Other("a socket"),
            FileType::CharacterDevice | FileType::BlockDevice => Kind::Other("a device"),
            _ => Kind::Other("not a regular file or directory"),
        }
    }

    const DIR_FLAGS: OFlags = OFlags::RDONLY
        .union(OFlags::DIRECTORY)
        .union(OFlags::CLOEXEC)
        .union(OFlags::NOFOLLOW);

    impl Tree {
        /// Opens the directory at `path` (the caller's configuration: symlinks in it are
        /// followed, as for any configured path); with `create`, creates it and missing
        /// parents with `mode` first. `Ok(None)`: it does not exist and `create` is false.
        pub(in crate::results) fn open(
            path: &Path,
            create: Option<u32>,
        ) -> io::Result<Option<Tree>> {
            if create.is_some() {
                // The managed root (or TARGET) and any missing parents, their names made
                // durable (mode 0700): a power cut must not take an answered `stage` or
                // `apply` away with a directory (found by the power-loss torture, crashfs).
                leasehold::patterns::durable::create_dir_durable(path, path)?;
            }
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            match rustix::fs::openat(rustix::fs::CWD, path, flags, Mode::empty()) {
                Ok(fd) => Ok(Some(Tree {
                    fd,
                    path: path.to_path_buf(),
                })),
                Err(Errno::NOENT) => Ok(None),
                Err(Errno::NOTDIR) => Err(refused(path, "not a directory")),
                Err(e) => Err(ctx(path, e)),
            }
        }

        /// The directory's path (for messages).
        pub(in crate::results) fn path(&self) -> &Path {
            &self.path
        }

        /// The path of `name` in this directory (for messages).
        pub(in crate::results) fn join(&self, name: &str) -> PathBuf {
            self.path.join(name)
        }

        /// What stands at `name`, never following it; `None`: nothing.
        pub(in crate::results) fn kind(&self, name: &str) -> io::Result<Option<Kind>> {
            match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => Ok(Some(kind_of(st.st_mode as u32))),
                Err(Errno::NOENT) => Ok(None),
                Err(e) => Err(ctx(&self.join(name), e)),
            }
        }

        /// The real child directory `name` (a symlink or anything else is refused); with
        /// `create`, made with `mode` when missing. `Ok(None)`: missing, and not created.
        pub(in crate::results) fn child(
            &self,
            name: &str,
            create: Option<u32>,
        ) -> io::Result<Option<Tree>> {
            let path = self.join(name);
            if let Some(mode) = create {
                match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode as _)) {
                    // A new name is durable only once its directory is synced: nested
                    // candidate and TARGET directories must survive a power cut too.
                    Ok(()) => rustix::fs::fsync(&self.fd).map_err(|e| ctx(&path, e))?,
                    Err(Errno::EXIST) => {}
                    Err(e) => return Err(ctx(&path, e)),
                }
            }
            match rustix::fs::openat(&self.fd, name, DIR_FLAGS, Mode::empty()) {
                Ok(fd) => Ok(Some(Tree { fd, path })),
                Err(Errno::NOENT) => Ok(None),
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    let what = match self.kind(name)? {
                        Some(Kind::Other(what)) => what,
                        _ => "not a directory",
                    };
                    Err(refused(&path, what))
                }
                Err(e) => Err(ctx(&path, e)),
            }
        }

        /// Walks the `/`-separated directories of `rel` (each a real directory), creating
        /// missing ones with `mode` when asked.
        pub(in crate::results) fn descend(
            &self,
            rel: &str,
            create: Option<u32>,
        ) -> io::Result<Option<Tree>> {
            let mut here: Option<Tree> = None;
            for part in rel.split('/').filter(|p| !p.is_empty()) {
                let next = match &here {
                    None => self.child(part, create)?,
                    Some(t) => t.child(part, create)?,
                };
                match next {
                    Some(t) => here = Some(t),
                    None => return Ok(None),
                }
            }
            match here {
                Some(t) => Ok(Some(t)),
                None => self.reopen().map(Some),
            }
        }

        fn reopen(&self) -> io::Result<Tree> {
            let fd = rustix::fs::openat(&self.fd, ".", DIR_FLAGS, Mode::empty())
                .map_err(|e| ctx(&self.path, e))?;
            Ok(Tree {
                fd,
                path: self.path.clone(),
            })
        }

        /// Opens the regular file `name` for reading (`O_NOFOLLOW|O_NONBLOCK`, checked with
        /// `fstat`): the file and its permission bits. `Ok(None)`: nothing there.
        pub(in crate::results) fn open_file(&self, name: &str) -> io::Result<Option<(File, u32)>> {
            let path = self.join(name);
            let flags = OFlags::RDONLY
                | OFlags::NOFOLLOW
                | OFlags::NONBLOCK
                | OFlags::CLOEXEC
                | OFlags::NOCTTY;
            let fd = match rustix::fs::openat(&self.fd, name, flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => return Ok(None),
                Err(Errno::LOOP) => return Err(refused(&path, "a symbolic link")),
                Err(Errno::NXIO) => return Err(refused(&path, "a socket")),
                Err(e) => return Err(ctx(&path, e)),
            };
            let st = rustix::fs::fstat(&fd).map_err(|e| ctx(&path, e))?;
            match kind_of(st.st_mode as u32) {
                Kind::File => Ok(Some((File::from(fd), st.st_mode as u32 & 0o7777))),
                Kind::Dir => Err(refused(&path, "a directory")),
                Kind::Other(what) => Err(refused(&path, what)),
            }
        }

        /// Durably replaces `name` with what `fill` writes: a temporary beside it, created
        /// exclusively (never following) with `mode` (permission bits only; the umask
        /// applies), written, fsynced, renamed over `name` (a symlink standing there is
        /// replaced, never followed), then the directory fsynced.
        pub(in crate::results) fn write_with(
            &self,
            name: &str,
            mode: u32,
            fill: &mut dyn FnMut(&mut File) -> io::Result<()>,
        ) -> io::Result<()> {
            let flags = OFlags::WRONLY
                | OFlags::CREATE
                | OFlags::EXCL
                | OFlags::NOFOLLOW
                | OFlags::CLOEXEC
                | OFlags::NOCTTY;
            let perm = Mode::from_raw_mode((mode & 0o777) as _);
            let mut tries = 0;
            let (tmp, fd) = loop {
                let tmp = leasehold::patterns::durable::temporary_name(name);
                match rustix::fs::openat(&self.fd, tmp.as_str(), flags, perm) {
                    Ok(fd) => break (tmp, fd),
                    Err(Errno::EXIST) if tries < 64 => tries += 1,
                    Err(e) => return Err(ctx(&self.join(&tmp), e)),
                }
            };
            let mut file = File::from(fd);
            let done = (|| {
                fill(&mut file)?;
                file.flush()?;
                file.sync_all()?;
                rustix::fs::renameat(&self.fd, tmp.as_str(), &self.fd, name)
                    .map_err(|e| ctx(&self.join(name), e))
            })();
            if done.is_err() {
                let _ = rustix::fs::unlinkat(&self.fd, tmp.as_str(), AtFlags::empty());
                return done;
            }
            self.sync()
        }

        /// [`write_with`](Self::write_with) of `bytes`.
        pub(in crate::results) fn write(
            &self,
            name: &str,
            mode: u32,
            bytes: &[u8],
        ) -> io::Result<()> {
            self.write_with(name, mode, &mut |f| f.write_all(bytes))
        }

        /// The names in this directory; one that is not UTF-8 is an error.
        pub(in crate::results) fn names(&self) -> io::Result<Vec<String>> {
            self.list(true)
        }

        /// The names in this directory that are UTF-8 (others are left out): for a
        /// directory of the user's, where only our own (UTF-8) names are looked for.
        pub(in crate::results) fn utf8_names(&self) -> io::Result<Vec<String>> {
            self.list(false)
        }

        fn list(&self, strict: bool) -> io::Result<Vec<String>> {
            let fd = self.reopen()?;
            let mut names = Vec::new();
            let rd = rustix::fs::Dir::read_from(&fd.fd).map_err(|e| ctx(&self.path, e))?;
            for entry in rd {
                let entry = entry.map_err(|e| ctx(&self.path, e))?;
                let name = entry.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                match std::str::from_utf8(name) {
                    Ok(n) => names.push(n.to_string()),
                    Err(_) if !strict => {}
                    Err(_) => {
                        return Err(refused(
                            &self.join(&String::from_utf8_lossy(name)),
                            "a name that is not valid UTF-8",
                        ));
                    }
                }
            }
            names.sort();
            Ok(names)
        }

        /// Renames `from` in this directory to `to` in `dir` (never following either).
        /// `Ok(false)`: `from` did not exist.
        pub(in crate::results) fn rename(
            &self,
            from: &str,
            dir: &Tree,
            to: &str,
        ) -> io::Result<bool> {
            match rustix::fs::renameat(&self.fd, from, &dir.fd, to) {
                Ok(()) => Ok(true),
                Err(Errno::NOENT) => Ok(false),
                Err(e) => Err(ctx(&self.join(from), e)),
            }
        }

        /// Removes the file (or symlink: the link itself) `name`. `Ok(false)`: nothing there.
        pub(in crate::results) fn remove_file(&self, name: &str) -> io::Result<bool> {
            match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
                Ok(()) => Ok(true),
                Err(Errno::NOENT) => Ok(false),
                Err(e) => Err(ctx(&self.join(name), e)),
            }
        }

        /// Removes the directory `name` and everything in it, through handles: a symlink
        /// inside is removed as a link, never followed. `Ok(false)`: nothing there.
        pub(in crate::results) fn remove_tree(&self, name: &str) -> io::Result<bool> {
            Ok(self.remove_tree_until(name, &|| false)? == Removal::Removed)
        }

        /// [`remove_tree`](Self::remove_tree), asking `stop` before each entry: once it
        /// answers `true` the removal ends there ([`Removal::Stopped`]), leaving the rest.
        pub(in crate::results) fn remove_tree_until(
            &self,
            name: &str,
            stop: &dyn Fn() -> bool,
        ) -> io::Result<Removal> {
            let Some(dir) = self.child(name, None)? else {
                return Ok(Removal::Missing);
            };
            for entry in dir.names()? {
                if stop() {
                    return Ok(Removal::Stopped);
                }
                match dir.kind(&entry)? {
                    Some(Kind::Dir) if dir.remove_tree_until(&entry, stop)? == Removal::Stopped => {
                        return Ok(Removal::Stopped);
                    }
                    Some(Kind::Dir) => {}
                    Some(_) => {
                        dir.remove_file(&entry)?;
                    }
                    None => {}
                }
            }
            match rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR) {
                Ok(()) => Ok(Removal::Removed),
                Err(Errno::NOENT) => Ok(Removal::Missing),
                Err(e) => Err(ctx(&self.join(name), e)),
            }
        }

        /// `fsync` of the directory: its entries (creations, renames) are durable.
        pub(in crate::results) fn sync(&self) -> io::Result<()> {
            rustix::fs::fsync(self.fd.as_fd()).map_err(|e| ctx(&self.path, e))
        }

        /// Locks this directory exclusively for the caller, waiting within `budget`: a
        /// `flock` on this handle's own open file description (the library's
        /// `lock_descriptor`), held until the handle is dropped.
        pub(in crate::results) fn lock(&self, budget: &leasehold::Budget) -> leasehold::Result<()> {
            leasehold::LeaseOptions::new().lock_descriptor(
                self.fd.as_fd(),
                leasehold::LockMode::Exclusive,
                budget,
            )
        }
    }
}

#[cfg(windows)]
mod windows {
    //! Windows: the same API over paths, checking each component without following
    //! (`symlink_metadata`) before it is used. Handles cannot be kept across the calls std
    //! offers here, so a component swapped between the check and the use is not excluded.
    use std::fs::File;
    use std::io::{self, Write};
    use std::path::{Path, PathBuf};

    use super::{Kind, Removal, refused};

    #[derive(Debug)]
    pub(in crate::results) struct Tree {
        path: PathBuf,
    }

    fn kind_at(path: &Path) -> io::Result<Option<Kind>> {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => Ok(Some(Kind::Other("a symbolic link"))),
            Ok(m) if m.is_dir() => Ok(Some(Kind::Dir)),
            Ok(m) if m.is_file() => Ok(Some(Kind::File)),
            Ok(_) => Ok(Some(Kind::Other("not a regular file or directory"))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    impl Tree {
        pub(in crate::results) fn open(
            path: &Path,
            create: Option<u32>,
        ) -> io::Result<Option<Tree>> {
            if create.is_some() {
                std::fs::create_dir_all(path)?;
            }
            match std::fs::metadata(path) {
                Ok(m) if m.is_dir() => Ok(Some(Tree {
                    path: path.to_path_buf(),
                })),
                Ok(_) => Err(refused(path, "not a directory")),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            }
        }
        pub(in crate::results) fn path(&self) -> &Path {
            &self.path
        }
        pub(in crate::results) fn join(&self, name: &str) -> PathBuf {
            self.path.join(name)
        }
        pub(in crate::results) fn kind(&self, name: &str) -> io::Result<Option<Kind>> {
            kind_at(&self.join(name))
        }
        pub(in crate::results) fn child(
            &self,
            name: &str,
            create: Option<u32>,
        ) -> io::Result<Option<Tree>> {
            let path = self.join(name);
            if create.is_some() && kind_at(&path)?.is_none() {
                std::fs::create_dir(&path)?;
            }
            match kind_at(&path)? {
                Some(Kind::Dir) => Ok(Some(Tree { path })),
                None => Ok(None),
                Some(Kind::Other(what)) => Err(refused(&path, what)),
                Some(Kind::File) => Err(refused(&path, "not a directory")),
            }
        }
        pub(in crate::results) fn descend(
            &self,
            rel: &str,
            create: Option<u32>,
        ) -> io::Result<Option<Tree>> {
            let mut here = Tree {
                path: self.path.clone(),
            };
            for part in rel.split('/').filter(|p| !p.is_empty()) {
                match here.child(part, create)? {
                    Some(t) => here = t,
                    None => return Ok(None),
                }
            }
            Ok(Some(here))
        }
        pub(in crate::results) fn open_file(&self, name: &str) -> io::Result<Option<(File, u32)>> {
            let path = self.join(name);
            match kind_at(&path)? {
                None => Ok(None),
                Some(Kind::File) => Ok(Some((File::open(&path)?, 0o644))),
                Some(Kind::Dir) => Err(refused(&path, "a directory")),
                Some(Kind::Other(what)) => Err(refused(&path, what)),
            }
        }
        pub(in crate::results) fn write_with(
            &self,
            name: &str,
            _mode: u32,
            fill: &mut dyn FnMut(&mut File) -> io::Result<()>,
        ) -> io::Result<()> {
            if let Some(Kind::Other(what)) = self.kind(name)? {
                return Err(refused(&self.join(name), what));
            }
            let tmp = self.join(&leasehold::patterns::durable::temporary_name(name));
            {
                let mut f = File::options().write(true).create_new(true).open(&tmp)?;
                let r = fill(&mut f);
                drop(f);
                if let Err(e) = r {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(e);
                }
            }
            let r = std::fs::rename(&tmp, self.join(name));
            if r.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            r
        }
        pub(in crate::results) fn write(
            &self,
            name: &str,
            mode: u32,
            bytes: &[u8],
        ) -> io::Result<()> {
            self.write_with(name, mode, &mut |f| f.write_all(bytes))
        }
        pub(in crate::results) fn names(&self) -> io::Result<Vec<String>> {
            self.list(true)
        }
        pub(in crate::results) fn utf8_names(&self) -> io::Result<Vec<String>> {
            self.list(false)
        }
        fn list(&self, strict: bool) -> io::Result<Vec<String>> {
            let mut names = Vec::new();
            for e in std::fs::read_dir(&self.path)? {
                let name = e?.file_name();
                match name.into_string() {
                    Ok(n) => names.push(n),
                    Err(_) if !strict => {}
                    Err(n) => {
                        return Err(refused(
                            &self.path.join(n),
                            "a name that is not valid UTF-8",
                        ));
                    }
                }
            }
            names.sort();
            Ok(names)
        }
        pub(in crate::results) fn rename(
            &self,
            from: &str,
            dir: &Tree,
            to: &str,
        ) -> io::Result<bool> {
            match std::fs::rename(self.join(from), dir.join(to)) {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(e),
            }
        }
        pub(in crate::results) fn remove_file(&self, name: &str) -> io::Result<bool> {
            match std::fs::remove_file(self.join(name)) {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(e),
            }
        }
        pub(in crate::results) fn remove_tree(&self, name: &str) -> io::Result<bool> {
            match self.kind(name)? {
                None => Ok(false),
                Some(Kind::Dir) => std::fs::remove_dir_all(self.join(name)).map(|()| true),
                Some(Kind::Other(what)) => Err(refused(&self.join(name), what)),
                Some(Kind::File) => Err(refused(&self.join(name), "not a directory")),
            }
        }
        /// `stop` is asked once, before the removal (std removes a tree in one call here).
        pub(in crate::results) fn remove_tree_until(
            &self,
            name: &str,
            stop: &dyn Fn() -> bool,
        ) -> io::Result<Removal> {
            if stop() {
                return Ok(Removal::Stopped);
            }
            Ok(match self.remove_tree(name)? {
                true => Removal::Removed,
                false => Removal::Missing,
            })
        }
        pub(in crate::results) fn sync(&self) -> io::Result<()> {
            Ok(())
        }
        /// Windows: no handle to lock (the store's per-ID lease is the only exclusion).
        pub(in crate::results) fn lock(
            &self,
            _budget: &leasehold::Budget,
        ) -> leasehold::Result<()> {
            Ok(())
        }
    }
}
