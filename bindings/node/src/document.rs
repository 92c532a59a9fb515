//! The stores' `Document` behind `Document` (`index.js`): a file of the user's own that
//! several processes read and update without losing a change. The protocol — the lease, the
//! re-read under it, the durable write, the version — is the library's; an update is split
//! into `beginDocument` (lease + read) and `NativeEdit.commit`/`abort` so that the caller's
//! function, which may be async, runs in JavaScript while the lease is held. The lease wait
//! is driven by tokio's reactor (`Document::begin_async`), the reads and fsyncs run on its
//! blocking pool (`offload`); none of it on the JavaScript thread or libuv's pool.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::patterns::offload;
use leasehold_stores::document::{Document, DocumentError, DocumentOptions, Edit, Snapshot};
use napi::bindgen_prelude::Buffer;
use napi::threadsafe_function::{
    ErrorStrategy, ThreadSafeCallContext, ThreadsafeFunction, ThreadsafeFunctionCallMode,
};
use napi::{Either, Env, JsFunction, JsUnknown};
use napi_derive::napi;

use crate::errors::{self, Failure};
use crate::lease::{Waiter, budget, shared_mount};

/// `Document.open`'s options, as the native side takes them.
#[napi(object)]
#[derive(Clone, Default)]
pub struct NativeDocumentOptions {
    /// The lock file (default `FILE.lock` beside the file).
    pub lock_path: Option<String>,
    /// Whether the content is JSON (checked before and after an update).
    pub json: Option<bool>,
    /// Accept a lock file another user owns or may write.
    pub allow_shared_state: Option<bool>,
    /// `onSharedMount: { record: { ttlMs } }`'s TTL: `DocumentOptions::on_shared_mount`
    /// (`lease::shared_mount`; absent: refuse, the default).
    pub record_ttl_ms: Option<f64>,
}

/// One whole version: its bytes and its version (32 hex digits).
#[napi(object)]
pub struct NativeSnapshot {
    /// The content, exactly as stored.
    pub content: Buffer,
    /// The version: the first 128 bits of the content's SHA-256, in hex.
    pub version: String,
}

fn snapshot(s: Snapshot) -> NativeSnapshot {
    NativeSnapshot {
        content: s.content.into(),
        version: s.version.to_string(),
    }
}

/// A document error as the surface's code: a lease error through the one table
/// (`errors::lease`); too large or not parsable `INVALID_INPUT`; a lost `updateIf`
/// `CONFLICT`; anything else `IO`.
fn failure(e: &DocumentError) -> Failure {
    let code = match e {
        DocumentError::Lease(inner) => return errors::lease(inner),
        DocumentError::TooLarge { .. }
        | DocumentError::NotParsable { .. }
        | DocumentError::InvalidContent { .. } => "INVALID_INPUT",
        DocumentError::Conflict { .. } => "CONFLICT",
        _ => "IO",
    };
    Failure {
        code: code.into(),
        message: e.to_string(),
        pids: None,
    }
}

/// The document at `path`; a record TTL that is no positive number of milliseconds is
/// refused, naming the option.
fn document(path: String, options: NativeDocumentOptions) -> Result<Document, Failure> {
    let mut o = DocumentOptions::new()
        .json(options.json == Some(true))
        .allow_shared_state(options.allow_shared_state == Some(true))
        .on_shared_mount(shared_mount(options.record_ttl_ms)?);
    if let Some(lock) = options.lock_path {
        o = o.lock_path(lock);
    }
    Ok(Document::open(PathBuf::from(path), o))
}

/// A document (nothing is opened until it is read or updated).
#[napi]
pub struct NativeDocument {
    doc: Document,
}

/// The document at `path`.
#[napi]
pub fn open_document(
    path: String,
    options: Option<NativeDocumentOptions>,
) -> Either<NativeDocument, Failure> {
    match document(path, options.unwrap_or_default()) {
        Ok(doc) => Either::A(NativeDocument { doc }),
        Err(f) => Either::B(f),
    }
}

#[napi]
impl NativeDocument {
    /// The lock file writers lease.
    #[napi(getter)]
    pub fn lock_path(&self) -> String {
        self.doc.lock_path().to_string_lossy().into_owned()
    }

    /// The current version, lock-free (one open and read of a small file): `null` without a
    /// document.
    #[napi]
    pub fn read(&self) -> Either<Option<NativeSnapshot>, Failure> {
        match self.doc.read() {
            Ok(s) => Either::A(s.map(snapshot)),
            Err(e) => Either::B(failure(&e)),
        }
    }

