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

pub(super) fn create_dirs_io(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
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

pub(super) use leasehold::patterns::durable::sync_dir;
