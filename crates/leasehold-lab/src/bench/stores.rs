//! Store figures: what the stores add on top of the durable system calls they must make.
//!
//! * **Registry mutation** (`add`/`remove` through an active [`Registry`]) next to a raw
//!   durable-rewrite loop of a document of the same size: temp file → write → fsync → rename
//!   → fsync directory, issued directly (the directory kept open).
//! * **Document update** (`Document::update_json`, one writer: the lease taken per update,
//!   leftovers collected, the content re-read, the lease verified before the rename) next to
//!   the same raw durable rewrite of a document of the same size: the first row of the
//!   document scenario (`document.rs`), which measures contended updates and the Node and
//!   Python ways beside it.
//! * **Session append** ([`SessionWriter::append_json`](leasehold_stores::session::SessionWriter::append_json)), fsync per record and batched, next
//!   to raw `write` + `fdatasync` on an `O_APPEND` descriptor with records of the same size.
//! * **Keyed lease cost** ([`KeyedLeases::try_acquire`] + release) with 10 and with 100,000
//!   lock files in the namespace directory, keys drawn pseudo-randomly among them, next to a
//!   plain lease on one path and (100,000) to a plain lease on the same files.
//! * **A collection beside the other verbs** (POSIX): the longest wait of `paths`, looped by
//!   another process, during a `gc` of 100,000 lock files.
//!
//! Each durable unit (a mutation; a record and its fsync; a batch and its sync) is timed
//! alone, interleaved one by one with its floor (see `micro::measure_batches`), so a noisy
//! neighbour hurts both alike and an fsync stalled by other I/O on the machine spoils one
//! sample, not the figure; a throughput is the reciprocal of the median time per unit.

#[cfg(unix)]
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use leasehold::patterns::append::Durability;
use leasehold::patterns::keyed::{KeyedLeases, lock_name};
use leasehold::{Budget, Lease};
use leasehold_stores::document::{Document, DocumentOptions};
use leasehold_stores::registry::{Registry, RegistryPaths};
use leasehold_stores::session::{SessionId, SessionStore};
#[cfg(unix)]
use rustix::fs::{CWD, Mode, OFlags};

use super::micro::{Op, measure_batches};
#[cfg(unix)]
use super::report::errno_fail;
use super::report::{Plan, Row, Unit, io_fail, median};
use crate::exit::Failure;

/// Records per sync in the batched session figure.
const SESSION_BATCH: usize = 64;
/// Keyed-lease namespace directory used by the benchmark.
const NAMESPACE: &str = "keys-v1";
/// Setup of the many-IDs namespace stops creating lock files after this long (a slow file
/// system gets a smaller, stated count rather than an unbounded benchmark).
const KEY_SETUP_LIMIT: Duration = Duration::from_secs(20);

/// All store figures.
pub(super) fn run(dir: &Path, plan: &Plan) -> Result<Vec<Row>, Failure> {
    let mut rows = vec![registry(dir, plan)?];
    rows.extend(session(dir, plan)?);
    rows.extend(keyed(dir, plan)?);
    // Windows keyed leases keep no lock files: nothing for a collection to remove.
    #[cfg(unix)]
    rows.extend(gc_beside_verbs(dir, plan)?);
    Ok(rows)
}

/// A throughput row: `ns_lib`/`ns_floor` are per-round ns/op; `per_op` items per op.
fn throughput_row(
    key: &'static str,
    name: String,
    ns_lib: &[f64],
    ns_floor: &[f64],
    per_op: f64,
    floor_name: &'static str,
) -> Row {
    let rate = |ns: &[f64]| per_op * 1e9 / median(ns).max(1.0);
    let (lib, floor) = (rate(ns_lib), rate(ns_floor));
    let ratio = lib / floor.max(f64::MIN_POSITIVE);
    Row {
        key,
        name,
        unit: Unit::PerSecond,
        median: lib,
        dist: None,
        floor: Some((floor, floor_name)),
        floor_dist: None,
        target: Some(("≥ 0.9× floor".into(), ratio >= 0.9)),
        samples: ns_lib.len(),
    }
}

// ---------------------------------------------------------------------------------------
// Registry
// ---------------------------------------------------------------------------------------