    /// Calls `listener(snapshot)` (or `listener(failure)`) for each new version, from a
    /// thread of its own that never keeps the event loop alive; `stop()` on the answer ends
    /// it (within 200 ms).
    #[napi]
    pub fn watch(&self, env: Env, listener: JsFunction) -> napi::Result<NativeWatch> {
        let mut tsfn: ThreadsafeFunction<Either<Snapshot, Failure>, ErrorStrategy::Fatal> =
            listener.create_threadsafe_function(
                0,
                |ctx: ThreadSafeCallContext<Either<Snapshot, Failure>>| {
                    let env = ctx.env;
                    let value: JsUnknown = match ctx.value {
                        Either::A(s) => {
                            let mut o = env.create_object()?;
                            o.set_named_property(
                                "content",
                                env.create_buffer_with_data(s.content)?.into_raw(),
                            )?;
                            o.set_named_property(
                                "version",
                                env.create_string(&s.version.to_string())?,
                            )?;
                            o.into_unknown()
                        }
                        Either::B(f) => {
                            let mut o = env.create_object()?;
                            o.set_named_property("code", env.create_string(&f.code)?)?;
                            o.set_named_property("message", env.create_string(&f.message)?)?;
                            o.into_unknown()
                        }
                    };
                    Ok(vec![value])
                },
            )?;
        // A watch alone never keeps the process running.
        tsfn.unref(&env)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let mut watch = match self.doc.watch() {
            Ok(w) => w,
            Err(e) => {
                let f = failure(&e);
                return Err(napi::Error::from_reason(format!(
                    "{}: {}",
                    f.code, f.message
                )));
            }
        };
        std::thread::Builder::new()
            .name("leasehold-watch".into())
            .spawn(move || {
                while !stopped.load(Ordering::SeqCst) {
                    let event = match watch.next_timeout(Duration::from_millis(200)) {
                        Ok(None) => continue,
                        Ok(Some(s)) => Either::A(s),
                        Err(e) => Either::B(failure(&e)),
                    };
                    if stopped.load(Ordering::SeqCst) {
                        break;
                    }
                    let status = tsfn.call(event, ThreadsafeFunctionCallMode::Blocking);
                    if status != napi::Status::Ok {
                        break; // the environment is going away
                    }
                }
            })
            .map_err(|e| napi::Error::from_reason(format!("cannot start the watch thread: {e}")))?;
        Ok(NativeWatch { stop })
    }
}

/// A running watch.
#[napi]
pub struct NativeWatch {
    stop: Arc<AtomicBool>,
}

#[napi]
impl NativeWatch {
    /// Ends the watch: no listener call starts after this returns.
    #[napi]
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// An update in progress: the lease is held until `commit` or `abort` (or garbage
/// collection, which aborts).
#[napi]
pub struct NativeEdit {
    edit: Arc<Mutex<Option<Edit>>>,
    current: Option<Snapshot>,
}

#[napi]
impl NativeEdit {
    /// The content read under the lease (`null`: no document).
    #[napi(getter)]
    pub fn current(&self) -> Option<Buffer> {
        self.current.as_ref().map(|s| s.content.clone().into())
    }

    /// Its version (`null`: no document).
    #[napi(getter)]
    pub fn version(&self) -> Option<String> {
        self.current.as_ref().map(|s| s.version.to_string())
    }

    /// Writes `content` as the new version (durably, on the blocking pool) and releases the
    /// lease.
    #[napi]
    pub async fn commit(&self, content: Buffer) -> Either<NativeSnapshot, Failure> {
        let content: Vec<u8> = content.to_vec();
        let taken = self
            .edit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(edit) = taken else {
            return Either::B(Failure::invalid(
                "this edit was already committed or aborted",
            ));
        };
        match offload(move || edit.commit(content)).await {
            Ok(s) => Either::A(snapshot(s)),
            Err(e) => Either::B(failure(&e)),
        }
    }

    /// Writes nothing and releases the lease (nothing if already done).
    #[napi]
    pub fn abort(&self) {
        let taken = self
            .edit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(edit) = taken {
            edit.abort();
        }
    }
}

#[napi]
impl Waiter {
    /// Starts an update of the document at `path`: waits for its lease within `timeoutMs`
    /// (cancelled by this waiter's signal) and reads the durable content under it. With
    /// `expected`, a `CONFLICT` failure unless the document is at that version.
    #[napi]
    pub async fn begin_document(
        &self,
        path: String,
        options: NativeDocumentOptions,
        timeout_ms: Option<f64>,
        expected: Option<String>,
    ) -> Either<NativeEdit, Failure> {
        let budget = match budget(timeout_ms, self.token()) {
            Ok(b) => b,
            Err(f) => return Either::B(f),
        };
        let expected = match expected.map(|v| v.parse()).transpose() {
            Ok(v) => v,
            Err(e) => return Either::B(Failure::invalid(e)),
        };
        let doc = match document(path, options) {
            Ok(doc) => doc,
            Err(f) => return Either::B(f),
        };
        // The wait on the reactor (no thread per waiter); the read on the blocking pool.
        let began = async {
            let edit = doc.begin_async(&budget).await?;
            if let Some(v) = expected {
                edit.expect(v)?;
            }
            Ok::<_, DocumentError>(edit)
        }
        .await;
        match began {
            Ok(edit) => {
                let current = edit.current().cloned();
                Either::A(NativeEdit {
                    edit: Arc::new(Mutex::new(Some(edit))),
                    current,
                })
            }
            Err(e) => Either::B(failure(&e)),
        }
    }
}
