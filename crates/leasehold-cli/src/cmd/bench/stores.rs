//! Store figures: what the stores add on top of the durable system calls they must make.
//!
//! * **Registry mutation** (`add`/`remove` through an active [`Registry`]) next to a raw
//!   durable-rewrite loop of a document of the same size: temp file → write → fsync → rename
//!   → fsync directory, issued directly (the directory kept open).
//! * **Session append** ([`SessionWriter::append_json`](leasehold_stores::session::SessionWriter::append_json)), fsync per record and batched, next
//!   to raw `write` + `fdatasync` on an `O_APPEND` descriptor with records of the same size.
//! * **Keyed lease cost** ([`KeyedLeases::try_acquire`] + release) with 10 and with 100,000
//!   lock files in the namespace directory, keys drawn pseudo-randomly among them.
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
use leasehold_stores::registry::{Registry, RegistryPaths};
use leasehold_stores::session::{SessionId, SessionStore};
#[cfg(unix)]
use rustix::fs::{CWD, Mode, OFlags};

#[cfg(unix)]
use super::errno_fail;
use super::micro::{Op, measure_batches};
use super::{Plan, Row, Unit, io_fail, median};
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
/// with `--quick`), plus a plain cold cycle for reference.
fn keyed(dir: &Path, plan: &Plan) -> Result<Vec<Row>, Failure> {
    let few_root = dir.join("keys-10");
    let many_root = dir.join("keys-many");
    let few = populate(&few_root, 10)?;
    let many = populate(&many_root, plan.keyed_ids)?;
    let few_keys: Vec<String> = (0..few).map(key).collect();
    let many_keys: Vec<String> = (0..many).map(key).collect();
    let few_leases = KeyedLeases::new(&few_root, NAMESPACE);
    let many_leases = KeyedLeases::new(&many_root, NAMESPACE);
    let plain = dir.join("keys-plain.lock");
    // The same pseudo-random sequence (an LCG) picks keys in both sets.
    let pick = |state: &mut u64, n: usize| {
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*state >> 33) as usize) % n
    };
    let (mut s_few, mut s_many) = (1u64, 1u64);
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
    ];
    let t = measure_batches(&mut ops, plan.repeats, plan.batch)?;
    drop(ops);
    let m: Vec<f64> = t.iter().map(|v| median(v)).collect();
    let samples = plan.repeats * plan.batch;
    let few_row = Row {
        key: "keyed_10_ids",
        name: "keyed lease try_acquire + release, 10 IDs".into(),
        unit: Unit::Nanos,
        median: m[0],
        dist: None,
        floor: Some((m[2], "Lease::try_acquire, one path")),
        floor_dist: None,
        target: None,
        samples,
    };
    let ratio = m[1] / m[0].max(1.0);
    let note = if plan.quick {
        " (--quick; full run: 100,000)"
    } else if many < plan.keyed_ids {
        " (setup stopped at its time limit)"
    } else {
        ""
    };
    let many_row = Row {
        key: "keyed_many_ids",
        name: format!(
            "keyed lease try_acquire + release, {} IDs{note}",
            thousands(many)
        ),
        unit: Unit::Nanos,
        median: m[1],
        dist: None,
        floor: Some((m[0], "same, 10 IDs")),
        floor_dist: None,
        target: Some(("≤ 1.2× 10 IDs".into(), ratio <= 1.2)),
        samples,
    };
    Ok(vec![few_row, many_row])
}

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