/// The raw durable rewrite: the system calls `replace_file` makes, issued directly, with the
/// directory descriptor kept open across rewrites (the cheapest correct loop). On Windows:
/// create, write, flush (`FlushFileBuffers`), rename; no directory sync (NTFS journals the
/// entry, and `replace_file` makes none there either).
struct RawRewrite {
    target: PathBuf,
    tmp: PathBuf,
    #[cfg(unix)]
    dir: OwnedFd,
}

#[cfg(windows)]
impl RawRewrite {
    fn new(dir: &Path, name: &str) -> Result<RawRewrite, Failure> {
        Ok(RawRewrite {
            target: dir.join(name),
            tmp: dir.join(format!(".{name}.tmp")),
        })
    }

    fn rewrite(&self, bytes: &[u8]) -> Result<(), Failure> {
        use std::io::Write;
        let mut f = std::fs::File::create_new(&self.tmp).map_err(io_fail("create temp file"))?;
        f.write_all(bytes).map_err(io_fail("write temp file"))?;
        f.sync_all().map_err(io_fail("flush temp file"))?;
        drop(f);
        std::fs::rename(&self.tmp, &self.target).map_err(io_fail("rename"))
    }
}

#[cfg(unix)]
impl RawRewrite {
    fn new(dir: &Path, name: &str) -> Result<RawRewrite, Failure> {
        let fd = rustix::fs::openat(
            CWD,
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno_fail("open directory"))?;
        Ok(RawRewrite {
            target: dir.join(name),
            tmp: dir.join(format!(".{name}.tmp")),
            dir: fd,
        })
    }

    fn rewrite(&self, bytes: &[u8]) -> Result<(), Failure> {
        let fd = rustix::fs::openat(
            CWD,
            &self.tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(errno_fail("create temp file"))?;
        let mut rest = bytes;
        while !rest.is_empty() {
            let n = rustix::io::write(&fd, rest).map_err(errno_fail("write temp file"))?;
            rest = rest.get(n..).unwrap_or_default();
        }
        rustix::fs::fsync(&fd).map_err(errno_fail("fsync temp file"))?;
        drop(fd);
        rustix::fs::rename(&self.tmp, &self.target).map_err(errno_fail("rename"))?;
        rustix::fs::fsync(&self.dir).map_err(errno_fail("fsync directory"))
    }
}

fn registry_err(e: leasehold_stores::registry::RegistryError) -> Failure {
    Failure::failed(format!("bench: registry: {e}"))
}

/// Registry mutations alternate `add(p, extra)` / `remove(p, extra)` on a registry that
/// already lists 8 roots; the floor rewrites the two resulting documents alternately.
fn registry(dir: &Path, plan: &Plan) -> Result<Row, Failure> {
    const ROOTS: usize = 8;
    let base = dir.join("registry");
    let roots = base.join("roots");
    let mkdir = |p: &Path| std::fs::create_dir_all(p).map_err(io_fail("create directory"));
    let primary = roots.join("primary");
    mkdir(&primary)?;
    let paths = RegistryPaths {
        document: base.join("multi_root_workspace.json"),
        lease: base.join("multi_root_workspace.lock"),
    };
    let reg = Registry::new(paths.clone());
    reg.acquire(&Budget::no_wait()).map_err(registry_err)?;
    for i in 0..ROOTS {
        let r = roots.join(format!("root-{i}"));
        mkdir(&r)?;
        reg.add(&primary, &r).map_err(registry_err)?;
    }
    let extra = roots.join("extra");
    mkdir(&extra)?;
    let read = || std::fs::read(&paths.document).map_err(io_fail("read registry document"));
    let without = read()?;
    reg.add(&primary, &extra).map_err(registry_err)?;
    let with = read()?;
    reg.remove(&primary, &extra).map_err(registry_err)?;
    let raw = RawRewrite::new(&base, "raw.json")?;

    let (mut n_lib, mut n_raw) = (0usize, 0usize);
    let mut ops: Vec<Op<'_>> = vec![
        Box::new(|| {
            n_lib += 1;
            if n_lib % 2 == 1 {
                reg.add(&primary, &extra)
            } else {
                reg.remove(&primary, &extra)
            }
            .map_err(registry_err)
        }),
        Box::new(|| {
            n_raw += 1;
            raw.rewrite(if n_raw % 2 == 1 { &with } else { &without })
        }),
    ];
    let t = measure_batches(&mut ops, plan.durable_samples, 1)?;
    drop(ops);
    reg.teardown();
    // A mutation makes 25 calls beyond the floor's 6, under the same two fsyncs
    // (BENCHMARKS.md, "Stores").
    Ok(throughput_row(
        "registry_mutation",
        format!(
            "registry mutation (add/remove, {}-byte document; mutations/s)",
            with.len()
        ),
        &t[0],
        &t[1],
        1.0,
        if cfg!(unix) {
            "raw temp+fsync+rename+fsync dir"
        } else {
            "raw temp+flush+rename"
        },
    ))
}

