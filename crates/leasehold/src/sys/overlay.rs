//! Whether an overlayfs mount's layer directories can be reached from this mount namespace
//! (Linux): what decides if a lock file on the overlay is refused.
//!
//! A lock taken through an overlay's merged path is the overlay inode's; one taken through
//! its upper (or a lower) directory is the underlying inode's, and the two do not exclude
//! each other. That can only happen where some process can reach a layer directory. A
//! Docker or Podman container's root file system is an overlay whose layers live under the
//! host's `/var/lib/...`, which the container's mount namespace does not show: there every
//! process goes through the merged path, the hazard cannot happen, and refusing would break
//! every containerised user by default.
//!
//! So the overlay's own record of its layers is read — the super options of its line in
//! `/proc/self/mountinfo` (`lowerdir=`, `lowerdir+=`, `datadir+=`, `upperdir=`), found by
//! the mount ID `statx` reports (Linux 5.8+), else by the device — and each layer path is
//! looked up here. Reachable, or not known (no mountinfo, no line for the mount, a relative
//! layer path, whose base was the mounter's working directory): refused.
//!
//! The recorded paths are the mounter's, taken at mount time: after the directory holding
//! the layers is renamed they lead nowhere while the layers stay reachable under the new
//! name. So a layer path that names nothing is judged by the file system it leads into: a
//! rename never leaves its file system, and the overlay's `statfs` answers its upper layer's
//! file system's totals (block size, blocks, inodes). Where the path's nearest existing
//! directory lies on a file system with those totals — and is not the overlay itself, as a
//! container's `/var/lib` is — the layer may have been moved within it: refused. Only when
//! every layer path is absolute and leads to no directory and into none of the layers' file
//! systems here is the overlay treated as a local file system. (A lower layer on another
//! file system than the upper, then moved, is not told apart from one out of reach.)
//!
//! Why not a crate: `procfs` parses mountinfo, but its super options are strings keyed in a
//! map (paths need not be UTF-8) and it knows nothing of overlayfs's own escaping of `:` in
//! `lowerdir=`; what is needed is one line's field and two unescapings, tested below.
//!
//! Limits, stated once: the paths are the mounter's view. A process in a `chroot` below the
//! mounter's root sees them under another prefix, and could reach a layer that is looked
//! up in vain here; a chroot is a tool of the administrator, who also decides the opt-in.

use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, StatxFlags};

/// What is known of an overlay mount's layers from here.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Layers {
    /// Some layer directory is reachable in this mount namespace: refuse.
    Reachable,
    /// A layer directory is no longer at its recorded path, but the file system it lives on
    /// is reachable here (the path's nearest existing directory is on it), so it was moved
    /// within it — a rename never leaves its file system — and can still be reached under
    /// its new name: refuse.
    Moved,
    /// Every layer path is absolute and names nothing here: the hazard cannot happen.
    Unreachable,
    /// Cannot tell (no mountinfo, no line for the mount, a relative layer path): refuse.
    Unknown,
}

/// Looks up the layers of the overlay mount that `path` (relative to `at`; empty: `at`
/// itself) lives on.
pub(crate) fn layers_of(at: BorrowedFd<'_>, path: &Path) -> Layers {
    let Some((mount, dev)) = mount_of(at, path) else {
        return Layers::Unknown;
    };
    let Ok(mountinfo) = std::fs::read("/proc/self/mountinfo") else {
        return Layers::Unknown;
    };
    let Some(paths) = layer_paths(&mountinfo, mount) else {
        return Layers::Unknown;
    };
    let statfs = match path.as_os_str().is_empty() {
        true => rustix::fs::fstatfs(at),
        false => rustix::fs::statfs(path),
    };
    let Ok(own) = statfs.map(|st| Fs::of(&st)) else {
        return Layers::Unknown;
    };
    judge(&paths, |p| look(p, dev, own))
}

/// Which file system a `statfs` describes, as far as its fixed totals tell: an overlay's
/// `statfs` answers its upper (else topmost) layer's file system's block size, blocks and
/// inodes (only the type, the name length and, with `uuid=on`, the fsid are its own), so a
/// directory whose file system has the same totals may be the one its layers live on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fs {
    bsize: u64,
    blocks: u64,
    files: u64,
}

impl Fs {
    #[allow(clippy::unnecessary_cast)] // the fields' types differ between targets
    fn of(st: &rustix::fs::StatFs) -> Fs {
        Fs {
            bsize: st.f_bsize as u64,
            blocks: st.f_blocks as u64,
            files: st.f_files as u64,
        }
    }
}

/// Where a layer's recorded path leads now (see [`judge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Look {
    /// A directory is there.
    Here,
    /// Nothing is, but the path's nearest existing directory lies on the layers' file system
    /// (not the overlay itself): the layer may have been renamed within it.
    Moved,
    /// Nothing is, and nothing of the layers' file system is on the way (a container's
    /// view: the path's nearest existing directory is on the overlay, or another mount).
    Absent,
}

