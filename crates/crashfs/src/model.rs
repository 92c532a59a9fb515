//! The volatile-layer model: what a file system shows (the *live* state) and what would
//! survive a power cut (the *durable* state), kept apart by exactly the rules a program may
//! rely on under POSIX and nothing more.
//!
//! # What becomes durable, and when
//!
//! * Every inode has a log of **pending** operations: those applied to the live state but not
//!   yet made durable. For a file: `write`, `truncate` and `chmod`; for a directory: entry
//!   insertions, removals and same-directory renames (and `chmod`).
//! * `fsync`/`fdatasync` of a **file** makes its data, size and mode durable — and nothing
//!   else. In particular it does **not** make the file's own directory entry durable (ext4
//!   and XFS make no such promise; being conservative here is what lets the model catch a
//!   missing directory fsync). `fdatasync` is modelled as `fsync` (leasehold never relies on
//!   a mode change surviving).
//! * `fsync` of a **directory** makes its entries durable: names created, removed or
//!   renamed in it. A rename between two directories is two operations, a removal in the
//!   source and an insertion in the destination, each made durable by its own directory's
//!   fsync (so after a cut the file may be under both names or under neither — again the
//!   conservative reading).
//! * An inode is born durable but *unreachable*: an empty file (or empty directory) whose
//!   name is durable only once its directory is synced. A name made durable before the
//!   file's data shows up as an empty (or stale) file after a cut — exactly the bug that
//!   skipping the temporary file's fsync produces.
//!
//! # A cut
//!
//! [`Model::cut`] discards the volatile layer: for every inode, a prefix of its pending
//! operations is replayed onto its durable state — none ([`CutPolicy::DropAll`]), all
//! ([`CutPolicy::KeepAll`]) or a random number of them, in order ([`CutPolicy::RandomPrefix`],
//! what a disk that wrote back some of the dirty pages before losing power leaves). With
//! `torn`, the first operation *not* kept, if it is a write, may be kept in part: a prefix of
//! its bytes, or its full length with the tail zero-filled (the file's size reached the disk
//! before its data, as with ext4 `data=writeback`). Prefixes are chosen per inode
//! independently: nothing orders writes to two different files that neither was synced for.
//! After the cut the live state equals the new durable state and inodes no longer reachable
//! from the root are gone.
//!
//! # What it does not model
//!
//! Reordering *within* one inode's pending operations (a disk may write a later page of a
//! file before an earlier one; the model keeps a prefix), devices whose write cache lies
//! about a flush, corruption of data that *was* synced, timestamps, extended attributes, and
//! `sync(2)`/`syncfs(2)` (not passed to a FUSE file system).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};

/// An inode number. The root directory is [`ROOT`].
pub type Ino = u64;

/// The root directory's inode number (FUSE's `FUSE_ROOT_ID`).
pub const ROOT: Ino = 1;

/// What an inode holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// A regular file's bytes.
    File(Vec<u8>),
    /// A directory's entries (name → inode), without `.` and `..`.
    Dir(BTreeMap<OsString, Ino>),
    /// A symbolic link's target (immutable, durable with the inode).
    Symlink(OsString),
}

/// One inode: content and permission bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The content.
    pub content: Content,
    /// Permission bits (`0o7777` at most).
    pub mode: u32,
}

impl Node {
    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        matches!(self.content, Content::Dir(_))
    }

    fn entries(&self) -> Option<&BTreeMap<OsString, Ino>> {
        match &self.content {
            Content::Dir(e) => Some(e),
            _ => None,
        }
    }
}

/// What a new inode is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NewKind {
    /// An empty regular file.
    File,
    /// An empty directory.
    Dir,
    /// A symbolic link to the target.
    Symlink(OsString),
}

/// Why an operation was refused (each maps to one errno in the FUSE layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FsError {
    /// `ENOENT`.
    #[error("no such file or directory")]
    NotFound,
    /// `EEXIST`.
    #[error("file exists")]
    Exists,
    /// `ENOTDIR`.
    #[error("not a directory")]
    NotDir,
    /// `EISDIR`.
    #[error("is a directory")]
    IsDir,
    /// `ENOTEMPTY`.
    #[error("directory not empty")]
    NotEmpty,
    /// `EINVAL`.
    #[error("invalid argument")]
    Invalid,
    /// `EIO`: the power is off (after a cut, until the file system is remounted).
    #[error("input/output error: the power was cut")]
    PoweredOff,
}

