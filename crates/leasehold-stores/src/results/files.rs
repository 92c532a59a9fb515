//! The file-system steps the operations share: walking a source, copying one file through
//! directory handles, and the clock.

use std::io;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use super::error::{Result, ResultError};
use super::handles::{Kind, Tree};

/// The mode of directories the store creates under its root, and in TARGET (where the umask
/// applies on top).
pub(super) const PRIVATE_DIR: u32 = 0o700;
pub(super) const TARGET_DIR: u32 = 0o777;

/// Collects the regular files under `dir` as `/`-separated paths (prefixed with `prefix`),
/// through handles: a symlink, FIFO, socket or device anywhere is refused, never followed.
pub(super) fn walk(dir: &Tree, prefix: &str, out: &mut Vec<String>) -> Result<()> {
    let source = |path: &Path, reason: String| ResultError::Source {
        path: path.to_path_buf(),
        reason,
    };
    let names = dir
        .names()
        .map_err(|e| source(dir.path(), format!("cannot read directory: {e}")))?;
    for name in names {
        let rel = format!("{prefix}{name}");
        let path = dir.join(&name);
        match dir
            .kind(&name)
            .map_err(|e| source(&path, format!("cannot inspect: {e}")))?
        {
            Some(Kind::Dir) => {
                let child = dir
                    .child(&name, None)
                    .map_err(|e| source(&path, e.to_string()))?;
                if let Some(child) = child {
                    walk(&child, &format!("{rel}/"), out)?;
                }
            }
            Some(Kind::File) => out.push(rel),
            Some(Kind::Other(what)) => {
                return Err(source(
                    &path,
                    format!("is {what} (only regular files and directories are staged)"),
                ));
            }
            None => {} // gone meanwhile
        }
    }
    Ok(())
}

/// `rel` split into its directory part and its file name.
pub(super) fn split(rel: &str) -> (&str, &str) {
    rel.rsplit_once('/').unwrap_or(("", rel))
}

/// Copies the regular file `rel` from `from` into `to` (creating directories with
/// `dir_mode`), through handles on both sides: the source is opened without following and
/// checked regular (a FIFO swapped in is refused at once), the copy gets the source's
/// permission bits without set-id bits at creation (umask applying), and replaces the
/// destination durably. `Err(Ok(e))`: the source is unusable; `Err(Err(e))`: writing failed.
pub(super) fn copy(
    from: &Tree,
    to: &Tree,
    rel: &str,
    dir_mode: u32,
) -> std::result::Result<(), (bool, io::Error)> {
    let (dir, name) = split(rel);
    let gone = || io::Error::new(io::ErrorKind::NotFound, format!("{rel}: vanished"));
    let src_dir = from.descend(dir, None).map_err(|e| (true, e))?;
    let src_dir = src_dir.ok_or_else(|| (true, gone()))?;
    let (mut file, mode) = src_dir
        .open_file(name)
        .map_err(|e| (true, e))?
        .ok_or_else(|| (true, gone()))?;
    let dst_dir = to
        .descend(dir, Some(dir_mode))
        .map_err(|e| (false, e))?
        .ok_or_else(|| (false, gone()))?;
    dst_dir
        .write_with(name, mode & 0o777, &mut |out| {
            io::copy(&mut file, out).map(drop)
        })
        .map_err(|e| (false, e))
}

pub(super) fn describe_files(verb: &str, files: &[String], target: &Path) -> String {
    if files.is_empty() {
        "nothing".into()
    } else {
        format!("{verb} {} file(s) into {}", files.len(), target.display())
    }
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