/// [`Look`] at a layer's recorded path `p`, for the overlay on device `dev` whose `statfs`
/// is `own`.
fn look(p: &Path, dev: (u32, u32), own: Fs) -> Look {
    if std::fs::metadata(p).is_ok_and(|m| m.is_dir()) {
        return Look::Here;
    }
    for up in p.ancestors().skip(1) {
        match rustix::fs::stat(up) {
            Ok(st) => {
                #[allow(clippy::unnecessary_cast)] // st_dev is not u64 on every target
                let at = st.st_dev as u64;
                if (rustix::fs::major(at), rustix::fs::minor(at)) == dev {
                    return Look::Absent; // the overlay itself: a layer cannot be in it
                }
                return match rustix::fs::statfs(up) {
                    Ok(fs) if Fs::of(&fs) == own => Look::Moved,
                    Ok(_) => Look::Absent,
                    Err(_) => Look::Moved, // cannot tell: as if it were
                };
            }
            Err(_) => continue,
        }
    }
    Look::Absent
}

/// How the overlay's line is found in mountinfo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mount {
    /// By `statx`'s `stx_mnt_id` (the first field of a mountinfo line).
    Id(u64),
    /// By the device (`major:minor`, the third field), where `statx` has no mount ID
    /// (before Linux 5.8). Every mount of one overlay superblock shares its device and its
    /// super options, so any line with it will do.
    Dev(u32, u32),
}

/// How the mount `path` lives on is found in mountinfo, and its device (major, minor).
pub(crate) fn mount_of(at: BorrowedFd<'_>, path: &Path) -> Option<(Mount, (u32, u32))> {
    let flags = match path.as_os_str().is_empty() {
        true => AtFlags::EMPTY_PATH,
        false => AtFlags::empty(),
    };
    match rustix::fs::statx(at, path, flags, StatxFlags::MNT_ID) {
        Ok(st) if StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::MNT_ID) => Some((
            Mount::Id(st.stx_mnt_id),
            (st.stx_dev_major, st.stx_dev_minor),
        )),
        Ok(st) => {
            let dev = (st.stx_dev_major, st.stx_dev_minor);
            Some((Mount::Dev(dev.0, dev.1), dev))
        }
        Err(_) => {
            let st = match path.as_os_str().is_empty() {
                true => rustix::fs::fstat(at),
                false => rustix::fs::statat(at, path, AtFlags::empty()),
            }
            .ok()?;
            #[allow(clippy::unnecessary_cast)] // st_dev is not u64 on every target
            let dev = st.st_dev as u64;
            let dev = (rustix::fs::major(dev), rustix::fs::minor(dev));
            Some((Mount::Dev(dev.0, dev.1), dev))
        }
    }
}

/// The verdict on `paths` (a mount's layer directories), with `look` as the look-up.
pub(crate) fn judge(paths: &[PathBuf], look: impl Fn(&Path) -> Look) -> Layers {
    if paths.is_empty() || paths.iter().any(|p| !p.is_absolute()) {
        return Layers::Unknown;
    }
    let looks: Vec<Look> = paths.iter().map(|p| look(p)).collect();
    if looks.contains(&Look::Here) {
        Layers::Reachable
    } else if looks.contains(&Look::Moved) {
        Layers::Moved
    } else {
        Layers::Unreachable
    }
}

/// The layer directories (upper, lower, data-only lower) that the overlay `mount`'s line
/// in `mountinfo` names, unescaped; `None` when there is no such overlay line.
///
/// A line: `ID PARENT MAJOR:MINOR ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE
/// SUPER_OPTIONS` (proc(5)). The kernel prints each option value with `,`, `=`, space, tab,
/// newline and `\` as octal escapes (`seq_show_option`); within the legacy `lowerdir=`
/// list, layers are separated by `:` (`::` before data-only layers) and overlayfs's own
/// escape `\` protects a `:` or `\` inside a path. `lowerdir+=` and `datadir+=` (Linux
/// 6.7+, one layer each) are plain paths.
pub(crate) fn layer_paths(mountinfo: &[u8], mount: Mount) -> Option<Vec<PathBuf>> {
    let (_, options) = mount_line(mountinfo, mount, |fstype| fstype == b"overlay")?;
    let mut paths = Vec::new();
    for option in options.split(|b| *b == b',') {
        let Some(eq) = option.iter().position(|b| *b == b'=') else {
            continue;
        };
        let (key, value) = (&option[..eq], unescape_octal(&option[eq + 1..]));
        match key {
            b"lowerdir" => paths.extend(split_lowerdirs(&value)),
            b"upperdir" | b"lowerdir+" | b"datadir+" => paths.push(path_of(value)),
            _ => {}
        }
    }
    Some(paths)
}