// ---------------------------------------------------------------------------------------
// Document
// ---------------------------------------------------------------------------------------

/// The benchmark's settings document (about 160 bytes as `update_json` writes it).
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Settings {
    pub count: u64,
    pub theme: String,
    pub recent: Vec<String>,
}

/// One update of the settings: what every way does to it.
pub(super) fn bump(s: &mut Settings) {
    s.count += 1;
    s.theme = "dark".into();
    s.recent = (0..4).map(|i| format!("/home/me/project-{i}")).collect();
}

/// Uncontended `Document::update_json` of a small JSON document (a counter incremented; one
/// writer), next to the raw durable rewrite of a document of the same size: what the lease,
/// the collection of leftovers, the re-read and the verification before the rename add.
pub(super) fn document(dir: &Path, plan: &Plan) -> Result<Row, Failure> {
    let base = dir.join("document");
    std::fs::create_dir_all(&base).map_err(io_fail("create directory"))?;
    let doc = Document::open(
        base.join("settings.json"),
        DocumentOptions::new().json(true),
    );
    let failed = |e: leasehold_stores::document::DocumentError| {
        Failure::failed(format!("bench: document: {e}"))
    };
    let fill = |s: &mut Settings| bump(s);
    let wait = Budget::timeout(Duration::from_secs(10));
    doc.update_json(&wait, fill).map_err(failed)?;
    let sample = std::fs::read(doc.path()).map_err(io_fail("read document"))?;
    let raw = RawRewrite::new(&base, "raw.json")?;
    let mut ops: Vec<Op<'_>> = vec![
        Box::new(|| doc.update_json(&wait, fill).map(drop).map_err(failed)),
        Box::new(|| raw.rewrite(&sample)),
    ];
    let t = measure_batches(&mut ops, plan.durable_samples, 1)?;
    drop(ops);
    Ok(throughput_row(
        "document_update",
        format!(
            "Document::update_json, one writer ({}-byte document; updates/s)",
            sample.len()
        ),
        &t[0],
        &t[1],
        1.0,
        if cfg!(unix) {
            "raw temp+fsync+rename+fsync dir"
        } else {
            "raw temp+flush+rename"
        },
    ))
}

// ---------------------------------------------------------------------------------------
// Session log
// ---------------------------------------------------------------------------------------

fn session_err(e: leasehold_stores::session::SessionError) -> Failure {
    Failure::failed(format!("bench: session: {e}"))
}

/// One record of the session figures (a typical small event; ~100 bytes with its newline).
fn record() -> String {
    r#"{"type":"message","role":"assistant","seq":12345,"text":"the quick brown fox jumps over"}"#
        .to_string()
}

/// The raw floor's log: `O_WRONLY|O_APPEND|O_CREAT`, one `write` per record (Windows: an
/// append-only handle, `WriteFile` per record).
struct RawLog {
    #[cfg(unix)]
    fd: OwnedFd,
    #[cfg(windows)]
    file: std::fs::File,
}

