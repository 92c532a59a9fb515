//! How far the kernel's lock reaches on the mount a lock path lives on ([`MountLocks`]).
//!
//! A `flock` on a local file system excludes every process of the host. On a network file
//! system it excludes other hosts only where the client sends it to the server: Linux's NFS
//! client emulates `flock` with byte-range locks the server arbitrates (NFSv4's own, NFSv3's
//! through the lock manager, `lockd`), unless the mount says `local_lock=flock`,
//! `local_lock=all` or `nolock`, which keep it on the client; the SMB client sends it as a
//! byte-range lock unless the mount says `nobrl`. A FUSE file system's lock is whatever its
//! daemon implements; sshfs (SFTP has no locks), bindfs and most others keep it on this host.
//!
//! On Linux the mount's line in `/proc/self/mountinfo` (found by the mount ID `statx`
//! reports, else by the device) gives its type and the options the kernel shows — the NFS
//! client always prints `local_lock=`, and `nolock` when set; the SMB client prints `nobrl`
//! when set. Elsewhere `statfs`'s type name is all there is: a network or FUSE mount whose
//! options cannot be read is taken to lock on this host only (the side that never
//! overstates what the kernel's lock gives). On Windows a lease is a named kernel semaphore,
//! which is this host's whatever the file system: a network share is host-only.

use std::fmt;
use std::path::Path;

use crate::error::{Error, Result};

/// What the kernel's lock gives on the mount a lock path lives on, and why
/// ([`MountLocks::of`]). Which one it is decides whether a lock there excludes processes
/// on other hosts sharing the directory; [`reason`](Self::reason) says what it was told
/// from (the type, the options read).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MountLocks {
    /// A local file system: one host reaches it, and the kernel's lock excludes all of that
    /// host's processes.
    Local {
        /// The file-system type (`ext4`, `overlay`, `apfs`, ...).
        fs: String,
        /// Why it is judged so.
        reason: String,
    },
    /// A network file system whose server arbitrates the locks its clients send: a lock
    /// excludes processes on every host that locks through the server (NFSv4, NFSv3 with
    /// the lock manager, SMB without `nobrl`).
    CrossHost {
        /// The file-system type (`nfs4`, `nfs`, `cifs`, ...).
        fs: String,
        /// Why it is judged so (the options read).
        reason: String,
    },
    /// A network or FUSE file system whose locks stay on this host (NFS with
    /// `local_lock=all|flock` or `nolock`, SMB with `nobrl`, sshfs and most FUSE, or one
    /// whose options cannot be read): two hosts both get the kernel's lock.
    HostOnly {
        /// The file-system type (`nfs`, `fuse.sshfs`, ...).
        fs: String,
        /// Why it is judged so (the options read, or that none could be).
        reason: String,
    },
}

impl MountLocks {
    /// Classifies the mount `path` lives on; a path that does not exist (yet) is judged by
    /// its nearest existing ancestor, where it would be created. Reads, creates and takes
    /// nothing but the file system's description (Linux: `statfs`, `statx`,
    /// `/proc/self/mountinfo`).
    ///
    /// # Errors
    ///
    /// [`Error::Io`] naming `path` when even its nearest existing ancestor cannot be
    /// looked at (permission denied on the way).
    pub fn of(path: impl AsRef<Path>) -> Result<MountLocks> {
        let path = path.as_ref();
        let mut last = None;
        for dir in path.ancestors() {
            let dir = match dir.as_os_str().is_empty() {
                true => Path::new("."),
                false => dir,
            };
            match seen(dir) {
                Ok(locks) => return Ok(locks),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => last = Some(e),
                Err(e) => return Err(io_error(path, e)),
            }
        }
        Err(io_error(
            path,
            last.unwrap_or_else(|| std::io::ErrorKind::NotFound.into()),
        ))
    }

