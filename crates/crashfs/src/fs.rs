//! The FUSE file system over the [`Model`], and [`Mounted`], a mount that is always
//! unmounted (on drop too, so a failing test never leaves a hung mount behind).
//!
//! Every request is answered from the model's live state; `fsync`/`fsyncdir` make the
//! inode's pending operations durable and write them through to the backing directory.
//! Locks are not implemented here on purpose: the kernel then emulates `flock` (and POSIX
//! locks) locally for the mount, which is exactly what leasehold's leases need between
//! processes of one machine.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};

use crate::backing::Backing;
use crate::model::{Content, CutPolicy, CutReport, Faults, FsError, Ino, Model, NewKind, Rng};

/// How long the kernel may cache names and attributes. Within one mount the kernel sees
/// every change (they all pass through it); a cut is always followed by a remount.
const TTL: Duration = Duration::from_secs(1);

/// Counters of one mount.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// File fsync/fdatasync requests.
    pub file_syncs: u64,
    /// Directory fsync requests.
    pub dir_syncs: u64,
    /// Write requests.
    pub writes: u64,
}

struct State {
    model: Model,
    backing: Backing,
    mtimes: BTreeMap<Ino, SystemTime>,
    stats: Stats,
    /// The first error writing the backing directory (the mount then refuses syncs).
    backing_error: Option<String>,
}

/// The shared state of a mounted crashfs: the handle a test or the control socket uses to
/// cut the power.
#[derive(Clone)]
pub struct Handle(Arc<Mutex<State>>);

impl Handle {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic in one request must not wedge every later one: the state stays usable.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Cuts the power: drops the volatile layer per `policy` (seeded by `seed`), rewrites
    /// the backing directory to the durable state, and fails every later request with EIO
    /// until the file system is remounted.
    pub fn cut(&self, policy: CutPolicy, seed: u64) -> io::Result<CutReport> {
        let mut state = self.lock();
        let state = &mut *state;
        let report = state.model.cut(policy, &mut Rng::new(seed));
        state.backing.after_cut(&state.model, &report.changed)?;
        Ok(report)
    }

    /// This mount's counters.
    pub fn stats(&self) -> Stats {
        self.lock().stats
    }

    /// How many operations are pending (would be at stake in a cut now).
    pub fn pending_ops(&self) -> usize {
        self.lock().model.pending_ops()
    }
}

/// The FUSE file system.
pub struct CrashFs {
    handle: Handle,
    uid: u32,
    gid: u32,
}

impl CrashFs {
    /// A file system whose durable state is the backing directory `backing`.
    pub fn new(backing: &Path, faults: Faults) -> io::Result<CrashFs> {
        let (backing, nodes) = Backing::load(backing)?;
        let model = Model::new(nodes, faults);
        Ok(CrashFs {
            handle: Handle(Arc::new(Mutex::new(State {
                model,
                backing,
                mtimes: BTreeMap::new(),
                stats: Stats::default(),
                backing_error: None,
            }))),
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        })
    }

