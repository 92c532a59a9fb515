//! [`Target`]: where a lock file is (a path, a name in a [`Dir`], or a caller's descriptor).
//! Its gates' names are in `gate.rs`.

use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use super::dir::Dir;
use super::error::plain;
use crate::error::Result;
use crate::lease::platform::{PlatformOptions, PlatformTarget};
use crate::sys;

/// Where a lock file is: a path (resolved against the working directory) or a name inside an
/// opened [`Dir`] — or, for [`LeaseOptions::lock_descriptor`](crate::LeaseOptions::lock_descriptor), no path
/// at all (`checked == false`: a descriptor the caller opened, whose inode nothing can be
/// checked against).
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The directory handle a lock in a [`Dir`] is named in: its descriptor for the
    /// `*at` calls, its chain for `Posix::verify`.
    pub(super) dir: Option<Dir>,
    pub(super) name: PathBuf,
    /// How messages name the lock, where that is not `name` (a lock in a [`Dir`], or a
    /// descriptor): one path copy fewer per acquisition on the common path.
    pub(super) display: Option<PathBuf>,
    /// Whether the lock has a gate (see [`gate`](super::gate)), named after `name` when it is needed.
    pub(super) gated: bool,
    /// Whether the locked inode is checked against `name` (false only for descriptors).
    pub(super) checked: bool,
    /// Whether the lock file and its directory are refused where another user could have
    /// prepared them: `!LeaseOptions::allow_shared_state` (gates are judged always; see
    /// [`gate`](super::gate), "Trust").
    pub(super) judge: bool,
}

impl PlatformTarget for Target {
    type Dir = Dir;

    fn path(opts: &PlatformOptions, path: &Path) -> Result<Target> {
        Ok(Target {
            dir: None,
            name: path.to_path_buf(),
            display: None,
            gated: true,
            checked: true,
            judge: !opts.allow_shared_state,
        })
    }

    fn at(opts: &PlatformOptions, dir: &Dir, name: &str) -> Result<Target> {
        let display = dir.path.join(name);
        plain(name, &dir.path, "open lock file")?;
        Ok(Target {
            dir: Some(dir.clone()),
            name: PathBuf::from(name),
            display: Some(display),
            gated: true,
            checked: true,
            judge: !opts.allow_shared_state,
        })
    }

    /// The same lock without a gate: for an internal lock whose exclusive holder waits only
    /// a moment (the keyed namespace's collector lock), where a turnstile protects nobody and
    /// its gate file would only be one more file in the namespace.
    fn without_gate(mut self) -> Target {
        self.gated = false;
        self
    }

    /// The same lock without the post-lock inode check (as for a caller's descriptor).
    fn unchecked(mut self) -> Target {
        self.checked = false;
        self
    }

    fn display(&self) -> &Path {
        self.display.as_deref().unwrap_or(&self.name)
    }
}

impl Target {
    /// A descriptor the caller opened (`display` names it in messages): no path, no gate.
    pub(crate) fn descriptor(display: PathBuf) -> Target {
        Target {
            dir: None,
            name: PathBuf::new(),
            display: Some(display),
            gated: false,
            checked: false,
            judge: true,
        }
    }

    pub(super) fn dir(&self) -> BorrowedFd<'_> {
        match &self.dir {
            None => sys::cwd(),
            Some(d) => d.fd.as_fd(),
        }
    }

    /// The lock file's directory, relative to [`dir`](Self::dir): `.` for a lock in a
    /// [`Dir`] or a bare file name, else the path's parent.
    pub(super) fn parent(&self) -> &Path {
        match &self.dir {
            Some(_) => Path::new("."),
            None => self
                .name
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new(".")),
        }
    }

    /// The lock file's directory as messages name it.
    pub(super) fn parent_display(&self) -> PathBuf {
        match self.display().parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }
}
