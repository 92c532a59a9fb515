//! Options for taking a lease: the same on every platform; what they mean there is said in
//! each method's documentation.

/// Options for taking a lease. `LeaseOptions::default()` accepts a missing lock file
/// (creating it, mode 0600, on POSIX), creates missing parent directories, refuses network
/// and FUSE file systems, refuses an existing lock file that another user owns or may
/// write, and refuses to lease at all where the platform has no lock other processes
/// honour (WebAssembly/WASI: see [`single_process`](Self::single_process)).
#[derive(Debug, Clone, Copy)]
pub struct LeaseOptions {
    pub(crate) create: bool,
    pub(crate) create_parents: bool,
    pub(crate) allow_network_fs: bool,
    pub(crate) allow_shared_state: bool,
    pub(crate) single_process: bool,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        LeaseOptions {
            create: true,
            create_parents: true,
            allow_network_fs: false,
            allow_shared_state: false,
            single_process: false,
        }
    }
}

impl LeaseOptions {
    /// The defaults: accept a missing lock file, create missing parents, refuse network file
    /// systems.
    pub fn new() -> LeaseOptions {
        LeaseOptions::default()
    }

    /// With `false`, a missing lock file is [`Error::NotFound`](crate::Error::NotFound) — used where only a known key
    /// may allocate a lock file. With `true` (the default) a missing file is created with mode
    /// 0600 on POSIX; on Windows it is never created, because there the lease is a named
    /// kernel object, not the file.
    pub fn create(mut self, create: bool) -> LeaseOptions {
        self.create = create;
        self
    }

    /// Whether missing parent directories of a path are created (mode 0700 on POSIX). On
    /// Windows the parent must exist before locking: its real path is part of the lock's name.
    pub fn create_parents(mut self, create: bool) -> LeaseOptions {
        self.create_parents = create;
        self
    }

    /// Allows lock files on network and FUSE file systems (NFS, SMB/CIFS, AFS, Coda, FUSE:
    /// sshfs, bindfs, ...; UNC paths and mapped drives on Windows). Off by default: `flock`
    /// there may block forever even with `LOCK_NB`, or fail to exclude other clients (a
    /// bindfs mount and its backing path do not exclude each other), and a Windows kernel
    /// object excludes only processes on this machine. Opting in is your statement that your
    /// mount's locking is sound. The CLI opts in with `LEASEHOLD_ALLOW_NETWORK_FS=1`.
    pub fn allow_network_filesystem(mut self, allow: bool) -> LeaseOptions {
        self.allow_network_fs = allow;
        self
    }

    /// Accepts an existing lock file that belongs to another user (neither this process's
    /// effective user nor root) or that its group or others may write. Off by default, as
    /// OpenSSH's StrictModes: the owner of a lock file can unlink it while you hold it, after
    /// which a second process locks a new file and both believe they hold the lease; anyone
    /// who may write it can do the same. Turn it on only where several users share the lock
    /// on purpose (a group-writable lock file in a shared directory). POSIX only; the CLI
    /// opts in with `LEASEHOLD_ALLOW_SHARED=1`.
    pub fn allow_shared_state(mut self, allow: bool) -> LeaseOptions {
        self.allow_shared_state = allow;
        self
    }

    /// Declares that this program is the only one that will ever take leases in the
    /// directories it uses, so that a lease may be a claim in this process's claim table
    /// alone where the platform has no inter-process lock.
    ///
    /// Only WASI (`wasm32-wasip1`) needs it: WASI has no file locking at all, and a WASI host can preopen one directory into
    /// several instances (or share it with native processes), which would all "hold" the
    /// same lease if leasehold granted one silently — failing open, the one thing a lock must
    /// not do. Without the opt-in, acquiring there is [`Error::Unsupported`](crate::Error::Unsupported). With it,
    /// a lease excludes the other leases of this instance (exclusive and shared modes, FIFO
    /// waiters, budgets and cancellation as everywhere), and nothing else: the invariant you
    /// state is that no other instance or process uses the same directory.
    ///
    /// On Linux, macOS, the BSDs and Windows the option changes nothing: the kernel lock is
    /// always taken, so a second process is still excluded with it set (tested). It exists
    /// everywhere so that portable code can set it once.
    pub fn single_process(mut self, only: bool) -> LeaseOptions {
        self.single_process = only;
        self
    }

    /// Whether network and FUSE file systems are allowed (see
    /// [`allow_network_filesystem`](Self::allow_network_filesystem)).
    pub fn allows_network_filesystem(&self) -> bool {
        self.allow_network_fs
    }

    /// Whether state other users own or may write is accepted (see
    /// [`allow_shared_state`](Self::allow_shared_state)); stores built on the lease apply the
    /// same rule to the directories and documents they keep beside it.
    pub fn allows_shared_state(&self) -> bool {
        self.allow_shared_state
    }
}
