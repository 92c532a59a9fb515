//! `leasehold torture`: crash torture of the lease, the registry authority and `run`.
//!
//! N worker processes (this binary, re-executed as the hidden `leasehold worker torture`)
//! loop forever doing acknowledged mutations: registry adds/removes through the library
//! [`Registry`] authority, and increments of a shared counter file through `leasehold run`
//! (whose command is this binary again, as `leasehold worker torture --increment`; on
//! Windows the worker takes the counter's `Lease` itself, see `worker::counter_in_process`).
//! Meanwhile the supervisor kills a random worker (`platform::kill`: SIGKILL to its process
//! group; Windows: `TerminateProcess`) — at random moments, and on purpose while a worker
//! holds a lease or is in the middle of a durable rewrite (workers announce each phase on
//! stdout and wait for a `go` on stdin, so a kill can land exactly there).
//!
//! Every lease holder appends `enter`/`exit` records with monotonic timestamps
//! (`platform::mono_ns`) to an audit log of its own incarnation, one `write` per record; the
//! supervisor appends a `kill` record taken *before* each kill to its own. [`check`] then proves that no two holders of one lock overlapped, that
//! every acknowledged mutation is in the final store, and that no store was ever torn.
//!
//! With `--gc`, the workers instead take keyed leases ([`KeyedLeases`]) on a small ID set
//! while worker slot 0 is a collector that removes every lock file nobody holds
//! ([`KeyedLeases::collect`], no ID has a record) as fast as the supervisor lets it: the
//! audit check then proves that the collector never let two processes hold one ID at once.
//!
//! With `--document`, the workers instead increment a [`Document`] (a JSON counter with a
//! padding its value fixes, so that a torn version cannot pass for a whole one) and read it
//! lock-free between updates; the kills aim inside the update's closure and after every step
//! of its durable rewrite. The checks: the audit log (no two updates held the document's
//! lease at once), every read whole and never older than what that process saw, no two
//! acknowledged updates wrote the same counter value (one would have been lost), the final
//! counter between the acknowledged and the attempted updates, and no temporary beside the
//! document once an update holds the lease (killed writers' temporaries are collected then).
//!
//! With `--document --two-mounts DIR2` (Linux), DIR2 is a second mount of `--dir`'s
//! directory that its kernel locks do not reach (two bindfs mounts of one directory, as two
//! NFS clients with `local_lock=all`): the workers take the document's record lease
//! ([`SharedMount::Record`], TTL `--record-ttl`), odd slots through DIR2, and a hunt either
//! SIGKILLs its worker or SIGSTOPs it for twice the TTL and SIGCONTs it (inside the closure,
//! or between the lease's verification and the rename). A deposed writer's update must be
//! refused (lease lost, recorded as `stop`: it held nothing from then on); the checks above
//! then hold among the acknowledged updates.
//!
//! With `--ancestor-rename` (Linux, as root), the counter and the registry live in
//! `shared/area/` of the run's directory, `shared/` being writable by everyone, and an
//! attacker process running as `nobody` (`setpriv`) repeatedly swaps `area` for a fresh
//! directory of its own (`renameat2(RENAME_EXCHANGE)`, so the path is never empty), at random
//! moments and on purpose while a worker holds a lease or is part-way through a durable
//! rewrite. Without `LEASEHOLD_ALLOW_SHARED=1` every acquisition must be refused (the chain
//! is unsafe); with it, [`check::ancestor_audit`] checks each store generation on its own and the
//! overlaps against the moves (see there).
//!
//! The run is bounded by `--kills` and `--seconds`, stops by itself and removes its directory
//! (kept, and named, when a violation was found). Exit status: 0 with no violation, 1 otherwise.
//!
//! [`Registry`]: leasehold_stores::registry::Registry
//! [`KeyedLeases`]: leasehold::patterns::keyed::KeyedLeases
//! [`Document`]: leasehold_stores::document::Document
//! [`KeyedLeases::collect`]: leasehold::patterns::keyed::KeyedLeases::collect
//! [`SharedMount::Record`]: leasehold::SharedMount::Record

