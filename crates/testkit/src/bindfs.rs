//! The two-mount bed: bindfs (FUSE) mounts of one backing directory, which behave as two
//! NFS clients with `local_lock=all` — a kernel lock taken through one does not exclude one
//! taken through the other ([`Bindfs::two_mounts`] checks that first).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{FlockHolder, run};

/// A bindfs (FUSE) mount of a fresh `backing` directory at a fresh `mnt` directory under
/// `dir`, unmounted on drop.
pub struct Bindfs {
    /// The directory the mount shows.
    pub backing: PathBuf,
    /// Where it is mounted.
    pub mnt: PathBuf,
}

impl Bindfs {
    /// Mounts it; `None` (after printing `SKIP: FUSE test: <why>`) where bindfs is missing
    /// or cannot mount here.
    ///
    /// # Panics
    ///
    /// When the directories cannot be created under `dir`.
    pub fn mount(dir: &Path) -> Option<Bindfs> {
        if Command::new("bindfs").arg("--version").output().is_err() {
            eprintln!("SKIP: FUSE test: bindfs is not installed (apt-get install bindfs)");
            return None;
        }
        let (backing, mnt) = (dir.join("backing"), dir.join("mnt"));
        std::fs::create_dir_all(&backing).expect("create the backing directory");
        std::fs::create_dir_all(&mnt).expect("create the mount point");
        match Command::new("bindfs").arg(&backing).arg(&mnt).output() {
            Ok(o) if o.status.success() => Some(Bindfs { backing, mnt }),
            other => {
                eprintln!("SKIP: FUSE test: bindfs could not mount here: {other:?}");
                None
            }
        }
    }

    /// A second bindfs mount of the same backing directory, at `mnt` + `-2`: with the first,
    /// two views of one directory on which a kernel lock taken through one does not exclude
    /// one taken through the other — as two NFS clients with `local_lock=all`. `None` (after
    /// printing `SKIP: FUSE test: <why>`) where it cannot be mounted.
    ///
    /// # Panics
    ///
    /// When the mount point cannot be created.
    pub fn another(&self) -> Option<Bindfs> {
        let mut name = self.mnt.as_os_str().to_owned();
        name.push("-2");
        let mnt = PathBuf::from(name);
        std::fs::create_dir_all(&mnt).expect("create the second mount point");
        match Command::new("bindfs").arg(&self.backing).arg(&mnt).output() {
            Ok(o) if o.status.success() => Some(Bindfs {
                backing: self.backing.clone(),
                mnt,
            }),
            other => {
                eprintln!("SKIP: FUSE test: a second bindfs mount failed here: {other:?}");
                None
            }
        }
    }

    /// Two mounts of one fresh directory under `dir` that the kernel's lock does not cross,
    /// checked with real processes (util-linux `flock` holds a lock through the first; a
    /// `flock -n` through the second must get it too); `None` after a `SKIP:` line where
    /// bindfs cannot mount, or where the lock does cross them (then they are not two hosts).
    ///
    /// # Panics
    ///
    /// When the directories cannot be created or util-linux `flock` is missing.
    pub fn two_mounts(dir: &Path) -> Option<(Bindfs, Bindfs)> {
        let first = Bindfs::mount(dir)?;
        let second = first.another()?;
        let probe = "two-mounts.probe";
        let holder = FlockHolder::hold(&first.mnt.join(probe));
        let other = run(Command::new("flock")
            .args(["-n", "-o"])
            .arg(second.mnt.join(probe))
            .arg("true"));
        holder.release();
        let _ = std::fs::remove_file(first.backing.join(probe));
        if other.code != 0 {
            eprintln!(
                "SKIP: two-mount test: a kernel lock through one bindfs mount excludes the other here, so they are not two hosts"
            );
            return None;
        }
        Some((first, second))
    }
}

impl Drop for Bindfs {
    fn drop(&mut self) {
        let ok = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.mnt)
            .status();
        if !ok.is_ok_and(|s| s.success()) {
            let _ = Command::new("fusermount").arg("-u").arg(&self.mnt).status();
        }
    }
}
