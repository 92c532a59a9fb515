//! Data below a directory handle on POSIX ([`PlatformDataDir`] for [`Dir`]): every operation
//! is made relative to the handle's descriptor (`fstatat(AT_SYMLINK_NOFOLLOW)`, `mkdirat`,
//! `openat(O_NOFOLLOW)`, `renameat`, `unlinkat`), so the kernel itself refuses to follow a
//! symlink in the one component it resolves, and a directory swapped after the handle was
//! opened cannot redirect anything. The system calls are `sys`'s.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::Path;

use rustix::io::Errno;

use super::dir::Dir;
use super::error::{dir_error, path_error, plain};
use crate::error::{Error, Result};
use crate::kind::FileKind;
use crate::lease::platform::{PlatformDataDir, PlatformDir};
use crate::sys::{self, Entry};

/// A failed rename or removal: a missing entry and permission are said as such, anything
/// else is the system's word (`path_error`'s mapping is an open's: `EISDIR` there means
/// "not a regular file").
fn failed(path: &Path, op: &'static str, e: Errno) -> Error {
    match e {
        Errno::NOENT => Error::NotFound {
            path: path.to_path_buf(),
        },
        Errno::ACCESS | Errno::PERM => Error::PermissionDenied {
            path: path.to_path_buf(),
        },
        other => Error::Io {
            op,
            path: path.to_path_buf(),
            source: other.into(),
        },
    }
}

impl PlatformDataDir for Dir {
    fn entry(&self, name: &str) -> Result<Option<FileKind>> {
        plain(name, &self.path, "inspect")?;
        match sys::entry_at(self.fd.as_fd(), Path::new(name)) {
            Ok(Entry::Missing) => Ok(None),
            Ok(Entry::Regular(_)) => Ok(Some(FileKind::Regular)),
            Ok(Entry::Other(kind)) => Ok(Some(kind)),
            Err(e) => Err(path_error(&self.path.join(name), "inspect", e)),
        }
    }

    fn create_child(&self, name: &str, mode: u32) -> Result<Dir> {
        let path = self.path.join(name);
        plain(name, &self.path, "create directory")?;
        match sys::mkdir_at(self.fd.as_fd(), Path::new(name), mode) {
            // A new name is durable only once its directory is synced: a candidate or a
            // TARGET directory must survive a power cut like the files written into it.
            Ok(()) => sys::sync_dir_fd(self.fd.as_fd()).map_err(|source| Error::Io {
                op: "sync directory",
                path: self.path.clone(),
                source,
            })?,
            Err(Errno::EXIST) => {}
            Err(e) => return Err(dir_error(self.fd.as_fd(), Path::new(name), &path, e)),
        }
        self.child(name, false)
    }

    fn open_read(&self, name: &str) -> Result<Option<(File, u32)>> {
        Ok(self
            .open_checked(name, false, false)?
            .map(|(file, _, mode)| (file, mode)))
    }

    fn create_new(&self, name: &str, mode: u32) -> Result<Option<File>> {
        plain(name, &self.path, "create file")?;
        match sys::create_new_at(self.fd.as_fd(), Path::new(name), mode) {
            Ok(fd) => Ok(Some(File::from(fd))),
            Err(Errno::EXIST) => Ok(None),
            Err(e) => Err(path_error(&self.path.join(name), "create file", e)),
        }
    }

    fn rename(&self, from: &str, to_dir: &Dir, to: &str) -> Result<()> {
        plain(from, &self.path, "rename")?;
        plain(to, &to_dir.path, "rename")?;
        sys::rename_at(
            self.fd.as_fd(),
            Path::new(from),
            to_dir.fd.as_fd(),
            Path::new(to),
        )
        .map_err(|e| failed(&self.path.join(from), "rename", e))
    }

