//! A durable JSON document: one JSON object in one file, rewritten whole and atomically.
//!
//! * **Atomic rewrite.** Every save goes through
//!   [`replace_file`] (temp file in the same
//!   directory → write → fsync → rename → fsync directory), so a crash at any point leaves
//!   the old or the new document, never a torn one, and a save that returned is durable.
//! * **Never overwrite what does not parse.** [`JsonDocument::load`] reports an unparsable
//!   document with the reason; nothing here writes unless a load succeeded first, so the
//!   file stays byte-for-byte as it was for a human to repair.
//! * **Unknown fields survive.** Loads and saves work on the whole JSON object, so fields
//!   written by a newer version are carried through a rewrite by an older one.
//!
//! The few file operations go through [`DocumentFiles`], so tests can fail each step.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use leasehold::patterns::authority::StoreFailure;
use leasehold::patterns::durable::replace_file;
use serde_json::{Map, Value};

/// The file operations a [`JsonDocument`] needs: a narrow seam for fault injection.
pub trait DocumentFiles: Send + Sync {
    /// The file's bytes, or `None` when it does not exist.
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>>;
    /// Durably and atomically replaces the file with `bytes`.
    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
}

/// The real file system, with [`replace_file`] for writes.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFiles;

impl DocumentFiles for RealFiles {
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        match std::fs::read(path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            builder.create(dir)?;
        }
        replace_file(path, bytes)
    }
}

/// One JSON object stored in one file.
#[derive(Clone)]
pub struct JsonDocument {
    path: PathBuf,
    files: Arc<dyn DocumentFiles>,
}

impl std::fmt::Debug for JsonDocument {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonDocument")
            .field("path", &self.path)
            .finish()
    }
}

impl JsonDocument {
    /// The document at `path` on the real file system.
    pub fn new(path: impl Into<PathBuf>) -> JsonDocument {
        JsonDocument::with_files(path, Arc::new(RealFiles))
    }

    /// The document at `path`, with file operations going through `files`.
    pub fn with_files(path: impl Into<PathBuf>, files: Arc<dyn DocumentFiles>) -> JsonDocument {
        JsonDocument {
            path: path.into(),
            files,
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the document: a missing file is an empty object; anything that is not a JSON
    /// object is a failure naming the file and the reason (the file is not touched).
    pub fn load(&self) -> Result<Map<String, Value>, StoreFailure> {
        let bytes = match self.files.read(&self.path) {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(Map::new()),
            Err(e) => return Err(self.failure(format!("cannot read: {e}"))),
        };
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(_) => Err(self.failure("does not parse: not a JSON object".into())),
            Err(e) => Err(self.failure(format!("does not parse: {e}"))),
        }
    }

    /// Replaces the document with `doc`, durably (returns once it would survive a crash).
    pub fn save(&self, doc: &Map<String, Value>) -> Result<(), StoreFailure> {
        let mut bytes = serde_json::to_vec_pretty(doc)
            .map_err(|e| self.failure(format!("cannot encode: {e}")))?;
        bytes.push(b'\n');
        self.files
            .replace(&self.path, &bytes)
            .map_err(|e| self.failure(format!("cannot write: {e}")))
    }

    /// A failure that names the file and says what to do.
    pub fn failure(&self, what: String) -> StoreFailure {
        StoreFailure(format!(
            "{}: {what} (the file is left as it is; repair or move it away, then refresh)",
            self.path.display()
        ))
    }
}