/// A pending (not yet durable) operation on one inode, as [`Model::fsync`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Bytes written at an offset of a file.
    Write {
        /// Where.
        offset: u64,
        /// What.
        data: Vec<u8>,
    },
    /// A file's new size.
    Truncate(u64),
    /// New permission bits.
    Mode(u32),
    /// Insert (or replace) a directory entry.
    Link {
        /// The entry's name.
        name: OsString,
        /// The inode it names.
        ino: Ino,
    },
    /// Remove a directory entry.
    Unlink {
        /// The entry's name.
        name: OsString,
    },
    /// Rename within one directory (one atomic operation).
    Rename {
        /// The old name.
        from: OsString,
        /// The new name.
        to: OsString,
    },
}

impl Op {
    fn apply(&self, node: &mut Node) {
        match (self, &mut node.content) {
            (Op::Write { offset, data }, Content::File(bytes)) => write_at(bytes, *offset, data),
            (Op::Truncate(len), Content::File(bytes)) => {
                bytes.resize(usize::try_from(*len).unwrap_or(usize::MAX), 0)
            }
            (Op::Mode(mode), _) => node.mode = *mode,
            (Op::Link { name, ino }, Content::Dir(entries)) => {
                entries.insert(name.clone(), *ino);
            }
            (Op::Unlink { name }, Content::Dir(entries)) => {
                entries.remove(name);
            }
            (Op::Rename { from, to }, Content::Dir(entries)) => {
                if let Some(ino) = entries.remove(from) {
                    entries.insert(to.clone(), ino);
                }
            }
            // An operation is only ever logged against an inode of the right kind.
            _ => {}
        }
    }
}

fn write_at(bytes: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    let end = start.saturating_add(data.len());
    if bytes.len() < end {
        bytes.resize(end, 0);
    }
    if let Some(dst) = bytes.get_mut(start..end) {
        dst.copy_from_slice(data);
    }
}

/// How much of the volatile layer a cut keeps (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutPolicy {
    /// Keep nothing that was not synced.
    DropAll,
    /// Keep everything (as if the page cache had been written back just in time).
    KeepAll,
    /// Keep a random prefix of each inode's pending operations; with `torn`, the first
    /// operation not kept may be a partly written write.
    RandomPrefix {
        /// Whether a write may be kept in part.
        torn: bool,
    },
}

/// Fault modes that make the model lie about a sync: used to prove that the torture finds
/// what a missing fsync in the code under test would do (the sync is acknowledged and
/// changes nothing, exactly as if the code had not made it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Faults {
    /// `fsync`/`fdatasync` of a regular file is a no-op.
    pub ignore_file_fsync: bool,
    /// `fsync` of a directory is a no-op.
    pub ignore_dir_fsync: bool,
}

/// What a cut did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CutReport {
    /// Inodes whose durable state the cut changed (some pending operation kept).
    pub changed: Vec<Ino>,
    /// Pending operations replayed onto the durable state.
    pub kept: u64,
    /// Pending operations discarded.
    pub dropped: u64,
    /// Writes kept in part.
    pub torn: u64,
}

/// A small deterministic PRNG (SplitMix64): cuts are reproducible from a seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..=max`.
    pub fn upto(&mut self, max: u64) -> u64 {
        if max == u64::MAX {
            self.next_u64()
        } else {
            self.next_u64() % (max + 1)
        }
    }
}

/// The live and the durable state of a file system, and the pending operations between them.
///
/// Invariant: for every inode, replaying its pending operations onto its durable node gives
/// its live node. A sync makes them equal; a cut replays a prefix and drops the rest.
#[derive(Debug, Clone)]
pub struct Model {
    live: BTreeMap<Ino, Node>,
    durable: BTreeMap<Ino, Node>,
    pending: BTreeMap<Ino, Vec<Op>>,
    /// Live hard-link counts (directory entries naming each inode).
    links: BTreeMap<Ino, u32>,
    next: Ino,
    faults: Faults,
    powered_off: bool,
}