mod check;
#[cfg(all(feature = "etcd", unix))]
mod etcd;
mod supervisor;
mod worker;

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::Args;
use leasehold_stores::registry::RegistryPaths;

use crate::exit::{Failure, Outcome};

/// How many roots the registry workers add and remove (per primary).
const ROOT_POOL: usize = 6;

/// How many IDs the keyed workers of `--gc` contend for.
const KEY_POOL: u64 = 4;

/// `--ancestor-rename`: the directory (in `shared/`) the stores lie in, and the file in it
/// that holds its generation's number (0 for the first; the attacker's `n` for its n-th
/// move). A replaced generation is renamed to `generation.N` beside it.
const AREA: &str = "area";
const GENERATION: &str = "generation";

/// The keyed-lease namespace of `--gc` runs.
const KEY_NAMESPACE: &str = ".torture-locks-v1";

#[derive(Args, Debug)]
pub struct TortureArgs {
    /// Worker processes.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    workers: u32,
    /// Stop after K kills.
    #[arg(long, value_name = "K", default_value_t = 100)]
    kills: u64,
    /// Stop after S seconds, whatever the number of kills.
    #[arg(long, value_name = "S", default_value_t = 60.0, value_parser = parse_seconds)]
    seconds: f64,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Directory to work in (a fresh subdirectory is created and removed; default: the
    /// system's temporary directory).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Torture the registry on etcd at ENDPOINTS instead (SIGKILL and SIGSTOP/SIGCONT of
    /// workers; `--kills` counts both).
    #[arg(long, value_name = "ENDPOINTS", conflicts_with = "etcd_server")]
    etcd: Option<String>,
    /// Like --etcd, on a private etcd this run starts and stops (`etcd` on PATH).
    #[arg(long)]
    etcd_server: bool,
    /// With --etcd or --etcd-server: torture `leasehold run --etcd` itself instead of the
    /// registry — COMMANDs that leave a background child increment a counter while `run` is
    /// SIGKILLed or SIGSTOPped past the TTL; no two COMMANDs' trees may ever act at once.
    #[arg(long)]
    etcd_run: bool,
    /// Internal: the role of an `--etcd-run` process (command, background).
    #[arg(long, hide = true, value_name = "ROLE", requires = "etcd_worker")]
    etcd_role: Option<String>,
    /// Internal: run as etcd worker SLOT:GEN in DIR.
    #[arg(long, hide = true, value_name = "SLOT:GEN", requires_all = ["dir", "etcd", "prefix"])]
    etcd_worker: Option<String>,
    /// Internal: the etcd key prefix of the run.
    #[arg(long, hide = true, value_name = "P")]
    prefix: Option<String>,
    /// Keyed leases on a small ID set with a lock-file collector running concurrently
    /// (instead of the registry and the counter).
    #[arg(long)]
    gc: bool,
    /// Self-check of the checker (hidden): every worker takes the counter's lease on a
    /// lock file of its own, so increments overlap and get lost; with --gc, the collector
    /// unlinks lock files without taking their locks, so a newcomer locks a new file beside
    /// a holder. The run must fail.
    #[arg(long, hide = true)]
    break_exclusion: bool,
    /// COMMAND of each counter `run` leaves the increment to a background descendant and
    /// exits at once, so the lease must outlive `run` (it lasts until the last process
    /// holding it exits); a third of the counter operations read it under `run --shared`
    /// instead, so the shared-mode gates exist and exclusive runs wait through them.
    #[arg(long, conflicts_with = "gc")]
    descendants: bool,
    /// Torture a `Document` instead: workers increment a JSON document through its updates
    /// (killed inside the update's closure, after each step of its durable rewrite, or at a
    /// random moment) and read it lock-free between updates. Every read must be a whole
    /// version never older than one seen before, no acknowledged update may be lost, no two
    /// updates may hold the document's lease at once, and the next update removes every
    /// temporary a killed one left.
    // The hidden self-check `--break-exclusion` gives each worker a lock file of its own.
    #[arg(long, conflicts_with_all = ["gc", "descendants", "ancestor_rename"])]
    document: bool,
    /// With --document and --dir (Linux): DIR2 is a second mount of --dir's directory
    /// whose kernel locks do not reach the first's (two bindfs mounts of one directory). The
    /// workers take the document's record lease (TTL --record-ttl), half of them through
    /// DIR2, and are SIGKILLed or SIGSTOPped past the TTL on both sides; a deposed writer's
    /// update must be refused, and no acknowledged update may be lost.
    #[arg(long, value_name = "DIR2", requires_all = ["document", "dir"])]
    two_mounts: Option<PathBuf>,
    /// With --two-mounts: the record lease's TTL in seconds.
    #[arg(long, value_name = "S", default_value_t = 0.3, value_parser = parse_seconds)]
    record_ttl: f64,
    /// Linux, as root: the counter and the registry lie below a directory that another user
    /// (`nobody`, through setpriv) may rename, and does, again and again, putting a fresh
    /// one in its place. Without LEASEHOLD_ALLOW_SHARED=1 every acquisition must be
    /// refused; with it, no acknowledged write may be lost or land beside a second holder.
    #[arg(long, conflicts_with_all = ["gc", "descendants", "etcd", "etcd_server"])]
    ancestor_rename: bool,
}

/// Arguments of a torture worker process (internal: not part of the contract).
#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// Which worker this is: its slot and the generation of that slot (restarts count up).
    #[arg(value_name = "SLOT:GEN")]
    id: String,
    /// The run's directory.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// Increment the counter (run as COMMAND under `leasehold run`) instead of looping.
    #[arg(long)]
    increment: bool,
    /// A `--gc` run: keyed operations, or (slot 0) the collector.
    #[arg(long)]
    gc: bool,
    /// The checker's self-check: the counter's lease on a lock file of this worker's own
    /// (with `--gc`: a collector that unlinks lock files without taking their locks).
    #[arg(long)]
    break_exclusion: bool,
    /// A `--descendants` run: counter increments in a background descendant of COMMAND,
    /// and shared reads.
    #[arg(long)]
    descendants: bool,
    /// A `--document` run: document updates and lock-free reads.
    #[arg(long)]
    document: bool,
    /// A `--two-mounts` run: the document's record lease, with this TTL in milliseconds.
    #[arg(long, value_name = "MS", requires = "document")]
    record_ttl_ms: Option<u64>,
    /// A `--two-mounts` run: reach the document through this directory (the run's
    /// directory through the second mount).
    #[arg(long, value_name = "DIR", requires = "record_ttl_ms")]
    via: Option<PathBuf>,
    /// With `--increment`: record the acknowledgement of operation SEQ after the increment
    /// (the increment of a `--descendants` run ends after its `run` has exited).
    #[arg(long, value_name = "SEQ", requires = "increment")]
    ack: Option<u64>,
    /// Read the counter under a shared lease (run as COMMAND under `leasehold run --shared`).
    #[arg(long, conflicts_with = "increment")]
    read: bool,
    /// An `--ancestor-rename` run: the stores lie in `shared/area/`.
    #[arg(long)]
    ancestor_rename: bool,
    /// The attacker of an `--ancestor-rename` run (run as another user): one move of
    /// `shared/area` per `move` line on stdin.
    #[arg(long, requires = "ancestor_rename")]
    attacker: bool,
}