impl RawLog {
    #[cfg(unix)]
    fn open(path: &Path) -> Result<RawLog, Failure> {
        rustix::fs::openat(
            CWD,
            path,
            OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map(|fd| RawLog { fd })
        .map_err(errno_fail("open raw log"))
    }

    #[cfg(windows)]
    fn open(path: &Path) -> Result<RawLog, Failure> {
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .map(|file| RawLog { file })
            .map_err(io_fail("open raw log"))
    }

    /// One write of `line`; a short write is a failure.
    fn write(&self, line: &[u8]) -> Result<(), Failure> {
        #[cfg(unix)]
        let n = rustix::io::write(&self.fd, line).map_err(errno_fail("write raw log"))?;
        #[cfg(windows)]
        let n = std::io::Write::write(&mut &self.file, line).map_err(io_fail("write raw log"))?;
        if n != line.len() {
            return Err(Failure::failed("bench: short write to the raw log"));
        }
        Ok(())
    }

    /// `fdatasync` (Windows: `FlushFileBuffers`, what `sync_data` is there).
    fn sync(&self) -> Result<(), Failure> {
        #[cfg(unix)]
        return rustix::fs::fdatasync(&self.fd).map_err(errno_fail("fdatasync raw log"));
        #[cfg(windows)]
        return self.file.sync_data().map_err(io_fail("flush raw log"));
    }
}

/// Session appends with `fsync` per record and batched (`sync` every [`SESSION_BATCH`]
/// records), each next to raw `write`(+`fdatasync`) of the same record.
fn session(dir: &Path, plan: &Plan) -> Result<Vec<Row>, Failure> {
    let base = dir.join("sessions");
    let rec = record();
    let mut line = rec.clone().into_bytes();
    line.push(b'\n');
    let id = |s: &str| SessionId::new(s).map_err(|e| session_err(e.into()));
    let every = SessionStore::new(&base);
    let batched = SessionStore::new(&base).with_durability(Durability::Batch);
    let mut w_every = every.open_writer(&id("every")?).map_err(session_err)?;
    let mut w_batch = batched.open_writer(&id("batched")?).map_err(session_err)?;
    let raw_every = RawLog::open(&dir.join("raw-every.jsonl"))?;
    let raw_batch = RawLog::open(&dir.join("raw-batched.jsonl"))?;
    let mut ops: Vec<Op<'_>> = vec![
        Box::new(|| w_every.append_json(&rec).map_err(session_err)),
        Box::new(|| {
            raw_every.write(&line)?;
            raw_every.sync()
        }),
    ];
    let t_every = measure_batches(&mut ops, plan.durable_samples, 1)?;
    drop(ops);
    let mut ops: Vec<Op<'_>> = vec![
        Box::new(|| {
            // The batch API: one lease check, one write and one fdatasync per batch.
            let batch = std::iter::repeat_n(rec.as_str(), SESSION_BATCH);
            w_batch.append_batch(batch).map_err(session_err).map(drop)
        }),
        Box::new(|| {
            for _ in 0..SESSION_BATCH {
                raw_batch.write(&line)?;
            }
            raw_batch.sync()
        }),
    ];
    let t_batch = measure_batches(&mut ops, plan.durable_samples / 2 + 1, 1)?;
    drop(ops);
    w_every.release();
    w_batch.release();
    Ok(vec![
        throughput_row(
            "session_append_fsync",
            format!(
                "session append, fsync per record ({}-byte records; records/s)",
                line.len()
            ),
            &t_every[0],
            &t_every[1],
            1.0,
            "raw write+fdatasync",
        ),
        throughput_row(
            "session_append_batched",
            format!("session append, batched: append_batch of {SESSION_BATCH} records (records/s)"),
            &t_batch[0],
            &t_batch[1],
            SESSION_BATCH as f64,
            "raw writes, one fdatasync per batch",
        ),
    ])
}

// ---------------------------------------------------------------------------------------
// Keyed leases
// ---------------------------------------------------------------------------------------

fn key_err(e: leasehold::patterns::keyed::KeyError) -> Failure {
    Failure::failed(format!("bench: keyed lease: {e}"))
}

fn key(i: usize) -> String {
    format!("run-{i:08}")
}