    /// `local`, `cross-host` or `host-only`: the class's name, as `leasehold status --json`
    /// prints it.
    pub fn name(&self) -> &'static str {
        match self {
            MountLocks::Local { .. } => "local",
            MountLocks::CrossHost { .. } => "cross-host",
            MountLocks::HostOnly { .. } => "host-only",
        }
    }

    /// The file-system type (mountinfo's on Linux: `nfs4`, `fuse.sshfs`; else `statfs`'s).
    pub fn fs(&self) -> &str {
        match self {
            MountLocks::Local { fs, .. }
            | MountLocks::CrossHost { fs, .. }
            | MountLocks::HostOnly { fs, .. } => fs,
        }
    }

    /// Why the mount is judged so.
    pub fn reason(&self) -> &str {
        match self {
            MountLocks::Local { reason, .. }
            | MountLocks::CrossHost { reason, .. }
            | MountLocks::HostOnly { reason, .. } => reason,
        }
    }

    /// Whether a kernel lock there excludes processes on other hosts sharing the directory:
    /// true for [`CrossHost`](Self::CrossHost) alone. (On a [`Local`](Self::Local) file
    /// system no other host shares it.)
    pub fn excludes_across_hosts(&self) -> bool {
        matches!(self, MountLocks::CrossHost { .. })
    }

    /// Classifies a Linux mount from its mountinfo type (`nfs4`, `fuse.sshfs`) and super
    /// options (as the kernel prints them, comma-separated).
    #[cfg_attr(not(unix), allow(dead_code))] // unit-tested everywhere, used on Unix
    pub(crate) fn from_mountinfo(fstype: &str, options: &[u8]) -> MountLocks {
        let opts: Vec<&[u8]> = options.split(|b| *b == b',').collect();
        let has = |o: &str| opts.contains(&o.as_bytes());
        let value = |key: &str| {
            opts.iter().find_map(|o| {
                o.strip_prefix(key.as_bytes())
                    .and_then(|rest| rest.strip_prefix(b"="))
                    .map(|v| String::from_utf8_lossy(v).into_owned())
            })
        };
        let fs = fstype.to_owned();
        let host_only = |reason: String| MountLocks::HostOnly {
            fs: fstype.to_owned(),
            reason,
        };
        let cross_host = |reason: String| MountLocks::CrossHost {
            fs: fstype.to_owned(),
            reason,
        };
        match fstype {
            "nfs" | "nfs4" => {
                let v4 = fstype == "nfs4" || value("vers").is_some_and(|v| v.starts_with('4'));
                let local_lock = value("local_lock");
                if has("nolock") {
                    host_only(format!(
                        "{fstype} mounted with nolock: no lock manager, so flock is kept on this client and another host gets the same lock"
                    ))
                } else if let Some(l) = local_lock.as_deref().filter(|l| *l == "all" || *l == "flock") {
                    host_only(format!(
                        "{fstype} mounted with local_lock={l}: flock is kept on this client and another host gets the same lock"
                    ))
                } else if local_lock.is_none() {
                    host_only(format!(
                        "{fstype} without a local_lock= option in its mount options (the Linux NFS client always shows one): cannot tell whether flock reaches the server"
                    ))
                } else if v4 {
                    cross_host(format!(
                        "{fstype} with local_lock={}: flock is sent to the server as an NFSv4 byte-range lock, which it arbitrates between hosts",
                        local_lock.unwrap_or_default()
                    ))
                } else {
                    cross_host(format!(
                        "{fstype} (NFSv{}) with local_lock={}: flock is sent through the lock manager (lockd), which the server arbitrates between hosts; it hangs where the server runs none",
                        value("vers").unwrap_or_else(|| "3".into()),
                        local_lock.unwrap_or_default()
                    ))
                }
            }
            "cifs" | "smb3" => match has("nobrl") {
                true => host_only(format!(
                    "{fstype} mounted with nobrl: byte-range locks (and flock, built on them) are kept on this client and another host gets the same lock"
                )),
                false => cross_host(format!(
                    "{fstype} without nobrl: flock is sent to the server as a byte-range lock (Linux 5.5 and later), which it arbitrates between hosts"
                )),
            },
            "fuse.sshfs" => host_only(
                "sshfs: SFTP has no locks, so flock is this host's kernel's alone and another host gets the same lock".into(),
            ),
            _ if fstype == "fuse" || fstype == "fuseblk" || fstype.starts_with("fuse.") => {
                host_only(format!(
                    "FUSE ({fstype}): a lock is whatever the daemon implements, and most (bindfs, rclone, s3fs) keep it on this host; a second mount of the same files, here or elsewhere, gets the same lock"
                ))
            }
            "overlay" => MountLocks::Local {
                fs,
                reason: "overlay: a union of directories on this host; locks through its merged path exclude each other (one taken through a layer directory does not)".into(),
            },
            "ceph" | "gfs2" | "ocfs2" | "afs" => cross_host(format!(
                "{fstype}: a cluster file system whose locks its cluster arbitrates between hosts"
            )),
            "9p" | "coda" | "smbfs" | "sshfs" | "davfs" | "lustre" | "glusterfs" | "virtiofs" => {
                host_only(format!(
                    "{fstype}: a shared file system whose locks are not known to reach other hosts"
                ))
            }
            _ => MountLocks::Local {
                reason: format!(
                    "{fstype}: a local file system; the kernel's lock excludes every process on this host"
                ),
                fs,
            },
        }
    }

    /// Classifies what `statfs` (and, on Linux, mountinfo) told of a mount.
    #[cfg(unix)]
    pub(crate) fn from_seen(seen: crate::sys::MountSeen) -> MountLocks {
        match (seen.options, seen.network) {
            (Some(options), _) if !seen.fstype.is_empty() => {
                MountLocks::from_mountinfo(&seen.fstype, &options)
            }
            (_, None) => {
                let fs = match seen.fstype.is_empty() {
                    true => "unknown".to_owned(),
                    false => seen.fstype,
                };
                MountLocks::Local {
                    reason: format!(
                        "{fs}: a local file system; the kernel's lock excludes every process on this host"
                    ),
                    fs,
                }
            }
            (_, Some("overlay")) => MountLocks::Local {
                fs: "overlay".into(),
                reason: "overlay: a union of directories on this host; locks through its merged path exclude each other (one taken through a layer directory does not)".into(),
            },
            (_, Some(net)) => {
                let fs = match seen.fstype.is_empty() {
                    true => net.to_owned(),
                    false => seen.fstype,
                };
                MountLocks::HostOnly {
                    reason: format!(
                        "{fs}: a network or FUSE file system whose mount options cannot be read here, so its locks are not known to reach other hosts"
                    ),
                    fs,
                }
            }
        }
    }
}