/// Runs one torture worker (or one increment under `run`).
pub fn worker(args: WorkerArgs) -> Outcome {
    let (slot, generation) = parse_id(&args.id)?;
    let mut layout = Layout::new(&args.dir);
    layout.broken = args.break_exclusion;
    layout.descendants = args.descendants;
    layout.ancestor = args.ancestor_rename;
    layout.via = args.via;
    layout.record_ttl = args.record_ttl_ms.map(std::time::Duration::from_millis);
    if args.attacker {
        worker::attack(&layout)
    } else if args.document {
        worker::document(&layout, slot, generation)
    } else if args.increment {
        worker::increment(&layout, slot, generation, args.ack)
    } else if args.read {
        worker::read(&layout, slot, generation)
    } else if args.gc && slot == 0 {
        worker::collect(&layout, slot, generation)
    } else if args.gc {
        worker::keyed(&layout, slot, generation)
    } else {
        worker::work(&layout, slot, generation)
    }
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    crate::parse_secs(s).map(|d| d.as_secs_f64())
}

pub fn main(args: TortureArgs) -> Outcome {
    if args.etcd.is_some() || args.etcd_server || args.etcd_worker.is_some() {
        return etcd_mode(&args);
    }
    if args.gc && args.break_exclusion && cfg!(windows) {
        return Err(Failure::usage(
            "torture --gc --break-exclusion: Windows keyed leases keep no lock files for a broken collector to unlink",
        ));
    }
    if args.descendants && cfg!(windows) {
        return Err(Failure::usage(
            "torture --descendants: COMMAND's descendants inherit the lease on Unix only (on Windows the lease is not inherited)",
        ));
    }
    if args.two_mounts.is_some() && !cfg!(target_os = "linux") {
        return Err(Failure::usage(
            "torture --two-mounts: Linux only (the bed is two bindfs mounts of one directory)",
        ));
    }
    if args.ancestor_rename && !cfg!(target_os = "linux") {
        return Err(Failure::usage(
            "torture --ancestor-rename: Linux only (the attacker swaps directories with renameat2 and runs as nobody through setpriv)",
        ));
    }
    supervisor::run(&supervisor::Settings {
        workers: args.workers,
        kills: args.kills,
        seconds: args.seconds,
        json: args.json,
        dir: args.dir,
        gc: args.gc,
        break_exclusion: args.break_exclusion,
        descendants: args.descendants,
        document: args.document,
        ancestor: args.ancestor_rename,
        two_mounts: args.two_mounts.clone(),
        record_ttl: std::time::Duration::from_secs_f64(args.record_ttl),
    })
}