    /// The handle to cut the power with.
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }

    fn attr(&self, state: &State, ino: Ino) -> Option<FileAttr> {
        let node = state.model.live(ino)?;
        let (kind, size) = match &node.content {
            Content::File(b) => (FileType::RegularFile, b.len() as u64),
            Content::Dir(e) => (FileType::Directory, e.len() as u64),
            Content::Symlink(t) => (FileType::Symlink, t.len() as u64),
        };
        let time = state
            .mtimes
            .get(&ino)
            .copied()
            .unwrap_or(SystemTime::UNIX_EPOCH);
        Some(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: time,
            mtime: time,
            ctime: time,
            crtime: time,
            kind,
            perm: u16::try_from(node.mode & 0o7777).unwrap_or(0o700),
            nlink: state.model.nlink(ino),
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    fn entry(&self, state: &State, ino: Ino, reply: ReplyEntry) {
        match self.attr(state, ino) {
            Some(attr) => reply.entry(&TTL, &attr, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn touch(state: &mut State, ino: Ino) {
        state.mtimes.insert(ino, SystemTime::now());
    }

    fn new_node(
        &self,
        parent: INodeNo,
        name: &OsStr,
        kind: NewKind,
        mode: u32,
    ) -> Result<(Ino, FileAttr), FsError> {
        let mut state = self.handle.lock();
        let ino = state.model.create(parent.0, name, kind, mode)?;
        Self::touch(&mut state, ino);
        Self::touch(&mut state, parent.0);
        let attr = self.attr(&state, ino).ok_or(FsError::NotFound)?;
        Ok((ino, attr))
    }

    fn sync(&self, ino: INodeNo, dir: bool, reply: ReplyEmpty) {
        let mut state = self.handle.lock();
        let state = &mut *state;
        if dir {
            state.stats.dir_syncs += 1;
        } else {
            state.stats.file_syncs += 1;
        }
        if let Some(e) = &state.backing_error {
            eprintln!("crashfs: refusing fsync: the backing directory failed earlier: {e}");
            return reply.error(Errno::EIO);
        }
        match state.model.fsync(ino.0) {
            Ok(ops) if ops.is_empty() => reply.ok(),
            Ok(ops) => match state.backing.synced(&state.model, ino.0, &ops) {
                Ok(()) => reply.ok(),
                Err(e) => {
                    eprintln!(
                        "crashfs: writing the backing directory {}: {e}",
                        state.backing.root().display()
                    );
                    state.backing_error = Some(e.to_string());
                    reply.error(Errno::EIO)
                }
            },
            Err(e) => reply.error(errno(e)),
        }
    }
}

/// The errno for a model error.
fn errno(e: FsError) -> Errno {
    match e {
        FsError::NotFound => Errno::ENOENT,
        FsError::Exists => Errno::EEXIST,
        FsError::NotDir => Errno::ENOTDIR,
        FsError::IsDir => Errno::EISDIR,
        FsError::NotEmpty => Errno::ENOTEMPTY,
        FsError::Invalid => Errno::EINVAL,
        FsError::PoweredOff => Errno::EIO,
    }
}

fn os_error(e: FsError) -> Errno {
    errno(e)
}

impl Filesystem for CrashFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let state = self.handle.lock();
        match state.model.lookup(parent.0, name) {
            Ok(ino) => self.entry(&state, ino, reply),
            Err(e) => reply.error(os_error(e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let state = self.handle.lock();
        if state.model.powered_off() {
            return reply.error(Errno::EIO);
        }
        match self.attr(&state, ino.0) {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut state = self.handle.lock();
        let result = (|| {
            if let Some(mode) = mode {
                state.model.chmod(ino.0, mode)?;
            }
            if let Some(size) = size {
                state.model.truncate(ino.0, size)?;
                Self::touch(&mut state, ino.0);
            }
            match mtime {
                Some(TimeOrNow::SpecificTime(t)) => {
                    state.mtimes.insert(ino.0, t);
                }
                Some(TimeOrNow::Now) => Self::touch(&mut state, ino.0),
                None => {}
            }
            Ok(())
        })();
        match result {
            Ok(()) => match self.attr(&state, ino.0) {
                Some(attr) => reply.attr(&TTL, &attr),
                None => reply.error(Errno::ENOENT),
            },
            Err(e) => reply.error(os_error(e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let state = self.handle.lock();
        match state.model.live(ino.0).map(|n| &n.content) {
            Some(Content::Symlink(t)) => reply.data(t.as_encoded_bytes()),
            Some(_) => reply.error(Errno::EINVAL),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        // Only regular files: FIFOs, sockets and devices are not part of the model.
        if mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(Errno::EPERM);
        }
        match self.new_node(parent, name, NewKind::File, mode & !umask) {
            Ok((_, attr)) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(os_error(e)),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        match self.new_node(parent, name, NewKind::Dir, mode & !umask) {
            Ok((_, attr)) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(os_error(e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut state = self.handle.lock();
        match state.model.unlink(parent.0, name) {
            Ok(()) => {
                Self::touch(&mut state, parent.0);
                reply.ok()
            }
            Err(e) => reply.error(os_error(e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut state = self.handle.lock();
        match state.model.rmdir(parent.0, name) {
            Ok(()) => {
                Self::touch(&mut state, parent.0);
                reply.ok()
            }
            Err(e) => reply.error(os_error(e)),
        }
    }

    fn symlink(
        &self,
        _req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let kind = NewKind::Symlink(target.as_os_str().to_os_string());
        match self.new_node(parent, link_name, kind, 0o777) {
            Ok((_, attr)) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(os_error(e)),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            return reply.error(Errno::EINVAL);
        }
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        let mut state = self.handle.lock();
        match state
            .model
            .rename(parent.0, name, newparent.0, newname, noreplace)
        {
            Ok(()) => {
                Self::touch(&mut state, parent.0);
                Self::touch(&mut state, newparent.0);
                reply.ok()
            }
            Err(e) => reply.error(os_error(e)),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let mut state = self.handle.lock();
        match state.model.link(ino.0, newparent.0, newname) {
            Ok(()) => self.entry(&state, ino.0, reply),
            Err(e) => reply.error(os_error(e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let state = self.handle.lock();
        match state.model.live(ino.0) {
            _ if state.model.powered_off() => reply.error(Errno::EIO),
            Some(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let state = self.handle.lock();
        match state.model.read(ino.0, offset, size as usize) {
            Ok(bytes) => reply.data(bytes),
            Err(e) => reply.error(os_error(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut state = self.handle.lock();
        state.stats.writes += 1;
        // O_APPEND: the end of the file as the file system knows it.
        let offset = if flags.0 & libc::O_APPEND != 0 {
            match state.model.live(ino.0).map(|n| &n.content) {
                Some(Content::File(b)) => b.len() as u64,
                _ => offset,
            }
        } else {
            offset
        };
        match state.model.write(ino.0, offset, data) {
            Ok(n) => {
                Self::touch(&mut state, ino.0);
                reply.written(u32::try_from(n).unwrap_or(u32::MAX))
            }
            Err(e) => reply.error(os_error(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2) makes nothing durable.
        reply.ok()
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.sync(ino, false, reply)
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let state = self.handle.lock();
        match state.model.live(ino.0) {
            _ if state.model.powered_off() => reply.error(Errno::EIO),
            Some(n) if n.is_dir() => reply.opened(FileHandle(0), FopenFlags::empty()),
            Some(_) => reply.error(Errno::ENOTDIR),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let state = self.handle.lock();
        let entries = match state.model.readdir(ino.0) {
            Ok(e) => e,
            Err(e) => return reply.error(os_error(e)),
        };
        let mut all = vec![
            (ino.0, FileType::Directory, OsStr::new(".").to_os_string()),
            (ino.0, FileType::Directory, OsStr::new("..").to_os_string()),
        ];
        for (name, child) in entries {
            let kind = match state.model.live(child).map(|n| &n.content) {
                Some(Content::Dir(_)) => FileType::Directory,
                Some(Content::Symlink(_)) => FileType::Symlink,
                _ => FileType::RegularFile,
            };
            all.push((child, kind, name));
        }
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, (child, kind, name)) in all.into_iter().enumerate().skip(skip) {
            if reply.add(INodeNo(child), (i + 1) as u64, kind, &name) {
                break;
            }
        }
        reply.ok()
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.sync(ino, true, reply)
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(1 << 20, 1 << 19, 1 << 19, 1 << 20, 1 << 19, 4096, 255, 4096);
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        let state = self.handle.lock();
        match state.model.live(ino.0) {
            Some(_) => reply.ok(),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.new_node(parent, name, NewKind::File, mode & !umask) {
            Ok((_, attr)) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(0),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(os_error(e)),
        }
    }
}

/// A mounted crashfs. Dropping it unmounts (lazily if the mount is still busy), so a test
/// that fails or panics never leaves a hung mount behind.
pub struct Mounted {
    session: Option<fuser::BackgroundSession>,
    handle: Handle,
    mountpoint: PathBuf,
}

impl Mounted {
    /// Mounts the backing directory `backing` at `mountpoint` (both must exist).
    pub fn mount(backing: &Path, mountpoint: &Path, faults: Faults) -> io::Result<Mounted> {
        let fs = CrashFs::new(backing, faults)?;
        let handle = fs.handle();
        let mut config = Config::default();
        config.mount_options.extend([
            MountOption::FSName("crashfs".to_string()),
            MountOption::Subtype("crashfs".to_string()),
            MountOption::DefaultPermissions,
            MountOption::RW,
        ]);
        let session = fuser::spawn_mount(fs, mountpoint, &config).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("crashfs: mounting {}: {e}", mountpoint.display()),
            )
        })?;
        Ok(Mounted {
            session: Some(session),
            handle,
            mountpoint: mountpoint.to_path_buf(),
        })
    }

    /// The handle to cut the power with.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Where it is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Serves until the file system is unmounted from outside (`fusermount3 -u`).
    pub fn wait(mut self) {
        if let Some(session) = self.session.take() {
            let _ = session.join();
        }
    }

    /// Unmounts and waits for the file system thread to end.
    pub fn unmount(mut self) -> io::Result<()> {
        self.unmount_inner()
    }

    fn unmount_inner(&mut self) -> io::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        if settle_and_unmount(&self.mountpoint) {
            // Unmounted: the file system thread ends as the kernel drops the connection.
            return session.join();
        }
        match session.umount_and_join() {
            Ok(()) => Ok(()),
            Err(e) => {
                // Still busy (a process that was not reaped?): detach it so nothing hangs.
                lazy_unmount(&self.mountpoint);
                Err(e)
            }
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Err(e) = self.unmount_inner() {
            eprintln!(
                "crashfs: unmounting {}: {e} (detached lazily)",
                self.mountpoint.display()
            );
        }
    }
}

/// How often, and how far apart, an unmount that finds the mount busy is tried again.
const UNMOUNT_TRIES: u32 = 100;
const UNMOUNT_PAUSE: Duration = Duration::from_millis(10);

/// Unmounts `mountpoint` (root only: `umount2`), trying again for up to a second while the
/// kernel says it is busy. A file closed just before the unmount can pin the mount for a
/// moment while FUSE's asynchronous RELEASE of it is in flight: CI once saw `EBUSY` from the
/// unmount right after a test's last `close` (`a_cut_keeps_exactly_what_was_synced_file_and_
/// directory`). Any other answer (not root: `EPERM`, fuser's `fusermount3` path does it; not
/// mounted) ends the attempt with `false`, and fuser's own unmount is left to do the rest.
fn settle_and_unmount(mountpoint: &Path) -> bool {
    for _ in 0..UNMOUNT_TRIES {
        match rustix::mount::unmount(mountpoint, rustix::mount::UnmountFlags::empty()) {
            Ok(()) => return true,
            Err(rustix::io::Errno::BUSY) => std::thread::sleep(UNMOUNT_PAUSE),
            Err(_) => return false,
        }
    }
    false
}

/// `fusermount3 -u -z MOUNTPOINT` (best effort).
pub fn lazy_unmount(mountpoint: &Path) {
    let _ = std::process::Command::new("fusermount3")
        .args(["-u", "-z"])
        .arg(mountpoint)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// Why crashfs cannot mount on this machine, if it cannot: no `/dev/fuse`, neither root nor
/// `fusermount3`, or a trial mount of an empty directory fails (a container without the
/// capability to mount, say).
pub fn unavailable() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse does not exist (no FUSE in this kernel or container)".into());
    }
    let root = rustix::process::geteuid().is_root();
    let fusermount = std::process::Command::new("fusermount3")
        .arg("-V")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok();
    if !root && !fusermount {
        return Some("not root and fusermount3 is not installed (apt-get install fuse3)".into());
    }
    // The definitive test: mount an empty directory and unmount it again.
    let probe = (|| -> io::Result<()> {
        let dir = tempfile::Builder::new().prefix("crashfs-probe").tempdir()?;
        let backing = dir.path().join("b");
        let mnt = dir.path().join("m");
        std::fs::create_dir(&backing)?;
        std::fs::create_dir(&mnt)?;
        let mounted = Mounted::mount(&backing, &mnt, Faults::default())?;
        std::fs::read_dir(&mnt)?;
        mounted.unmount()
    })();
    match probe {
        Ok(()) => None,
        Err(e) => Some(format!("a trial mount failed: {e}")),
    }
}
