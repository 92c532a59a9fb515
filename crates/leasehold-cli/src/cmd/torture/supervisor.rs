//! The supervisor: starts and restarts workers, kills them, then checks and reports.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use leasehold::Budget;
use leasehold_stores::registry::{Registry, existing_dir};
use serde_json::json;

use super::{AppendLog, Layout, ROOT_POOL, Rng, check, now_ns};
use crate::cmd::platform;
use crate::exit::{Failure, OK, Outcome};

/// The phases a hunting kill aims at: holding a lease, and every step of a durable rewrite.
const HUNTED: [&str; 6] = [
    "holding",
    "write-Created",
    "write-Written",
    "write-Synced",
    "write-Renamed",
    "write-DirSynced",
];

/// The phases a hunting kill aims at in a `--gc` run: holding a key's lease, and the
/// collector between collections (random kills land inside collections).
const HUNTED_GC: [&str; 2] = ["holding", "collect"];

/// The phases a hunting kill aims at in a `--document` run: inside the update's closure
/// (the lease held, the current version read), and after every step of its durable rewrite
/// (`write-Synced`: between the temporary's fsync and the rename; `write-Renamed`: after
/// the rename, before the directory's fsync).
const HUNTED_DOCUMENT: [&str; 6] = [
    "closure",
    "write-Created",
    "write-Written",
    "write-Synced",
    "write-Renamed",
    "write-DirSynced",
];

/// How long a hunt waits for a worker to reach its phase before giving up on it.
const HUNT_PATIENCE: Duration = Duration::from_secs(2);

/// What the user asked for.
pub struct Settings {
    pub workers: u32,
    pub kills: u64,
    pub seconds: f64,
    pub json: bool,
    pub dir: Option<PathBuf>,
    pub gc: bool,
    /// Workers break exclusion on purpose (the checker's self-check): see `TortureArgs`.
    pub break_exclusion: bool,
    /// Increments in background descendants of COMMAND, and shared reads: see `TortureArgs`.
    pub descendants: bool,
    /// Document updates and lock-free reads instead: see `TortureArgs`.
    pub document: bool,
}

#[derive(Default)]
struct Slot {
    /// The current incarnation, until its output ended and its tender reaps it.
    child: Option<Child>,
    generation: u32,
    killed: bool,
}

#[derive(Default)]
struct State {
    slots: Vec<Slot>,
    /// The phase a hunting kill waits for.
    hunt: Option<&'static str>,
    stopping: bool,
    kills: u64,
    /// Kills by where they landed: a hunted phase, or "random".
    landed: BTreeMap<String, u64>,
    violations: Vec<String>,
    /// How long the last worker took from its start to its first line: the kill loop lets
    /// at least that pass between kills, so that restarted workers get work done where
    /// starting a process is slow (Windows; Wine takes ~0.3 s) as where it is fast.
    startup: Duration,
}

struct Shared {
    state: Mutex<State>,
    hunted: Condvar,
    audit: AppendLog,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Kills `slot`'s current worker whole (`platform::kill`: on POSIX SIGKILL to its
    /// process group — the worker, and the `run` and incrementer it started; on Windows
    /// `TerminateProcess`), once per incarnation. The kill record's timestamp is taken
    /// before the kill, so it precedes the death (see `check`).
    fn kill(&self, st: &mut State, slot: usize, landed: &str) -> bool {
        let s = &mut st.slots[slot];
        if s.killed {
            return false;
        }
        let Some(child) = s.child.as_mut() else {
            return false;
        };
        let t = now_ns();
        if platform::kill(child).is_err() {
            return false;
        }
        s.killed = true;
        let record = format!("kill {slot} {} {t}", s.generation);
        if let Err(e) = self.audit.record(&record) {
            st.violations.push(format!("cannot record a kill: {e}"));
        }
        if !st.stopping {
            st.kills += 1;
            *st.landed.entry(landed.to_string()).or_default() += 1;
        }
        true
    }
}