#[cfg(all(feature = "etcd", unix))]
fn etcd_mode(args: &TortureArgs) -> Outcome {
    if let Some(id) = &args.etcd_worker {
        let (slot, generation) = parse_id(id)?;
        let (Some(endpoints), Some(prefix)) = (&args.etcd, &args.prefix) else {
            return Err(Failure::usage(
                "torture: an etcd worker needs --etcd and --prefix",
            ));
        };
        let layout = Layout::new(dir_of(args)?);
        if let Some(role) = &args.etcd_role {
            return etcd::role(&layout, slot, generation, endpoints, prefix, role);
        }
        return etcd::work(&layout, slot, generation, endpoints, prefix);
    }
    etcd::run(&etcd::Settings {
        workers: args.workers,
        events: args.kills,
        seconds: args.seconds,
        json: args.json,
        dir: args.dir.clone(),
        endpoints: args.etcd.clone(),
        run: args.etcd_run,
        break_exclusion: args.break_exclusion,
    })
}

#[cfg(windows)]
fn etcd_mode(_: &TortureArgs) -> Outcome {
    Err(Failure::failed(
        "torture --etcd: not available on Windows: it pauses workers past their lease's TTL with SIGSTOP, and Windows has no way to pause a process from outside",
    ))
}

#[cfg(all(not(feature = "etcd"), unix))]
fn etcd_mode(_: &TortureArgs) -> Outcome {
    Err(Failure::failed(
        "torture --etcd: this leasehold was built without etcd support; rebuild it with `cargo build --release --features etcd`",
    ))
}