/// The file-system type and the super options (still escaped) of `mount`'s line in
/// `mountinfo`, the first whose type `fits`.
pub(crate) fn mount_line(
    mountinfo: &[u8],
    mount: Mount,
    fits: impl Fn(&[u8]) -> bool,
) -> Option<(&[u8], &[u8])> {
    mountinfo
        .split(|b| *b == b'\n')
        .filter(|line| {
            let mut f = line.split(|b| *b == b' ');
            let (Some(id), Some(_parent), Some(dev)) = (f.next(), f.next(), f.next()) else {
                return false;
            };
            match mount {
                Mount::Id(want) => parse_u64(id) == Some(want),
                Mount::Dev(ma, mi) => dev == format!("{ma}:{mi}").as_bytes(),
            }
        })
        .filter_map(fs_fields)
        .find(|(fstype, _)| fits(fstype))
}

/// The file-system type and the super options of a mountinfo line (the fields after `-`).
pub(crate) fn fs_fields(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut fields = line.split(|b| *b == b' ');
    fields.by_ref().position(|f| f == b"-")?;
    let fstype = fields.next()?;
    let _source = fields.next()?;
    Some((fstype, fields.next().unwrap_or_default()))
}

fn parse_u64(field: &[u8]) -> Option<u64> {
    std::str::from_utf8(field).ok()?.parse().ok()
}

/// Undoes the kernel's `\ooo` escapes (three octal digits); anything else stays as it is.
fn unescape_octal(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let digits = s.get(i + 1..i + 4);
        match digits {
            Some(d) if s[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)) => {
                let v = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(v as u8);
                i += 4;
            }
            _ => {
                out.push(s[i]);
                i += 1;
            }
        }
    }
    out
}

/// Splits a legacy `lowerdir=` list at the `:` that overlayfs does not see escaped, and
/// drops its `\` escapes; the empty item of a `::` (data-only layers follow) is skipped.
fn split_lowerdirs(list: &[u8]) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    let mut cur = Vec::new();
    let mut bytes = list.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => cur.extend(bytes.next()),
            b':' => {
                if !cur.is_empty() {
                    paths.push(path_of(std::mem::take(&mut cur)));
                }
            }
            _ => cur.push(b),
        }
    }
    if !cur.is_empty() {
        paths.push(path_of(cur));
    }
    paths
}

fn path_of(bytes: Vec<u8>) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &[u8] = b"27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
45 27 0:39 / /tmp/x/m rw,relatime - overlay overlay rw,lowerdir=/tmp/x/lo\\134:w\\040er:/l2::/data,upperdir=/tmp/x/up\\054per,workdir=/tmp/x/w,uuid=on\n\
46 27 0:40 / /c rw shared:7 master:3 - overlay overlay rw,lowerdir+=/a\\075b,datadir+=/d\n\
47 27 0:41 / /r rw - overlay overlay rw,lowerdir=l/ABC:l/DEF,upperdir=id/diff,workdir=id/work\n";

    fn paths(v: &[&str]) -> Vec<PathBuf> {
        v.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn layers_are_read_from_the_mounts_line_unescaped() {
        // Octal escapes of the kernel (\134 is '\', \040 ' ', \054 ','), then overlayfs's
        // own: "\:" is a colon inside a path; "::" starts the data-only layers.
        let want = paths(&["/tmp/x/lo:w er", "/l2", "/data", "/tmp/x/up,per"]);
        assert_eq!(layer_paths(MOUNTINFO, Mount::Id(45)), Some(want.clone()));
        assert_eq!(layer_paths(MOUNTINFO, Mount::Dev(0, 39)), Some(want));
        // The new mount API's one-layer options, after optional fields.
        assert_eq!(
            layer_paths(MOUNTINFO, Mount::Id(46)),
            Some(paths(&["/a=b", "/d"]))
        );
        // Not an overlay, or no such mount: nothing known.
        assert_eq!(layer_paths(MOUNTINFO, Mount::Id(27)), None);
        assert_eq!(layer_paths(MOUNTINFO, Mount::Id(99)), None);
        assert_eq!(layer_paths(MOUNTINFO, Mount::Dev(0, 45)), None);
    }

    #[test]
    fn only_absolute_layers_that_name_nothing_here_let_the_overlay_pass() {
        let layers = layer_paths(MOUNTINFO, Mount::Id(45)).unwrap();
        assert_eq!(judge(&layers, |_| Look::Absent), Layers::Unreachable);
        let data = |p: &Path| match p == Path::new("/data") {
            true => Look::Here,
            false => Look::Absent,
        };
        assert_eq!(
            judge(&layers, data),
            Layers::Reachable,
            "a data-only layer reached is enough"
        );
        // A layer moved within a file system reachable here is as good as reached.
        let moved = |p: &Path| match p == Path::new("/l2") {
            true => Look::Moved,
            false => Look::Absent,
        };
        assert_eq!(judge(&layers, moved), Layers::Moved);
        // Relative layer paths (Docker's when the options outgrow a page) were resolved
        // against the mounter's working directory: nothing can be told.
        let relative = layer_paths(MOUNTINFO, Mount::Id(47)).unwrap();
        assert_eq!(relative, paths(&["l/ABC", "l/DEF", "id/diff"]));
        assert_eq!(judge(&relative, |_| Look::Absent), Layers::Unknown);
        assert_eq!(judge(&[], |_| Look::Absent), Layers::Unknown);
    }
}