pub fn run(settings: &Settings) -> Outcome {
    if settings.gc && settings.workers < 2 {
        return Err(Failure::usage(
            "torture --gc: needs at least 2 workers (one is the collector)",
        ));
    }
    let started = Instant::now();
    let layout = prepare(settings)?;
    let audit_path = layout.log_of("audit", "supervisor");
    let audit = AppendLog::open(&audit_path).map_err(|e| io_failure(&audit_path, e))?;
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            slots: (0..settings.workers).map(|_| Slot::default()).collect(),
            ..State::default()
        }),
        hunted: Condvar::new(),
        audit,
    });
    let exe = std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find this executable: {e}")))?;
    let threads: Vec<_> = (0..settings.workers as usize)
        .map(|slot| {
            let (shared, layout, exe) = (shared.clone(), layout.clone(), exe.clone());
            let flags = Flags {
                gc: settings.gc,
                break_exclusion: settings.break_exclusion,
                descendants: settings.descendants,
                document: settings.document,
            };
            thread::spawn(move || tend(&shared, &layout, &exe, slot, flags))
        })
        .collect();

    let deadline = started + Duration::from_secs_f64(settings.seconds);
    kill_loop(&shared, settings, deadline);

    {
        let mut st = shared.lock();
        st.stopping = true;
        st.hunt = None;
        for slot in 0..st.slots.len() {
            shared.kill(&mut st, slot, "shutdown");
        }
    }
    for t in threads {
        if t.join().is_err() {
            shared
                .lock()
                .violations
                .push("a worker thread panicked".into());
        }
    }
    let elapsed = started.elapsed();
    let report = if settings.document {
        verify_document(&layout, &shared)?
    } else {
        verify(&layout, &shared)?
    };
    let violations = report.violations.len();
    print_report(settings, &shared.lock(), &report, elapsed);
    // Closes the audit log (the workers' threads are joined: this is the last reference);
    // Windows does not remove a directory with an open file in it.
    drop(shared);
    if violations == 0 {
        let _ = std::fs::remove_dir_all(&layout.dir);
        Ok(OK)
    } else {
        Err(Failure::failed(format!(
            "torture: {violations} violation(s) found, first: {}; evidence kept in {}",
            report.violations[0],
            layout.dir.display()
        )))
    }
}

/// Creates a fresh run directory with the registry's home, the roots, one primary per
/// worker, and the counter at 0.
fn prepare(settings: &Settings) -> Result<Layout, Failure> {
    let base = settings.dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!(
        "leasehold-torture-{}-{}",
        std::process::id(),
        now_ns()
    ));
    let mkdir = |p: &Path| std::fs::create_dir_all(p).map_err(|e| io_failure(p, e));
    mkdir(&dir)?;
    let dir = dir.canonicalize().map_err(|e| io_failure(&dir, e))?;
    let layout = Layout::new(&dir);
    for slot in 0..settings.workers {
        mkdir(&layout.primary(slot))?;
    }
    for r in 0..ROOT_POOL {
        mkdir(&layout.root(r))?;
    }
    mkdir(layout.keyed().root())?;
    if let Some(storages) = layout.registry().document.parent() {
        mkdir(storages)?;
    }
    std::fs::write(layout.counter(), "0\n").map_err(|e| io_failure(&layout.counter(), e))?;
    Ok(layout)
}

fn io_failure(path: &Path, e: std::io::Error) -> Failure {
    Failure::failed(format!("torture: {}: {e}", path.display()))
}