#[cfg(all(feature = "etcd", unix))]
fn dir_of(args: &TortureArgs) -> Result<&Path, Failure> {
    args.dir
        .as_deref()
        .ok_or_else(|| Failure::usage("torture: an internal worker needs --dir"))
}

fn parse_id(id: &str) -> Result<(u32, u32), Failure> {
    let bad = || Failure::usage(format!("torture: {id:?} is not SLOT:GEN"));
    let (s, g) = id.split_once(':').ok_or_else(bad)?;
    Ok((s.parse().map_err(|_| bad())?, g.parse().map_err(|_| bad())?))
}

/// The files of one torture run, all under one directory.
#[derive(Debug, Clone)]
pub struct Layout {
    dir: PathBuf,
    /// `--break-exclusion`: each worker slot locks a counter lock file of its own (with
    /// `--gc`: the collector unlinks lock files without their locks).
    broken: bool,
    /// `--descendants`: increments in background descendants of COMMAND, and shared reads.
    descendants: bool,
    /// `--ancestor-rename`: the counter and the registry lie in `shared/area/`, which the
    /// attacker swaps for fresh directories.
    ancestor: bool,
    /// `--two-mounts`: the directory this worker reaches the document through (the run's
    /// directory through the second mount), when not `dir`.
    via: Option<PathBuf>,
    /// `--two-mounts`: the document's record lease TTL.
    record_ttl: Option<std::time::Duration>,
}