/// Creates the lock files of keys `0..count` under `root/NAMESPACE`, the first through the
/// library (which creates the namespace directory), the rest directly by name (the same
/// files the library would create), stopping early at [`KEY_SETUP_LIMIT`]. Returns how many
/// exist.
fn populate(root: &Path, count: usize) -> Result<usize, Failure> {
    std::fs::create_dir_all(root).map_err(io_fail("create key root"))?;
    let keys = KeyedLeases::new(root, NAMESPACE);
    drop(keys.try_acquire(&key(0), |_| true).map_err(key_err)?);
    #[cfg(unix)]
    let ns = rustix::fs::openat(
        CWD,
        root.join(NAMESPACE),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno_fail("open key namespace"))?;
    #[cfg(windows)]
    std::fs::create_dir_all(root.join(NAMESPACE)).map_err(io_fail("create key namespace"))?;
    let end = Instant::now() + KEY_SETUP_LIMIT;
    for i in 1..count {
        if i.is_multiple_of(1024) && Instant::now() > end {
            return Ok(i);
        }
        #[cfg(unix)]
        rustix::fs::openat(
            &ns,
            lock_name(&key(i)),
            OFlags::RDONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(errno_fail("create a key's lock file"))?;
        // Windows keyed leases keep no lock files; the files make the namespace directory
        // as large as the POSIX one, which is what the figure compares.
        #[cfg(windows)]
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(root.join(NAMESPACE).join(lock_name(&key(i))))
            .map_err(io_fail("create a key's file"))?;
    }
    Ok(count)
}

/// Keyed try_acquire + release with keys drawn among 10 IDs and among many (100,000; fewer
/// with `--quick`), each next to a plain cold cycle on one path; and the many-IDs figure next
/// to a plain cold cycle on the same files, drawn the same way (what the large directory
/// costs any lease: a lookup among 100,000 names and a cold inode each time).
fn keyed(dir: &Path, plan: &Plan) -> Result<Vec<Row>, Failure> {
    let few_root = dir.join("keys-10");
    let many_root = dir.join("keys-many");
    let few = populate(&few_root, 10)?;
    let many = populate(&many_root, plan.keyed_ids)?;
    let few_keys: Vec<String> = (0..few).map(key).collect();
    let many_keys: Vec<String> = (0..many).map(key).collect();
    let many_paths: Vec<PathBuf> = many_keys
        .iter()
        .map(|k| many_root.join(NAMESPACE).join(lock_name(k)))
        .collect();
    let few_leases = KeyedLeases::new(&few_root, NAMESPACE);
    let many_leases = KeyedLeases::new(&many_root, NAMESPACE);
    let plain = dir.join("keys-plain.lock");
    // The same pseudo-random sequence (an LCG) picks keys in every set.
    let pick = |state: &mut u64, n: usize| {
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*state >> 33) as usize) % n
    };
    let (mut s_few, mut s_many, mut s_paths) = (1u64, 1u64, 1u64);
    let mut ops: Vec<Op<'_>> = vec![
        Box::new(|| {
            let k = &few_keys[pick(&mut s_few, few_keys.len())];
            drop(few_leases.try_acquire(k, |_| true).map_err(key_err)?);
            Ok(())
        }),
        Box::new(|| {
            let k = &many_keys[pick(&mut s_many, many_keys.len())];
            drop(many_leases.try_acquire(k, |_| true).map_err(key_err)?);
            Ok(())
        }),
        Box::new(|| {
            drop(Lease::try_acquire(&plain).map_err(|e| Failure::of(&e))?);
            Ok(())
        }),
        Box::new(|| {
            let p = &many_paths[pick(&mut s_paths, many_paths.len())];
            drop(Lease::try_acquire(p).map_err(|e| Failure::of(&e))?);
            Ok(())
        }),
    ];
    let t = measure_batches(&mut ops, plan.repeats, plan.batch)?;
    drop(ops);
    let m: Vec<f64> = t.iter().map(|v| median(v)).collect();
    let samples = plan.repeats * plan.batch;
    let row = |key, name: String, i: usize, floor: (usize, &'static str), target: Option<f64>| {
        let ratio = m[i] / m[floor.0].max(1.0);
        Row {
            key,
            name,
            unit: Unit::Nanos,
            median: m[i],
            dist: None,
            floor: Some((m[floor.0], floor.1)),
            floor_dist: None,
            target: target.map(|t| (format!("≤ {t}× floor"), ratio <= t)),
            samples,
        }
    };
    let note = if plan.quick {
        " (--quick; full run: 100,000)"
    } else if many < plan.keyed_ids {
        " (setup stopped at its time limit)"
    } else {
        ""
    };
    let ids = thousands(many);
    // A keyed lease at a plain lease's cost, at 10 and at 100,000 IDs: its calls are a plain
    // lease's, but at 100,000 IDs they look its name up in a directory of as many, which the
    // one-path floor does not (BENCHMARKS.md, "Keyed leases").
    let one_path = "Lease::try_acquire, one path";
    Ok(vec![
        row(
            "keyed_10_ids",
            "keyed lease try_acquire + release, 10 IDs".into(),
            0,
            (2, one_path),
            Some(1.3),
        ),
        row(
            "keyed_many_ids",
            format!("keyed lease try_acquire + release, {ids} IDs{note}"),
            1,
            (2, one_path),
            Some(1.3),
        ),
        row(
            "keyed_many_ids_same_files",
            format!("keyed lease, {ids} IDs, next to a plain lease on the same files{note}"),
            1,
            (3, "Lease::try_acquire, a random one of the same files"),
            None,
        ),
    ])
}

