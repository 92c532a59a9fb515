//! Options for taking a lease: the same on every platform; what they mean there is said in
//! each method's documentation.

/// Options for taking a lease. `LeaseOptions::default()` accepts a missing lock file
/// (creating it, mode 0600, on POSIX), creates missing parent directories and refuses network
/// file systems.
#[derive(Debug, Clone, Copy)]
pub struct LeaseOptions {
    pub(crate) create: bool,
    pub(crate) create_parents: bool,
    pub(crate) allow_network_fs: bool,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        LeaseOptions {
            create: true,
            create_parents: true,
            allow_network_fs: false,
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

    /// Allows lock files on network file systems (NFS, SMB/CIFS, AFS; UNC paths and mapped
    /// drives on Windows). Off by default: `flock` there may block forever even with
    /// `LOCK_NB`, or fail to exclude other clients, and a Windows kernel object excludes only
    /// processes on this machine. Opting in is your statement that your mount's locking is
    /// sound.
    pub fn allow_network_filesystem(mut self, allow: bool) -> LeaseOptions {
        self.allow_network_fs = allow;
        self
    }
}