impl Layout {
    fn new(dir: &Path) -> Layout {
        Layout {
            dir: dir.to_path_buf(),
            broken: false,
            descendants: false,
            ancestor: false,
            via: None,
            record_ttl: None,
        }
    }
    /// Where the counter and the registry's home lie: the run's directory, or (with
    /// `--ancestor-rename`) `shared/area/` in it.
    fn stores(&self) -> PathBuf {
        if self.ancestor {
            self.shared().join(AREA)
        } else {
            self.dir.clone()
        }
    }
    /// The directory everyone may write (`--ancestor-rename`): the attacker renames in it.
    fn shared(&self) -> PathBuf {
        self.dir.join("shared")
    }
    /// The store generation's number, in every generation of `shared/area/`.
    fn generation_mark(&self) -> PathBuf {
        self.stores().join(GENERATION)
    }
    /// The etcd mode's operations log (one file, appended to by every worker: POSIX only).
    #[cfg(all(feature = "etcd", unix))]
    fn ops(&self) -> PathBuf {
        self.dir.join("ops.log")
    }
    /// The log `kind` (`audit`: lease enter/exit and kill records; `ops`: mutation intents,
    /// acknowledgements and violations seen by workers) of one writer (`SLOT-GEN`, or
    /// `supervisor`). One file per writer, never one shared by concurrent appenders: an
    /// append is atomic on POSIX (`O_APPEND`), but not under Wine, which lost records of
    /// concurrent appenders to one file in this very torture.
    fn log_of(&self, kind: &str, writer: &str) -> PathBuf {
        self.dir.join(format!("{kind}-{writer}.log"))
    }
    /// Every writer's log `kind`, concatenated (the checkers need each writer's records in
    /// its order, not an order between writers: they order by timestamp).
    fn read_logs(&self, kind: &str) -> io::Result<String> {
        let prefix = format!("{kind}-");
        let mut names: Vec<PathBuf> = std::fs::read_dir(&self.dir)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".log"))
            })
            .collect();
        names.sort();
        let mut text = String::new();
        for name in names {
            text.push_str(&std::fs::read_to_string(&name)?);
        }
        Ok(text)
    }
    /// Workers' stderr.
    fn stderr(&self) -> PathBuf {
        self.dir.join("stderr.log")
    }
    fn registry(&self) -> RegistryPaths {
        RegistryPaths::in_home(&self.stores().join("home"), None)
    }
    fn counter(&self) -> PathBuf {
        self.stores().join("counter")
    }
    fn counter_lock(&self) -> PathBuf {
        self.stores().join("counter.lock")
    }
    /// The lock file worker `slot` takes the counter's lease on: the counter's, unless the
    /// run breaks exclusion on purpose.
    fn counter_lock_of(&self, slot: u32) -> PathBuf {
        if self.broken {
            self.dir.join(format!("counter.{slot}.lock"))
        } else {
            self.counter_lock()
        }
    }
    /// The document of a `--document` run (through the second mount for a worker of it).
    fn document(&self) -> PathBuf {
        self.document_dir().join("doc.json")
    }
    fn document_dir(&self) -> &Path {
        self.via.as_deref().unwrap_or(&self.dir)
    }
    /// The document's options: JSON, and with `--two-mounts` the record lease.
    fn document_options(&self) -> leasehold_stores::document::DocumentOptions {
        let options = leasehold_stores::document::DocumentOptions::new().json(true);
        match self.record_ttl {
            Some(ttl) => options.on_shared_mount(leasehold::SharedMount::Record { ttl }),
            None => options,
        }
    }
    /// The lock file worker `slot` leases the document on: the document's own
    /// (`doc.json.lock`), unless the run breaks exclusion on purpose.
    fn document_lock_of(&self, slot: u32) -> PathBuf {
        if self.broken {
            self.document_dir().join(format!("doc.json.{slot}.lock"))
        } else {
            self.document_dir().join("doc.json.lock")
        }
    }
    /// The managed root of the keyed leases (`--gc`).
    fn keyed(&self) -> leasehold::patterns::keyed::KeyedLeases {
        leasehold::patterns::keyed::KeyedLeases::new(self.keyed_root(), KEY_NAMESPACE)
    }
    fn keyed_root(&self) -> PathBuf {
        self.dir.join("keyed")
    }
    /// The keyed leases' lock files (`--gc`), for the broken collector of the self-check.
    fn keyed_namespace(&self) -> PathBuf {
        self.keyed_root().join(KEY_NAMESPACE)
    }
    /// What the collector removed: one line per collection, the count.
    fn collected(&self) -> PathBuf {
        self.dir.join("collected.log")
    }
    fn primary(&self, slot: u32) -> PathBuf {
        self.dir.join("primaries").join(format!("p{slot}"))
    }
    fn root(&self, index: usize) -> PathBuf {
        self.dir.join("roots").join(format!("r{index}"))
    }
}

/// An O_APPEND log written one `write` per record, so a killed writer leaves whole records
/// only (and records of the processes that write one log one after another — a worker and
/// its `run` incrementer — stay in order).
struct AppendLog(File);

impl AppendLog {
    fn open(path: &Path) -> io::Result<AppendLog> {
        let mut options = OpenOptions::new();
        // Windows: append-only access (FILE_APPEND_DATA), each write lands at the end.
        options.append(true).create(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options.open(path).map(AppendLog)
    }

    /// Appends `line` and a newline in a single `write`.
    fn record(&self, line: &str) -> io::Result<()> {
        let buf = format!("{line}\n");
        let n = (&self.0).write(buf.as_bytes())?;
        if n != buf.len() {
            return Err(io::Error::other(format!(
                "short append ({n} of {} bytes)",
                buf.len()
            )));
        }
        Ok(())
    }
}

/// One monotonic clock for every process of the machine (`platform::mono_ns`), in ns.
fn now_ns() -> u64 {
    crate::platform::mono_ns()
}

/// A small xorshift generator: the schedule only needs to be varied, not unpredictable.
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        let seed = now_ns() ^ (u64::from(std::process::id()) << 32) ^ 0x9e37_79b9_7f4a_7c15;
        Rng(seed | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}