impl Model {
    /// A file system whose durable (and live) state is `nodes`, rooted at [`ROOT`], which
    /// must be a directory.
    pub fn new(mut nodes: BTreeMap<Ino, Node>, faults: Faults) -> Model {
        let root_ok = nodes.get(&ROOT).is_some_and(Node::is_dir);
        if !root_ok {
            nodes.insert(
                ROOT,
                Node {
                    content: Content::Dir(BTreeMap::new()),
                    mode: 0o755,
                },
            );
        }
        let next = nodes.keys().next_back().copied().unwrap_or(ROOT) + 1;
        let mut model = Model {
            live: nodes.clone(),
            durable: nodes,
            pending: BTreeMap::new(),
            links: BTreeMap::new(),
            next,
            faults,
            powered_off: false,
        };
        model.collect();
        model
    }

    /// An empty file system (only the root directory).
    pub fn empty(faults: Faults) -> Model {
        Model::new(BTreeMap::new(), faults)
    }

    /// The fault modes in force.
    pub fn faults(&self) -> Faults {
        self.faults
    }

    /// Whether the power was cut (every operation then fails until a new model is mounted).
    pub fn powered_off(&self) -> bool {
        self.powered_off
    }

    /// Inode `ino` as processes see it now.
    pub fn live(&self, ino: Ino) -> Option<&Node> {
        self.live.get(&ino)
    }

    /// Inode `ino` as it would be after a cut that keeps nothing pending.
    pub fn durable(&self, ino: Ino) -> Option<&Node> {
        self.durable.get(&ino)
    }

    /// The live hard-link count of `ino` (directories: 2 + subdirectories).
    pub fn nlink(&self, ino: Ino) -> u32 {
        match self.live.get(&ino).and_then(Node::entries) {
            Some(entries) => {
                let subdirs = entries
                    .values()
                    .filter(|i| self.live.get(i).is_some_and(Node::is_dir))
                    .count();
                2 + u32::try_from(subdirs).unwrap_or(u32::MAX - 2)
            }
            None => self.links.get(&ino).copied().unwrap_or(0),
        }
    }

    /// How many operations are pending (not durable) in total.
    pub fn pending_ops(&self) -> usize {
        self.pending.values().map(Vec::len).sum()
    }

    fn on(&self) -> Result<(), FsError> {
        if self.powered_off {
            Err(FsError::PoweredOff)
        } else {
            Ok(())
        }
    }

    fn dir(&self, ino: Ino) -> Result<&BTreeMap<OsString, Ino>, FsError> {
        match self.live.get(&ino) {
            None => Err(FsError::NotFound),
            Some(node) => node.entries().ok_or(FsError::NotDir),
        }
    }

    fn log(&mut self, ino: Ino, op: Op) {
        if let Some(node) = self.live.get_mut(&ino) {
            op.apply(node);
            self.pending.entry(ino).or_default().push(op);
        }
    }

    /// Looks `name` up in directory `parent`.
    pub fn lookup(&self, parent: Ino, name: &OsStr) -> Result<Ino, FsError> {
        self.on()?;
        self.dir(parent)?
            .get(name)
            .copied()
            .ok_or(FsError::NotFound)
    }

    /// The entries of directory `ino`, in name order.
    pub fn readdir(&self, ino: Ino) -> Result<Vec<(OsString, Ino)>, FsError> {
        self.on()?;
        Ok(self
            .dir(ino)?
            .iter()
            .map(|(n, i)| (n.clone(), *i))
            .collect())
    }

    /// Creates `name` in `parent` (refused if it exists).
    pub fn create(
        &mut self,
        parent: Ino,
        name: &OsStr,
        kind: NewKind,
        mode: u32,
    ) -> Result<Ino, FsError> {
        self.on()?;
        check_name(name)?;
        if self.dir(parent)?.contains_key(name) {
            return Err(FsError::Exists);
        }
        let ino = self.next;
        self.next += 1;
        let content = match kind {
            NewKind::File => Content::File(Vec::new()),
            NewKind::Dir => Content::Dir(BTreeMap::new()),
            NewKind::Symlink(target) => Content::Symlink(target),
        };
        let node = Node {
            content,
            mode: mode & 0o7777,
        };
        // Born durable but unreachable: only its directory's sync gives it a durable name.
        self.durable.insert(ino, node.clone());
        self.live.insert(ino, node);
        self.link_entry(parent, name, ino);
        Ok(ino)
    }

