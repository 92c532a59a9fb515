//! Fault injection in durable writes: every system call of the registry's durable rewrite
//! (open, write, short write, fsync, rename, directory fsync) fails in turn with ENOSPC, EIO,
//! EDQUOT and EROFS, through the real `replace_file` sequence with a faulty `DurableIo`.
//!
//! After each fault: the authority is `StorageFailed` with a reason naming the file and the
//! errno; the previous document is byte-for-byte intact (except after a failed directory
//! fsync, where the rename already happened: then the new, unacknowledged document is in
//! place, whole); nothing acknowledged is lost; nothing more is written while failed; and a
//! `refresh` on a healthy disk recovers, after which writes succeed again.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use leasehold::Budget;
use leasehold::patterns::authority::State;
use leasehold::patterns::durable::{DurableIo, replace_file_with};
use leasehold_stores::document::{DocumentFiles, RealFiles};
use leasehold_stores::registry::{Registry, RegistryError, RegistryPaths};

/// The system call a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Open,
    Write,
    /// The first write stores half the buffer, the retry fails.
    ShortWrite,
    Fsync,
    Rename,
    DirFsync,
}

const CALLS: [Call; 6] = [
    Call::Open,
    Call::Write,
    Call::ShortWrite,
    Call::Fsync,
    Call::Rename,
    Call::DirFsync,
];

const ENOSPC: i32 = 28;
const EIO: i32 = 5;
const EDQUOT: i32 = 122;
const EROFS: i32 = 30;
const ERRNOS: [i32; 4] = [ENOSPC, EIO, EDQUOT, EROFS];

/// Document operations whose durable rewrite fails `call` with `errno` while armed.
#[derive(Default)]
struct Faulty {
    armed: Mutex<Option<(Call, i32)>>,
    /// Faults actually injected.
    injected: Mutex<u32>,
    /// Rewrites attempted (armed or not).
    rewrites: Mutex<u32>,
}

struct Io<'a> {
    fault: Option<(Call, i32)>,
    injected: &'a Mutex<u32>,
    wrote_short: bool,
}

impl Io<'_> {
    fn fail(&mut self, call: Call) -> io::Result<()> {
        match self.fault {
            Some((c, errno)) if c == call => {
                *self.injected.lock().unwrap() += 1;
                Err(io::Error::from_raw_os_error(errno))
            }
            _ => Ok(()),
        }
    }
}

impl DurableIo for Io<'_> {
    fn create(&mut self, tmp: &Path) -> io::Result<File> {
        self.fail(Call::Open)?;
        leasehold::patterns::durable::RealIo.create(tmp)
    }
    fn write(&mut self, file: &mut File, buf: &[u8]) -> io::Result<usize> {
        use std::io::Write;
        if matches!(self.fault, Some((Call::ShortWrite, _))) && !self.wrote_short {
            self.wrote_short = true;
            return file.write(&buf[..buf.len() / 2]);
        }
        self.fail(Call::Write)?;
        self.fail(Call::ShortWrite)?;
        file.write(buf)
    }
    fn sync(&mut self, file: &File) -> io::Result<()> {
        self.fail(Call::Fsync)?;
        file.sync_all()
    }
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        self.fail(Call::Rename)?;
        std::fs::rename(from, to)
    }
    fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        self.fail(Call::DirFsync)?;
        File::open(dir)?.sync_all()
    }
}

impl DocumentFiles for Faulty {
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        RealFiles.read(path)
    }
    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        *self.rewrites.lock().unwrap() += 1;
        let mut io = Io {
            fault: *self.armed.lock().unwrap(),
            injected: &self.injected,
            wrote_short: false,
        };
        replace_file_with(path, bytes, &mut io, &mut |_, _| Ok(()))
    }
}

fn dir(base: &Path, name: &str) -> PathBuf {
    let p = base.join(name);
    std::fs::create_dir_all(&p).unwrap();
    p.canonicalize().unwrap()
}

fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp."))
        .collect()
}

#[test]
fn every_call_failing_with_every_errno_fails_closed_keeps_the_document_and_recovers() {
    let mut pairs = 0;
    let faulty = Arc::new(Faulty::default());
    for call in CALLS {
        for errno in ERRNOS {
            pairs += 1;
            let case = format!("{call:?} × errno {errno}");
            let tmp = tempfile::tempdir().unwrap();
            let (primary, kept, lost, later) = (
                dir(tmp.path(), "p"),
                dir(tmp.path(), "kept"),
                dir(tmp.path(), "faulted"),
                dir(tmp.path(), "later"),
            );
            let paths = RegistryPaths::in_home(&tmp.path().join("home"), None);
            let registry = Registry::with_files(paths.clone(), faulty.clone(), None);
            registry.acquire(&Budget::no_wait()).unwrap();
            registry.add(&primary, &kept).unwrap(); // acknowledged
            let before = std::fs::read(&paths.document).unwrap();

            *faulty.armed.lock().unwrap() = Some((call, errno));
            let injected_before = *faulty.injected.lock().unwrap();
            let err = registry.add(&primary, &lost).unwrap_err();
            assert_eq!(
                *faulty.injected.lock().unwrap(),
                injected_before + 1,
                "{case}: exactly one fault injected"
            );
            let RegistryError::StorageFailed { reason } = &err else {
                panic!("{case}: {err:?}");
            };
            let os_error = format!("os error {errno}");
            assert!(reason.contains(&os_error), "{case}: {reason}");
            assert!(
                reason.contains(&paths.document.display().to_string()),
                "{case}: {reason}"
            );
            assert!(
                matches!(registry.state(), State::StorageFailed { reason } if reason.contains(&os_error)),
                "{case}"
            );
            assert!(registry.scope().is_empty(), "{case}: fail closed");
            assert!(!registry.grants(&primary, &kept), "{case}: fail closed");

            let after = std::fs::read(&paths.document).unwrap();
            if call == Call::DirFsync {
                // The rename was done: the new document is in place, whole, unacknowledged.
                let v: serde_json::Value = serde_json::from_slice(&after).expect("whole");
                let roots = v["workspaces"][primary.to_str().unwrap()]["roots"].clone();
                assert_eq!(roots, serde_json::json!([kept, lost]), "{case}");
            } else {
                assert_eq!(after, before, "{case}: previous document byte-for-byte");
            }
            let docs = paths.document.parent().unwrap();
            assert_eq!(temporaries(docs), Vec::<String>::new(), "{case}");

            // While failed, nothing is written (not even attempted).
            let rewrites = *faulty.rewrites.lock().unwrap();
            assert!(matches!(
                registry.add(&primary, &later),
                Err(RegistryError::StorageFailed { .. })
            ));
            assert_eq!(*faulty.rewrites.lock().unwrap(), rewrites, "{case}");

            // A healthy disk again: refresh recovers with everything acknowledged.
            *faulty.armed.lock().unwrap() = None;
            registry.refresh().unwrap();
            assert_eq!(registry.state(), State::Active, "{case}");
            let roots = registry.scope().get(&primary).cloned().unwrap_or_default();
            assert!(roots.contains(&kept), "{case}: acknowledged add kept");
            registry.add(&primary, &later).unwrap();
            assert!(registry.grants(&primary, &later), "{case}");
            registry.teardown();
        }
    }
    assert_eq!(pairs, CALLS.len() * ERRNOS.len());
    assert_eq!(
        *faulty.injected.lock().unwrap() as usize,
        pairs,
        "one fault per (call × errno) pair"
    );
    println!("faults injected: {pairs}");
}