// ---------------------------------------------------------------------------------------
// A collection beside the other verbs
// ---------------------------------------------------------------------------------------

/// `results gc` of a large namespace (100,000 lock files of IDs without records, and a
/// twentieth as many records to list; fewer with `--quick`) while another process loops
/// `paths` of a live ID (a `verbs` worker, see `worker.rs`): the longest wait that verb saw
/// during the collection, next to its longest in as many calls without one (once,
/// a collection held every verb up for its whole run, and `paths --timeout 0.2` failed).
#[cfg(unix)]
fn gc_beside_verbs(dir: &Path, plan: &Plan) -> Result<Vec<Row>, Failure> {
    use super::crew::Crew;
    use super::report::mono_ns;
    use leasehold_stores::results::ResultStore;
    let root = dir.join("gc-root");
    let store = ResultStore::new(&root);
    let src = dir.join("gc-src");
    std::fs::create_dir_all(&src).map_err(io_fail("create the gc source"))?;
    std::fs::write(src.join("a.txt"), b"a").map_err(io_fail("write the gc source"))?;
    let now = Budget::no_wait();
    store
        .stage(GC_LIVE, &src, &now)
        .map_err(|e| Failure::failed(format!("bench: stage: {e}")))?;
    let lock_files = plan.keyed_ids;
    let ns = store
        .lock_path(GC_LIVE)
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| Failure::failed("bench: the lock namespace has no parent"))?;
    let nsfd = rustix::fs::openat(
        CWD,
        &ns,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno_fail("open the lock namespace"))?;
    for i in 0..lock_files {
        rustix::fs::openat(
            &nsfd,
            lock_name(&format!("gone-{i}")),
            OFlags::RDONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(errno_fail("create a lock file"))?;
    }
    // Records are listed by name: directories are enough to make each listing cost.
    for i in 0..lock_files / 20 {
        std::fs::create_dir(root.join("results").join(format!("listed-{i}")))
            .map_err(io_fail("create a record"))?;
    }
    let mut crew = Crew::new();
    let verb = crew.spawn_args("verbs", &root, None, &[])?;
    crew.expect(verb, "R")?;
    crew.send(verb, &format!("base {GC_BASE_CALLS}"))?;
    let base = crew.expect(verb, "B")?;
    crew.send(verb, "loop")?;
    crew.expect(verb, "L")?;
    let from = mono_ns();
    let done = store
        .gc(Duration::ZERO)
        .map_err(|e| Failure::failed(format!("bench: gc: {e}")))?;
    let to = mono_ns();
    crew.send(verb, &format!("stop {from} {to}"))?;
    let during = crew.expect(verb, "G")?;
    crew.finish(verb);
    if done.removed != lock_files || done.busy {
        return Err(Failure::failed(format!(
            "bench: the gc removed {} of {lock_files} lock files (busy: {})",
            done.removed, done.busy
        )));
    }
    let (calls, longest) = match during.as_slice() {
        [calls, longest, ..] => (*calls, *longest as f64),
        _ => return Err(Failure::failed("bench: malformed verbs report")),
    };
    let base_longest = base.first().copied().unwrap_or(0) as f64;
    let limit = 200e6;
    let note = if plan.quick { " (--quick)" } else { "" };
    Ok(vec![Row {
        key: "gc_beside_verbs",
        name: format!(
            "longest wait of `paths` looped by another process during a gc of {} lock files and {} records ({:.1} s, {calls} calls){note}",
            thousands(lock_files),
            thousands(lock_files / 20),
            (to - from) as f64 / 1e9,
        ),
        unit: Unit::Nanos,
        median: longest,
        dist: None,
        floor: Some((base_longest, "longest of as many calls without a gc")),
        floor_dist: None,
        target: Some((
            "< 200 ms (`--timeout 0.2` is admitted)".into(),
            longest < limit,
        )),
        samples: calls as usize,
    }])
}

/// The live result the `verbs` worker inspects during the gc figure.
#[cfg(unix)]
pub(super) const GC_LIVE: &str = "live";

/// Calls of the `verbs` worker's baseline.
#[cfg(unix)]
const GC_BASE_CALLS: usize = 2000;

/// `100000` → `100,000`.
fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