    fn link_entry(&mut self, parent: Ino, name: &OsStr, ino: Ino) {
        *self.links.entry(ino).or_default() += 1;
        self.log(
            parent,
            Op::Link {
                name: name.to_os_string(),
                ino,
            },
        );
    }

    fn drop_link(&mut self, ino: Ino) {
        if let Some(n) = self.links.get_mut(&ino) {
            *n = n.saturating_sub(1);
        }
    }

    /// Writes `data` at `offset` of file `ino`.
    pub fn write(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Result<usize, FsError> {
        self.on()?;
        match self.live.get(&ino).map(|n| &n.content) {
            None => return Err(FsError::NotFound),
            Some(Content::Dir(_)) => return Err(FsError::IsDir),
            Some(Content::Symlink(_)) => return Err(FsError::Invalid),
            Some(Content::File(_)) => {}
        }
        if !data.is_empty() {
            self.log(
                ino,
                Op::Write {
                    offset,
                    data: data.to_vec(),
                },
            );
        }
        Ok(data.len())
    }

    /// Reads up to `size` bytes at `offset` of file `ino`.
    pub fn read(&self, ino: Ino, offset: u64, size: usize) -> Result<&[u8], FsError> {
        self.on()?;
        match self.live.get(&ino).map(|n| &n.content) {
            None => Err(FsError::NotFound),
            Some(Content::Dir(_)) => Err(FsError::IsDir),
            Some(Content::Symlink(_)) => Err(FsError::Invalid),
            Some(Content::File(bytes)) => {
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                let end = start.saturating_add(size).min(bytes.len());
                Ok(bytes.get(start..end).unwrap_or_default())
            }
        }
    }

    /// Sets the size of file `ino`.
    pub fn truncate(&mut self, ino: Ino, len: u64) -> Result<(), FsError> {
        self.on()?;
        match self.live.get(&ino).map(|n| &n.content) {
            None => Err(FsError::NotFound),
            Some(Content::File(_)) => {
                self.log(ino, Op::Truncate(len));
                Ok(())
            }
            Some(Content::Dir(_)) => Err(FsError::IsDir),
            Some(Content::Symlink(_)) => Err(FsError::Invalid),
        }
    }

    /// Sets the permission bits of `ino`.
    pub fn chmod(&mut self, ino: Ino, mode: u32) -> Result<(), FsError> {
        self.on()?;
        if !self.live.contains_key(&ino) {
            return Err(FsError::NotFound);
        }
        self.log(ino, Op::Mode(mode & 0o7777));
        Ok(())
    }

    /// Removes the non-directory `name` from `parent`.
    pub fn unlink(&mut self, parent: Ino, name: &OsStr) -> Result<(), FsError> {
        let ino = self.lookup(parent, name)?;
        if self.live.get(&ino).is_some_and(Node::is_dir) {
            return Err(FsError::IsDir);
        }
        self.log(
            parent,
            Op::Unlink {
                name: name.to_os_string(),
            },
        );
        self.drop_link(ino);
        Ok(())
    }

    /// Removes the empty directory `name` from `parent`.
    pub fn rmdir(&mut self, parent: Ino, name: &OsStr) -> Result<(), FsError> {
        let ino = self.lookup(parent, name)?;
        if !self.dir(ino)?.is_empty() {
            return Err(FsError::NotEmpty);
        }
        self.log(
            parent,
            Op::Unlink {
                name: name.to_os_string(),
            },
        );
        Ok(())
    }

    /// Renames `parent/name` to `newparent/newname`, replacing a compatible target (unless
    /// `noreplace`), as `rename(2)`/`renameat2(RENAME_NOREPLACE)` do.
    pub fn rename(
        &mut self,
        parent: Ino,
        name: &OsStr,
        newparent: Ino,
        newname: &OsStr,
        noreplace: bool,
    ) -> Result<(), FsError> {
        let ino = self.lookup(parent, name)?;
        check_name(newname)?;
        let target = self.dir(newparent)?.get(newname).copied();
        let moving_dir = self.live.get(&ino).is_some_and(Node::is_dir);
        if moving_dir && self.contains(ino, newparent) {
            return Err(FsError::Invalid);
        }
        if let Some(t) = target {
            if t == ino {
                return Ok(());
            }
            if noreplace {
                return Err(FsError::Exists);
            }
            let target_dir = self.live.get(&t).is_some_and(Node::is_dir);
            match (moving_dir, target_dir) {
                (true, false) => return Err(FsError::NotDir),
                (false, true) => return Err(FsError::IsDir),
                (true, true) if !self.dir(t)?.is_empty() => return Err(FsError::NotEmpty),
                _ => {}
            }
            if !target_dir {
                self.drop_link(t);
            }
        }
        if parent == newparent {
            self.log(
                parent,
                Op::Rename {
                    from: name.to_os_string(),
                    to: newname.to_os_string(),
                },
            );
        } else {
            self.log(
                parent,
                Op::Unlink {
                    name: name.to_os_string(),
                },
            );
            self.log(
                newparent,
                Op::Link {
                    name: newname.to_os_string(),
                    ino,
                },
            );
        }
        Ok(())
    }

    /// Adds the name `newparent/newname` for the non-directory `ino`.
    pub fn link(&mut self, ino: Ino, newparent: Ino, newname: &OsStr) -> Result<(), FsError> {
        self.on()?;
        check_name(newname)?;
        match self.live.get(&ino) {
            None => return Err(FsError::NotFound),
            Some(n) if n.is_dir() => return Err(FsError::IsDir),
            Some(_) => {}
        }
        if self.dir(newparent)?.contains_key(newname) {
            return Err(FsError::Exists);
        }
        self.link_entry(newparent, newname, ino);
        Ok(())
    }

    /// Whether `needle` is `dir` or lies below it (live).
    fn contains(&self, dir: Ino, needle: Ino) -> bool {
        let mut stack = vec![dir];
        let mut seen = BTreeSet::new();
        while let Some(d) = stack.pop() {
            if d == needle {
                return true;
            }
            if !seen.insert(d) {
                continue;
            }
            if let Some(entries) = self.live.get(&d).and_then(Node::entries) {
                stack.extend(entries.values().copied());
            }
        }
        false
    }

    /// `fsync(2)`/`fdatasync(2)` of `ino`: its pending operations become durable (see the
    /// module docs for what that covers). Returns the operations that became durable, in
    /// order (empty when nothing changed durably, or the sync is ignored by a fault mode).
    pub fn fsync(&mut self, ino: Ino) -> Result<Vec<Op>, FsError> {
        self.on()?;
        let Some(node) = self.live.get(&ino) else {
            return Err(FsError::NotFound);
        };
        let ignored = if node.is_dir() {
            self.faults.ignore_dir_fsync
        } else {
            self.faults.ignore_file_fsync
        };
        if ignored {
            return Ok(Vec::new());
        }
        let ops = self.pending.remove(&ino).unwrap_or_default();
        // Replaying the log (rather than copying the live node) costs what was written
        // since the last sync, not the size of the file.
        if let Some(durable) = self.durable.get_mut(&ino) {
            for op in &ops {
                op.apply(durable);
            }
        }
        Ok(ops)
    }

    /// Cuts the power: replays a prefix of each inode's pending operations onto its durable
    /// state (chosen by `policy` and `rng`), discards the rest, makes the live state the
    /// durable one and forgets unreachable inodes. Afterwards every operation fails with
    /// [`FsError::PoweredOff`] until [`Model::power_on`] (or a new model from the durable
    /// state, which is what a remount is).
    pub fn cut(&mut self, policy: CutPolicy, rng: &mut Rng) -> CutReport {
        let mut report = CutReport::default();
        let pending = std::mem::take(&mut self.pending);
        for (ino, ops) in pending {
            let total = ops.len() as u64;
            let keep = match policy {
                CutPolicy::DropAll => 0,
                CutPolicy::KeepAll => total,
                CutPolicy::RandomPrefix { .. } => rng.upto(total),
            };
            let Some(node) = self.durable.get_mut(&ino) else {
                continue;
            };
            let keep_n = usize::try_from(keep).unwrap_or(usize::MAX);
            for op in ops.iter().take(keep_n) {
                op.apply(node);
            }
            report.kept += keep;
            report.dropped += total - keep;
            if keep > 0 {
                report.changed.push(ino);
            }
            if let (CutPolicy::RandomPrefix { torn: true }, Some(Op::Write { offset, data })) =
                (policy, ops.get(keep_n))
                && data.len() > 1
                && rng.upto(1) == 1
            {
                let part = usize::try_from(rng.upto(data.len() as u64 - 1)).unwrap_or(0);
                let torn: Vec<u8> = if rng.upto(1) == 0 {
                    data.get(..part).unwrap_or_default().to_vec()
                } else {
                    let mut bytes = data.clone();
                    for b in bytes.iter_mut().skip(part) {
                        *b = 0;
                    }
                    bytes
                };
                Op::Write {
                    offset: *offset,
                    data: torn,
                }
                .apply(node);
                report.torn += 1;
                if keep == 0 {
                    report.changed.push(ino);
                }
            }
        }
        self.live = self.durable.clone();
        self.collect();
        self.powered_off = true;
        report
    }

    /// Turns the power back on after a cut (the state is the durable one).
    pub fn power_on(&mut self) {
        self.powered_off = false;
    }

    /// Forgets inodes unreachable from the root (in both states) and recounts links.
    fn collect(&mut self) {
        let mut reachable = BTreeSet::new();
        let mut links: BTreeMap<Ino, u32> = BTreeMap::new();
        let mut stack = vec![ROOT];
        while let Some(d) = stack.pop() {
            if !reachable.insert(d) {
                continue;
            }
            if let Some(entries) = self.durable.get(&d).and_then(Node::entries) {
                for child in entries.values() {
                    *links.entry(*child).or_default() += 1;
                    stack.push(*child);
                }
            }
        }
        self.durable.retain(|ino, _| reachable.contains(ino));
        // A durable entry can name an inode whose creation was never made durable only if
        // the state was built inconsistently; drop such dangling names.
        let known: BTreeSet<Ino> = self.durable.keys().copied().collect();
        for node in self.durable.values_mut() {
            if let Content::Dir(entries) = &mut node.content {
                entries.retain(|_, i| known.contains(i));
            }
        }
        self.live = self.durable.clone();
        self.links = links;
    }

    /// The durable tree as paths (relative, `/`-separated, directories first) and nodes:
    /// what a cut that keeps nothing pending would leave, and what the backing directory
    /// holds. An inode reachable under several names appears under each.
    pub fn durable_paths(&self) -> Vec<(String, Ino)> {
        let mut out = Vec::new();
        let mut stack = vec![(String::new(), ROOT, 0usize)];
        while let Some((path, ino, depth)) = stack.pop() {
            out.push((path.clone(), ino));
            // Directory cycles cannot arise (rename refuses them), but bound the walk anyway.
            if depth > 4096 {
                continue;
            }
            if let Some(entries) = self.durable.get(&ino).and_then(Node::entries) {
                for (name, child) in entries.iter().rev() {
                    let child_path = if path.is_empty() {
                        name.to_string_lossy().into_owned()
                    } else {
                        format!("{path}/{}", name.to_string_lossy())
                    };
                    stack.push((child_path, *child, depth + 1));
                }
            }
        }
        out
    }

    /// The live tree as paths and nodes (see [`Model::durable_paths`]).
    pub fn live_paths(&self) -> Vec<(String, Ino)> {
        let view = Model {
            durable: self.live.clone(),
            ..Model::empty(Faults::default())
        };
        view.durable_paths()
    }
}

fn check_name(name: &OsStr) -> Result<(), FsError> {
    let bytes = name.as_encoded_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        Err(FsError::Invalid)
    } else {
        Ok(())
    }
}