/// Kills until the count or the time is reached: a third of the kills at a random moment,
/// the rest in a chosen phase (a hunt that no worker reaches in time is abandoned).
fn kill_loop(shared: &Shared, settings: &Settings, deadline: Instant) {
    let mut rng = Rng::seeded();
    loop {
        if shared.lock().kills >= settings.kills || Instant::now() >= deadline {
            return;
        }
        // Let the survivors and the restarted worker make progress between kills.
        let startup = shared.lock().startup;
        thread::sleep(startup + Duration::from_millis(rng.below(12)));
        if rng.below(3) == 0 {
            let mut st = shared.lock();
            let slot = rng.below(st.slots.len() as u64) as usize;
            shared.kill(&mut st, slot, "random");
            continue;
        }
        let hunted: &[&'static str] = if settings.gc {
            &HUNTED_GC
        } else if settings.document {
            &HUNTED_DOCUMENT
        } else {
            &HUNTED
        };
        let phase = hunted[rng.below(hunted.len() as u64) as usize];
        let mut st = shared.lock();
        st.hunt = Some(phase);
        let patience = HUNT_PATIENCE.min(deadline.saturating_duration_since(Instant::now()));
        let (mut st, _) = shared
            .hunted
            .wait_timeout_while(st, patience, |st| st.hunt.is_some())
            .unwrap_or_else(PoisonError::into_inner);
        st.hunt = None;
    }
}

/// The worker flags of a run.
#[derive(Debug, Clone, Copy)]
struct Flags {
    gc: bool,
    break_exclusion: bool,
    descendants: bool,
    document: bool,
}

/// Keeps one worker slot busy: starts an incarnation, answers its phases (or kills it in
/// the hunted one), reaps it, and starts the next until the run stops.
fn tend(shared: &Shared, layout: &Layout, exe: &Path, slot: usize, flags: Flags) {
    for generation in 0u32.. {
        if shared.lock().stopping {
            return;
        }
        let stderr = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(layout.stderr());
        let spawned = Instant::now();
        let mut child = match stderr.and_then(|err| {
            let mut cmd = Command::new(exe);
            cmd.args(crate::cmd::platform::WORKER_ARGS)
                .arg("torture")
                .arg(format!("{slot}:{generation}"))
                .arg("--dir")
                .arg(&layout.dir)
                .args(flags.gc.then_some("--gc"))
                .args(flags.break_exclusion.then_some("--break-exclusion"))
                .args(flags.descendants.then_some("--descendants"))
                .args(flags.document.then_some("--document"))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(err);
            platform::isolate(&mut cmd).spawn()
        }) {
            Ok(c) => c,
            Err(e) => {
                shared
                    .lock()
                    .violations
                    .push(format!("cannot start worker {slot}: {e}"));
                return;
            }
        };
        let mut stdin = child.stdin.take();
        let stdout = child.stdout.take();
        {
            let mut st = shared.lock();
            st.slots[slot] = Slot {
                child: Some(child),
                generation,
                killed: false,
            };
            if st.stopping {
                shared.kill(&mut st, slot, "shutdown");
            }
        }
        if let Some(out) = stdout {
            let mut first = true;
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let mut st = shared.lock();
                if std::mem::take(&mut first) {
                    st.startup = spawned.elapsed();
                }
                if st.hunt.is_some_and(|h| h == line) && shared.kill(&mut st, slot, &line) {
                    st.hunt = None;
                    shared.hunted.notify_all();
                    continue;
                }
                drop(st);
                if let Some(w) = stdin.as_mut() {
                    let _ = writeln!(w, "go").and_then(|()| w.flush());
                }
            }
        }
        drop(stdin);
        // Reaped only once out of the slot, so its pid (and group) cannot be reused while a
        // kill is possible.
        let (child, killed) = {
            let mut st = shared.lock();
            (st.slots[slot].child.take(), st.slots[slot].killed)
        };
        let Some(mut child) = child else {
            shared
                .lock()
                .violations
                .push(format!("worker {slot}:{generation} vanished from its slot"));
            return;
        };
        let status = child.wait();
        let by_kill = status.as_ref().is_ok_and(platform::ended_by_kill);
        if !(killed && by_kill) {
            shared.lock().violations.push(format!(
                "worker {slot}:{generation} ended by itself: {status:?} (see {})",
                layout.stderr().display()
            ));
        }
    }
}

/// Everything the run found wrong, with the figures the checkers computed.
struct Report {
    audit: check::AuditReport,
    ops: check::OpsReport,
    violations: Vec<String>,
    temporaries: usize,
    gc: Collected,
}