    fn remove(&self, name: &str, dir: bool) -> Result<()> {
        let op = match dir {
            true => "remove directory",
            false => "remove file",
        };
        plain(name, &self.path, op)?;
        let at = self.fd.as_fd();
        match dir {
            true => sys::remove_dir_at(at, Path::new(name)),
            false => sys::unlink_at(at, Path::new(name)),
        }
        .map_err(|e| failed(&self.path.join(name), op, e))
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::unix::fs::{PermissionsExt, symlink};

    use crate::lease::tests::make_fifo;
    use crate::{Error, FileKind, LockDir};

    #[test]
    fn data_below_a_handle_is_reached_one_component_at_a_time_never_through_a_symlink() {
        let tmp = crate::test_dir();
        let victim = crate::test_dir();
        std::fs::write(victim.path().join("secret"), b"s").unwrap();
        symlink(victim.path(), tmp.path().join("dlink")).unwrap();
        symlink(victim.path().join("secret"), tmp.path().join("flink")).unwrap();
        make_fifo(&tmp.path().join("fifo"));
        let root = LockDir::open(tmp.path()).unwrap();

        assert_eq!(root.entry("dlink").unwrap(), Some(FileKind::Symlink));
        assert_eq!(root.entry("fifo").unwrap(), Some(FileKind::Fifo));
        assert_eq!(root.entry("missing").unwrap(), None);
        for not_plain in ["../x", "a/b", ".", ""] {
            assert!(root.entry(not_plain).is_err(), "{not_plain:?}");
            assert!(root.remove_file(not_plain).is_err(), "{not_plain:?}");
        }

        // A child directory is made with its mode, durably, and a link is never one.
        let sub = root.create_child("sub", 0o700).unwrap();
        assert_eq!(root.entry("sub").unwrap(), Some(FileKind::Directory));
        let mode = std::fs::metadata(tmp.path().join("sub"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        root.create_child("sub", 0o700)
            .expect("an existing directory is fine");
        match root.create_child("dlink", 0o700) {
            Err(Error::NotDirectory { kind, path }) => {
                assert_eq!((kind, path), (FileKind::Symlink, tmp.path().join("dlink")));
            }
            other => panic!("a symlinked child must be refused, got {other:?}"),
        }

        // Reads refuse a link and a FIFO (without blocking on it); a new file is created
        // exclusively (a taken name, a link included, is never opened or followed).
        assert!(matches!(
            root.open_read("flink"),
            Err(Error::NotRegularFile {
                kind: FileKind::Symlink,
                ..
            })
        ));
        assert!(matches!(
            root.open_read("fifo"),
            Err(Error::NotRegularFile {
                kind: FileKind::Fifo,
                ..
            })
        ));
        assert!(root.open_read("missing").unwrap().is_none());
        assert!(root.create_new("flink", 0o600).unwrap().is_none());
        let mut f = sub.create_new("a", 0o640).unwrap().expect("a free name");
        f.write_all(b"data").unwrap();
        assert!(sub.create_new("a", 0o600).unwrap().is_none(), "taken");
        let (mut read, mode) = sub.open_read("a").unwrap().expect("there");
        let mut text = String::new();
        read.read_to_string(&mut text).unwrap();
        // Its permission bits: 0640 as created, less the umask (which never takes the
        // owner's bits in a test run, nor adds any).
        assert_eq!(text, "data");
        assert_eq!((mode & 0o700, mode & !0o640), (0o600, 0));

        // Renames and removals are of the entries themselves: a link is replaced or removed,
        // what it points to is untouched.
        assert!(sub.rename("a", &root, "flink").unwrap());
        assert_eq!(root.entry("flink").unwrap(), Some(FileKind::Regular));
        assert!(!sub.rename("a", &root, "b").unwrap(), "gone already");
        assert!(root.remove_file("dlink").unwrap());
        assert!(!root.remove_file("dlink").unwrap());
        assert_eq!(std::fs::read(victim.path().join("secret")).unwrap(), b"s");
        assert!(
            root.remove_file("sub").is_err(),
            "a directory is not a file"
        );
        assert!(root.remove_dir("sub").unwrap());
        assert!(!root.remove_dir("sub").unwrap());
        let mut names = root.names().unwrap();
        names.sort();
        assert_eq!(names, ["fifo", "flink"]);
    }
}
