//! A durable JSON document: one JSON object in one file, rewritten whole and atomically.
//!
//! * **Atomic rewrite.** Every save goes through
//!   [`replace_file`](leasehold::patterns::durable::replace_file) (temp file in the same
//!   directory → write → fsync → rename → fsync directory), so a crash at any point leaves
//!   the old or the new document, never a torn one, and a save that returned is durable.
//! * **Never overwrite what does not parse.** [`JsonDocument::load`] reports an unparsable
//!   document with the reason; nothing here writes unless a load succeeded first, so the
//!   file stays byte-for-byte as it was for a human to repair.
//! * **Unknown fields survive.** Loads and saves work on the whole JSON object, so fields
//!   written by a newer version are carried through a rewrite by an older one.
//!
//! The few file operations go through [`DocumentFiles`], so tests can fail each step.
//!
//! [`Document`] is the general form for a file of the user's own (any content, JSON or not):
//! lock-free whole-version reads, updates under a sibling lease that never lose another
//! process's change, compare-and-set, and a watch of new versions.

mod shared;

#[cfg(feature = "tokio")]
pub use shared::AsyncWatch;
pub use shared::{
    BadVersion, Document, DocumentError, DocumentOptions, Edit, Snapshot, Version, Watch,
};

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::read::read_regular;
use leasehold::patterns::authority::StoreFailure;
use leasehold::patterns::durable::{Step, create_dirs, replace_file_observed};
use serde_json::{Map, Value};

/// The file operations a [`JsonDocument`] needs: a narrow seam for fault injection.
pub trait DocumentFiles: Send + Sync {
    /// The file's bytes, or `None` when it does not exist.
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>>;
    /// Durably and atomically replaces the file with `bytes`.
    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// [`replace`](Self::replace), calling `check` once the new version is staged beside the
    /// file (created, written, synced) and before it is renamed into place; an error from
    /// `check` abandons the write (the temporary removed, the file untouched). A store
    /// passes its lease's verification: a directory above the file moved away before that
    /// moment fails the write, and one moved after it fails the rename (the staged file is
    /// in the directory that moved), so the write never lands in what then stands at the
    /// path. The default calls `check`, then `replace`.
    fn replace_checked(
        &self,
        path: &Path,
        bytes: &[u8],
        check: &mut dyn FnMut() -> io::Result<()>,
    ) -> io::Result<()> {
        check()?;
        self.replace(path, bytes)
    }
}

/// The real file system, with [`replace_file`](leasehold::patterns::durable::replace_file) for writes.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFiles;

/// The largest document read: a registry is a few kilobytes; anything near this is not one
/// (a link to `/dev/zero` would otherwise be read until memory runs out).
pub const MAX_DOCUMENT_BYTES: u64 = 16 << 20;

impl DocumentFiles for RealFiles {
    /// Opens the document as carefully as a lock file: a final symlink is never followed
    /// (a foreign document must not be served as ours), anything but a regular file is
    /// refused before it is opened (a FIFO would hang the reader while it holds the lease),
    /// the open never blocks, and at most [`MAX_DOCUMENT_BYTES`] are read.
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        read_regular(path, MAX_DOCUMENT_BYTES)
    }

    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.replace_checked(path, bytes, &mut || Ok(()))
    }

    fn replace_checked(
        &self,
        path: &Path,
        bytes: &[u8],
        check: &mut dyn FnMut() -> io::Result<()>,
    ) -> io::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            create_dirs(dir)?;
        }
        replace_file_observed(path, bytes, &mut |step, _| match step {
            Step::Synced => check(),
            _ => Ok(()),
        })
    }
}

/// One JSON object stored in one file.
///
/// ```
/// use leasehold_stores::document::JsonDocument;
///
/// let dir = tempfile::tempdir().expect("a temporary directory");
/// let doc = JsonDocument::new(dir.path().join("doc.json"));
/// let mut map = doc.load().unwrap(); // a missing file is an empty object
/// map.insert("version".into(), 1.into());
/// doc.save(&map).unwrap(); // temp file, fsync, rename, fsync of the directory
/// std::fs::write(doc.path(), "{ torn").unwrap();
/// let failure = doc.load().unwrap_err(); // names the file; the file is left as it is
/// assert!(failure.to_string().contains("does not parse"));
/// assert_eq!(std::fs::read_to_string(doc.path()).unwrap(), "{ torn");
/// ```
#[derive(Clone)]
pub struct JsonDocument {
    path: PathBuf,
    files: Arc<dyn DocumentFiles>,
    shared: bool,
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
            shared: false,
        }
    }

    /// With `true`, the document and its directory may belong to another user or be
    /// group/other-writable ([`leasehold::LeaseOptions::allow_shared_state`]); by default
    /// such a document is refused at load, since whoever may replace it decides what it
    /// says (the rule [`leasehold::check_trusted`] states).
    pub fn allow_shared_state(mut self, allow: bool) -> JsonDocument {
        self.shared = allow;
        self
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the document: a missing file is an empty object; anything that is not a JSON
    /// object is a failure naming the file and the reason (the file is not touched). Unless
    /// shared state is allowed, a document or directory another user could have prepared
    /// is a failure too.
    pub fn load(&self) -> Result<Map<String, Value>, StoreFailure> {
        if !self.shared {
            let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty());
            for p in dir.into_iter().chain([self.path.as_path()]) {
                leasehold::check_trusted(p)?;
            }
        }
        let bytes = match self.files.read(&self.path) {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(Map::new()),
            Err(e) => return Err(self.failure("cannot read", e)),
        };
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(_) => Err(self.failure("does not parse", "not a JSON object")),
            Err(e) => Err(self.failure("does not parse", e)),
        }
    }

    /// Replaces the document with `doc`, durably (returns once it would survive a crash).
    pub fn save(&self, doc: &Map<String, Value>) -> Result<(), StoreFailure> {
        self.save_checked(doc, &mut || Ok(()))
    }

    /// [`save`](Self::save), calling `check` once the new version is staged and before it is
    /// put in place ([`DocumentFiles::replace_checked`]); its error abandons the write and is
    /// returned as it is.
    pub fn save_checked(
        &self,
        doc: &Map<String, Value>,
        check: &mut dyn FnMut() -> Result<(), StoreFailure>,
    ) -> Result<(), StoreFailure> {
        let mut bytes =
            serde_json::to_vec_pretty(doc).map_err(|e| self.failure("cannot encode", e))?;
        bytes.push(b'\n');
        let mut refused = None;
        let written = self.files.replace_checked(&self.path, &bytes, &mut || {
            check().map_err(|e| {
                let text = e.to_string();
                refused = Some(e);
                io::Error::other(text)
            })
        });
        match (written, refused) {
            (Ok(()), _) => Ok(()),
            (Err(_), Some(refused)) => Err(refused),
            (Err(e), None) => Err(self.failure("cannot write", e)),
        }
    }

    /// The failure of `op` on this document because of `source`: it names the file and
    /// says what to do.
    pub fn failure(
        &self,
        op: impl Into<std::borrow::Cow<'static, str>>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> StoreFailure {
        StoreFailure::new(self.path.display().to_string(), op, source)
            .with_advice(" (the file is left as it is; repair or move it away, then refresh)")
    }
}