/// What the collector of a `--gc` run did.
#[derive(Default)]
struct Collected {
    /// Collections that ran.
    collections: u64,
    /// Collections that found the namespace busy and examined nothing.
    busy: u64,
    /// Lock files removed.
    removed: u64,
}

/// Sums the collector's log (`REMOVED BUSY` per collection; a missing log is no collection).
fn collected(layout: &Layout) -> Collected {
    let mut c = Collected::default();
    let text = std::fs::read_to_string(layout.collected()).unwrap_or_default();
    for line in text.lines() {
        let mut f = line.split(' ').map(|n| n.parse::<u64>().unwrap_or(0));
        c.collections += 1;
        c.removed += f.next().unwrap_or(0);
        c.busy += f.next().unwrap_or(0);
    }
    c
}

/// Checks the audit log, loads the final registry through the authority (a torn document
/// fails to load) and the counter, and checks the acknowledged mutations against them.
fn verify(layout: &Layout, shared: &Shared) -> Result<Report, Failure> {
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| io_failure(p, e));
    let mut violations = std::mem::take(&mut shared.lock().violations);
    let logs = |kind: &str| {
        layout
            .read_logs(kind)
            .map_err(|e| io_failure(&layout.dir, e))
    };
    let audit = check::audit(&logs("audit")?);
    violations.extend(audit.violations.iter().cloned());

    let mut present = BTreeSet::new();
    let registry = Registry::with_options(layout.registry(), crate::env::lease_options());
    match registry.acquire(&Budget::no_wait()) {
        Ok(()) => {
            // Keyed by the form the registry stores (on Windows without `\\?\`).
            let stored = |p: PathBuf| existing_dir(&p).unwrap_or(p);
            let primaries: BTreeMap<PathBuf, u32> = (0..shared.lock().slots.len() as u32)
                .map(|s| (stored(layout.primary(s)), s))
                .collect();
            let roots: BTreeMap<PathBuf, u32> = (0..ROOT_POOL)
                .map(|r| (stored(layout.root(r)), r as u32))
                .collect();
            check::registry_entries(
                &registry.scope(),
                &primaries,
                &roots,
                &mut present,
                &mut violations,
            );
        }
        Err(e) => violations.push(format!("registry at the end: {e}")),
    }
    registry.teardown();
    // The counter is opened under its lease, as every increment does (all workers are dead
    // now): a killed increment's temporary goes, as a store's go when it is opened.
    match leasehold::Lease::try_acquire(layout.counter_lock()) {
        Ok(_lease) => {
            if let Err(e) = leasehold::patterns::durable::remove_temporaries(&layout.counter()) {
                violations.push(format!("cannot clean the counter's temporaries: {e}"));
            }
        }
        Err(e) => violations.push(format!("counter lease at the end: {e}")),
    }
    let counter_text = read(&layout.counter())?;
    let counter = counter_text.trim().parse::<u64>().unwrap_or_else(|_| {
        violations.push(format!("counter torn at the end: {counter_text:?}"));
        0
    });
    let ops = check::ops(&logs("ops")?, &present, counter);
    violations.extend(ops.violations.iter().cloned());
    let temporaries = count_temporaries(layout);
    Ok(Report {
        audit,
        ops,
        violations,
        temporaries,
        gc: collected(layout),
    })
}

