//! The file-system steps the operations share: walking a source, creating private
//! directories, removing, syncing a directory, and the clock.

use std::fs;
use std::io;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use super::error::{Result, ResultError};

/// Collects the regular files under `dir` as `/`-separated paths relative to `base`.
pub(super) fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    let source = |path: &Path, reason: String| ResultError::Source {
        path: path.to_path_buf(),
        reason,
    };
    let rd = fs::read_dir(dir).map_err(|e| source(dir, format!("cannot read directory: {e}")))?;
    for e in rd {
        let e = e.map_err(|e| source(dir, format!("cannot read directory: {e}")))?;
        let path = e.path();
        let ft = e
            .file_type()
            .map_err(|e| source(&path, format!("cannot inspect: {e}")))?;
        if ft.is_dir() {
            walk(base, &path, out)?;
        } else if ft.is_file() {
            let rel = path
                .strip_prefix(base)
                .ok()
                .and_then(|r| r.to_str())
                .ok_or_else(|| source(&path, "file name is not valid UTF-8".into()))?;
            out.push(rel.to_string());
        } else {
            return Err(source(
                &path,
                "is not a regular file or directory (symlinks and special files are not staged)"
                    .into(),
            ));
        }
    }
    Ok(())
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

/// Creates `dir` (a directory directly under the managed root) durably: its name and the
/// root's own name survive a power cut (the keyed leases may have created the root without
/// syncing its parent). Found necessary by the power-loss torture (`crates/crashfs`).
pub(super) fn create_dirs_io(dir: &Path) -> io::Result<()> {
    let root = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(dir);
    leasehold::patterns::durable::create_dir_durable(dir, root)
}

pub(super) fn create_dirs(dir: &Path) -> Result<()> {
    create_dirs_io(dir).map_err(|source| ResultError::Io {
        op: "create directory",
        path: dir.to_path_buf(),
        source,
    })
}

pub(super) fn remove_dir_if_present(dir: &Path) -> io::Result<()> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}