/// [`MountLocks`] of the mount `path` (relative to `at`; empty: `at` itself) lives on, for
/// an error about a lock refused there: what cannot be looked at is named so.
#[cfg(unix)]
pub(crate) fn at(at: std::os::fd::BorrowedFd<'_>, path: &Path, network: &str) -> MountLocks {
    match crate::sys::mount_seen(at, path) {
        Ok(seen) => MountLocks::from_seen(seen),
        Err(e) => MountLocks::HostOnly {
            fs: network.to_owned(),
            reason: format!(
                "{network}: its mount could not be looked at ({e}), so its locks are not known to reach other hosts"
            ),
        },
    }
}

impl fmt::Display for MountLocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.reason())
    }
}

fn io_error(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        op: "classify the mount of",
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(unix)]
fn seen(dir: &Path) -> std::io::Result<MountLocks> {
    crate::sys::mount_seen(crate::sys::cwd(), dir)
        .map(MountLocks::from_seen)
        .map_err(std::io::Error::from)
}

/// A resolved key on a network share: `\\?\UNC\server\share\...` (what the file system
/// reports for UNC paths and mapped drives alike). Keys are case-folded.
#[cfg(windows)]
pub(crate) fn is_network_path(key: &str) -> bool {
    key.starts_with(r"\\?\unc\") || (key.starts_with(r"\\") && !key.starts_with(r"\\?\"))
}

#[cfg(windows)]
fn seen(dir: &Path) -> std::io::Result<MountLocks> {
    let real = crate::sys::real_path(dir)?;
    let key = real.to_string_lossy().to_lowercase();
    Ok(match is_network_path(&key) {
        true => MountLocks::share(),
        false => MountLocks::Local {
            fs: "local volume".into(),
            reason: "a local volume: a lease on Windows is a named kernel semaphore, which excludes every process on this host".into(),
        },
    })
}

#[cfg(windows)]
impl MountLocks {
    /// A network share, as a Windows lease sees it.
    pub(crate) fn share() -> MountLocks {
        MountLocks::HostOnly {
            fs: "network share".into(),
            reason: "a network share: a lease on Windows is a named kernel semaphore, which is this host's alone".into(),
        }
    }
}

#[cfg(target_os = "wasi")]
fn seen(dir: &Path) -> std::io::Result<MountLocks> {
    crate::sys::stat_follow(dir)?;
    Ok(MountLocks::Local {
        fs: "WASI".into(),
        reason: "WASI: a lease is a claim of this process alone; what the host's directory is shared with is the host's business".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Classifies one real `/proc/self/mountinfo` line.
    fn line(l: &str) -> MountLocks {
        let (_, after) = l.split_once(" - ").expect("a mountinfo line has ' - '");
        let mut f = after.split(' ');
        let (fstype, _source) = (f.next().unwrap(), f.next().unwrap());
        MountLocks::from_mountinfo(fstype, f.next().unwrap_or_default().as_bytes())
    }

    #[test]
    fn nfs_with_local_lock_all_or_nolock_locks_on_this_host_only() {
        let l = line(
            "512 29 0:52 / /home rw,relatime shared:280 - nfs nas:/export/home rw,vers=3,rsize=1048576,wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys,mountaddr=10.0.0.2,mountvers=3,mountport=20048,mountproto=udp,local_lock=all,addr=10.0.0.2",
        );
        assert_eq!(l.name(), "host-only", "{l}");
        assert_eq!(l.fs(), "nfs");
        assert!(l.reason().contains("local_lock=all"), "{l}");
        assert!(!l.excludes_across_hosts());
        let l = line(
            "513 29 0:53 / /scratch rw,relatime - nfs nas:/scratch rw,vers=3,nolock,proto=tcp,sec=sys,local_lock=all,addr=10.0.0.2",
        );
        assert_eq!(l.name(), "host-only", "{l}");
        assert!(l.reason().contains("nolock"), "{l}");
        let l = line(
            "514 29 0:54 / /proj rw - nfs4 nas:/proj rw,vers=4.2,sec=sys,clientaddr=10.0.0.9,local_lock=flock,addr=10.0.0.2",
        );
        assert_eq!(l.name(), "host-only", "{l}");
        assert!(l.reason().contains("local_lock=flock"), "{l}");
    }

    #[test]
    fn nfs4_and_nfs3_with_the_lock_manager_lock_across_hosts() {
        let l = line(
            "600 29 0:60 / /home rw,relatime shared:300 - nfs4 nas.example.org:/home rw,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=10.0.0.9,local_lock=none,addr=10.0.0.2",
        );
        assert_eq!(l.name(), "cross-host", "{l}");
        assert_eq!(l.fs(), "nfs4");
        assert!(l.excludes_across_hosts());
        assert!(l.reason().contains("NFSv4"), "{l}");
        // posix alone local: flock still goes to the server.
        let l = line(
            "601 29 0:61 / /data rw - nfs nas:/data rw,vers=3,proto=tcp,sec=sys,mountproto=udp,local_lock=posix,addr=10.0.0.2",
        );
        assert_eq!(l.name(), "cross-host", "{l}");
        assert!(l.reason().contains("lockd"), "{l}");
        // Options that do not show local_lock= are not from the Linux client: not trusted.
        let l = line("602 29 0:62 / /x rw - nfs nas:/x rw,vers=3");
        assert_eq!(l.name(), "host-only", "{l}");
    }

    #[test]
    fn cifs_with_nobrl_locks_on_this_host_only_and_without_it_across_hosts() {
        let l = line(
            "700 29 0:70 / /mnt/share rw,relatime - cifs //fs.example.org/share rw,vers=3.1.1,cache=strict,username=u,uid=1000,noforceuid,gid=1000,noforcegid,addr=10.0.0.3,file_mode=0755,dir_mode=0755,soft,nounix,serverino,mapposix,nobrl,rsize=4194304,wsize=4194304,bsize=1048576,echo_interval=60,actimeo=1,closetimeo=1",
        );
        assert_eq!(l.name(), "host-only", "{l}");
        assert_eq!(l.fs(), "cifs");
        assert!(l.reason().contains("nobrl"), "{l}");
        let l = line(
            "701 29 0:71 / /mnt/share2 rw,relatime - cifs //fs/share2 rw,vers=3.1.1,cache=strict,username=u,uid=0,noforceuid,gid=0,noforcegid,addr=10.0.0.3,file_mode=0755,dir_mode=0755,soft,nounix,serverino,mapposix,rsize=4194304,wsize=4194304,bsize=1048576",
        );
        assert_eq!(l.name(), "cross-host", "{l}");
    }

    #[test]
    fn sshfs_and_other_fuse_lock_on_this_host_only() {
        let l = line(
            "800 29 0:80 / /home/u/remote rw,nosuid,nodev,relatime shared:400 - fuse.sshfs u@host:/home/u rw,user_id=1000,group_id=1000",
        );
        assert_eq!(l.name(), "host-only", "{l}");
        assert_eq!(l.fs(), "fuse.sshfs");
        assert!(l.reason().contains("sshfs"), "{l}");
        let l = line(
            "801 29 0:81 / /tmp/b rw,nosuid,nodev,relatime - fuse.bindfs /tmp/a rw,user_id=0,group_id=0,default_permissions,allow_other",
        );
        assert_eq!(l.name(), "host-only", "{l}");
        assert!(l.reason().contains("FUSE"), "{l}");
    }

    #[test]
    fn overlay_and_local_file_systems_are_local() {
        let l = line(
            "900 850 0:90 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/ABC:/var/lib/docker/overlay2/l/DEF,upperdir=/var/lib/docker/overlay2/x/diff,workdir=/var/lib/docker/overlay2/x/work",
        );
        assert_eq!(l.name(), "local", "{l}");
        assert_eq!(l.fs(), "overlay");
        let l = line("27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard");
        assert_eq!(l.name(), "local", "{l}");
        assert_eq!(l.fs(), "ext4");
    }

    #[cfg(unix)]
    #[test]
    fn a_network_mount_whose_options_cannot_be_read_is_host_only() {
        let seen = crate::sys::MountSeen {
            fstype: "nfs".into(),
            options: None,
            network: Some("nfs"),
        };
        let l = MountLocks::from_seen(seen);
        assert_eq!(l.name(), "host-only", "{l}");
        let seen = crate::sys::MountSeen {
            fstype: "apfs".into(),
            options: None,
            network: None,
        };
        assert_eq!(MountLocks::from_seen(seen).name(), "local");
    }

    #[test]
    fn a_missing_path_is_judged_by_its_nearest_existing_ancestor() {
        let dir = crate::test_dir();
        let here = MountLocks::of(dir.path()).unwrap();
        let below = MountLocks::of(dir.path().join("no/such/dir/x.lock")).unwrap();
        assert_eq!(here, below);
    }
}