/// The checks of a `--document` run: the audit log (no two updates held the document's
/// lease at once), the final document (whole), the acknowledged updates against it (none
/// lost: no two wrote the same version, and the final counter lies between the
/// acknowledged and the attempted updates), and the temporaries: the temporaries killed
/// rewrites left are counted, then one more update's start (the lease, the collection, the
/// read) must leave none.
fn verify_document(layout: &Layout, shared: &Shared) -> Result<Report, Failure> {
    let mut violations = std::mem::take(&mut shared.lock().violations);
    let logs = |kind: &str| {
        layout
            .read_logs(kind)
            .map_err(|e| io_failure(&layout.dir, e))
    };
    let audit = check::audit(&logs("audit")?);
    violations.extend(audit.violations.iter().cloned());
    let temporaries = count_temporaries(layout);
    let doc = leasehold_stores::document::Document::open(
        layout.document(),
        leasehold_stores::document::DocumentOptions::new().json(true),
    );
    let mut n = 0;
    match doc.begin(&Budget::no_wait()) {
        Ok(edit) => {
            match edit
                .current()
                .map(|s| super::worker::document_n(&s.content))
            {
                Some(Ok(v)) => n = v,
                Some(Err(why)) => violations.push(format!("the document at the end: {why}")),
                None if audit.intervals > 0 => {
                    violations.push("the document is missing at the end".to_string());
                }
                None => {}
            }
            edit.abort();
        }
        Err(e) => violations.push(format!("the document at the end: {e}")),
    }
    let after = count_temporaries(layout);
    if after > 0 {
        violations.push(format!(
            "{after} temporaries left after the next update started (the collection under the lease)"
        ));
    }
    let ops = check::ops(&logs("ops")?, &BTreeSet::new(), n);
    violations.extend(ops.violations.iter().cloned());
    Ok(Report {
        audit,
        ops,
        violations,
        temporaries,
        gc: Collected::default(),
    })
}

/// Temporary files that killed rewrites left behind (harmless: never read as the store).
fn count_temporaries(layout: &Layout) -> usize {
    let dirs = [
        layout.dir.clone(),
        layout
            .registry()
            .document
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default(),
    ];
    dirs.iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
        .count()
}

/// Nearest-rank percentile of sorted values, in milliseconds.
fn percentile_ms(sorted: &[u64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let i = rank.clamp(1, sorted.len()) - 1;
    Some(sorted[i] as f64 / 1e6)
}

fn print_report(settings: &Settings, st: &State, r: &Report, elapsed: Duration) {
    let mut lat = r.audit.takeover_ns.clone();
    lat.sort_unstable();
    let pct = |p: f64| percentile_ms(&lat, p);
    let operations = r.ops.registry_acked + r.ops.counter_acked;
    if settings.json {
        let v = json!({
            "workers": settings.workers,
            "seconds": (elapsed.as_secs_f64() * 10.0).round() / 10.0,
            "kills": st.kills,
            "kills_by_phase": st.landed,
            "operations": operations,
            "registry_operations": r.ops.registry_acked,
            "counter_operations": r.ops.counter_acked,
            "document": settings.document,
            "lease_intervals": r.audit.intervals,
            "takeovers": lat.len(),
            "takeover_latency_ms": {
                "p50": pct(50.0), "p90": pct(90.0), "p99": pct(99.0), "max": pct(100.0),
            },
            "temporaries_left": r.temporaries,
            "collections": r.gc.collections,
            "collections_busy": r.gc.busy,
            "lock_files_collected": r.gc.removed,
            "violations": r.violations.len(),
            "violation_details": r.violations,
        });
        println!("{v}");
        return;
    }
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2} ms"));
    let landed: Vec<String> = st.landed.iter().map(|(k, v)| format!("{k} {v}")).collect();
    println!(
        "torture: {} workers, {:.1} s",
        settings.workers,
        elapsed.as_secs_f64()
    );
    println!("kills: {} ({})", st.kills, landed.join(", "));
    if settings.document {
        println!("operations: {operations} acknowledged document updates");
    } else {
        println!(
            "operations: {operations} acknowledged (registry {}, counter {})",
            r.ops.registry_acked, r.ops.counter_acked
        );
    }
    println!(
        "takeovers: {} (latency kill → next acquisition: p50 {}, p90 {}, p99 {}, max {})",
        lat.len(),
        ms(pct(50.0)),
        ms(pct(90.0)),
        ms(pct(99.0)),
        ms(pct(100.0))
    );
    println!("lease intervals checked: {}", r.audit.intervals);
    println!("temporaries left by killed rewrites: {}", r.temporaries);
    if settings.gc {
        println!(
            "collections: {} ({} found the namespace busy), lock files removed: {}",
            r.gc.collections, r.gc.busy, r.gc.removed
        );
    }
    println!("violations: {}", r.violations.len());
    for v in &r.violations {
        println!("  {v}");
    }
}
