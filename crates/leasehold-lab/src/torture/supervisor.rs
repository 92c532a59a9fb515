//! The supervisor: starts and restarts workers, kills them, then checks and reports.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use leasehold::Budget;
use leasehold_stores::registry::{Registry, RegistryPaths, existing_dir};
use serde_json::json;

use super::{AppendLog, Layout, ROOT_POOL, Rng, check, now_ns};
use crate::exit::{Failure, OK, Outcome};
use crate::platform;
use crate::sync;

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
    /// The stores lie below a directory another user swaps for fresh ones: see `TortureArgs`.
    pub ancestor: bool,
    /// `--two-mounts`: a second mount of `dir`'s directory (see `TortureArgs`).
    pub two_mounts: Option<PathBuf>,
    /// `--two-mounts`: the document's record lease TTL.
    pub record_ttl: Duration,
}

/// The phases a hunting pause aims at in a `--two-mounts` run: inside the update's closure
/// (the lease verified next, at the write), and between the lease's verification and the
/// rename (the fencing token compared next).
const PAUSED: [&str; 2] = ["closure", "write-Synced"];

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
    /// The phase a hunting kill (or move) waits for.
    hunt: Option<&'static str>,
    /// The hunt moves the stores' directory instead of killing (`--ancestor-rename`).
    hunt_moves: bool,
    /// The hunt pauses its worker past the TTL instead of killing it (`--two-mounts`).
    hunt_pauses: bool,
    /// Pauses past the TTL (`--two-mounts`), counted among the kills too.
    pauses: u64,
    /// Moves of the stores' directory, by where they landed.
    moves: BTreeMap<String, u64>,
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
    /// The attacker of an `--ancestor-rename` run.
    attacker: Mutex<Option<Attacker>>,
}

/// The attacker process (running as another user) and its pipes: one `move` line asked,
/// one `moved N T0 T1` line answered.
struct Attacker {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Shared {
    /// Has the attacker move the stores' directory once, records the move in the audit log
    /// and counts it as landed `landed`. A failed move is a violation (the attacker is then
    /// gone: every later move fails at once).
    fn move_stores(&self, landed: &str) {
        let mut guard = sync::lock(&self.attacker);
        let Some(a) = guard.as_mut() else { return };
        let mut line = String::new();
        let answered = writeln!(a.stdin, "move")
            .and_then(|()| a.stdin.flush())
            .and_then(|()| a.stdout.read_line(&mut line));
        let record = match (answered, line.strip_prefix("moved ")) {
            (Ok(_), Some(rest)) => format!("move {}", rest.trim()),
            (answered, _) => {
                *guard = None;
                self.lock()
                    .violations
                    .push(format!("the attacker did not move the stores' directory ({answered:?}); see its stderr in the run's stderr.log"));
                return;
            }
        };
        drop(guard);
        if let Err(e) = self.audit.record(&record) {
            self.lock()
                .violations
                .push(format!("cannot record a move: {e}"));
        }
        *self.lock().moves.entry(landed.to_string()).or_default() += 1;
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        sync::lock(&self.state)
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
        attacker: Mutex::new(None),
    });
    if settings.ancestor {
        let attacker = start_attacker(&layout)?;
        *sync::lock(&shared.attacker) = Some(attacker);
    }
    let exe = std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find this executable: {e}")))?;
    // The run's directory through the second mount: the same name under DIR2.
    let second = match (&settings.two_mounts, layout.dir.file_name()) {
        (Some(dir2), Some(name)) => {
            let through = dir2.join(name);
            if !through.is_dir() {
                return Err(Failure::usage(format!(
                    "torture --two-mounts: {} does not show the run's directory {}: DIR2 must be a second mount of --dir's directory",
                    through.display(),
                    layout.dir.display()
                )));
            }
            Some(through)
        }
        _ => None,
    };
    let threads: Vec<_> = (0..settings.workers as usize)
        .map(|slot| {
            let (shared, layout, exe) = (shared.clone(), layout.clone(), exe.clone());
            let flags = Flags {
                gc: settings.gc,
                break_exclusion: settings.break_exclusion,
                descendants: settings.descendants,
                document: settings.document,
                ancestor: settings.ancestor,
                two_mounts: second.clone().map(|d| (d, settings.record_ttl)),
            };
            thread::spawn(move || tend(&shared, &layout, &exe, slot, &flags))
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
    let attacker = sync::lock(&shared.attacker).take();
    if let Some(Attacker {
        mut child, stdin, ..
    }) = attacker
    {
        drop(stdin); // end of its input: it exits
        let _ = child.wait();
    }
    let elapsed = started.elapsed();
    let report = if settings.document {
        verify_document(&layout, &shared)?
    } else if settings.ancestor {
        verify_ancestor(&layout, &shared)?
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
    let mut layout = Layout::new(&dir);
    layout.ancestor = settings.ancestor;
    if settings.two_mounts.is_some() {
        layout.record_ttl = Some(settings.record_ttl);
    }
    #[cfg(unix)]
    if settings.ancestor {
        // Everyone may rename in `shared/` (not sticky), and the attacker must reach it.
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m))
                .map_err(|e| io_failure(p, e))
        };
        mode(&dir, 0o755)?;
        mkdir(&layout.stores())?;
        mode(&layout.shared(), 0o777)?;
        std::fs::write(layout.generation_mark(), "0\n")
            .map_err(|e| io_failure(&layout.generation_mark(), e))?;
    }
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
        // With --ancestor-rename, half the events move the stores' directory instead: at a
        // random moment, or in a hunted phase.
        let moving = settings.ancestor && rng.below(2) == 0;
        // Without the opt-in no worker ever reaches a phase: every event is at random.
        let refusing = settings.ancestor && !crate::env::lease_options().allows_shared_state();
        if moving && (refusing || rng.below(3) == 0) {
            shared.move_stores("random");
            continue;
        }
        if !moving && (refusing || rng.below(3) == 0) {
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
        // With --two-mounts, half the hunts pause their worker past the TTL instead.
        let pausing = settings.two_mounts.is_some() && rng.below(2) == 0;
        let phase = match pausing {
            true => PAUSED[rng.below(PAUSED.len() as u64) as usize],
            false => hunted[rng.below(hunted.len() as u64) as usize],
        };
        let mut st = shared.lock();
        st.hunt = Some(phase);
        st.hunt_moves = moving;
        st.hunt_pauses = pausing;
        let patience = HUNT_PATIENCE.min(deadline.saturating_duration_since(Instant::now()));
        let (mut st, _) = shared
            .hunted
            .wait_timeout_while(st, patience, |st| st.hunt.is_some())
            .unwrap_or_else(PoisonError::into_inner);
        st.hunt = None;
    }
}

/// The worker flags of a run.
#[derive(Debug, Clone)]
struct Flags {
    gc: bool,
    break_exclusion: bool,
    descendants: bool,
    document: bool,
    ancestor: bool,
    /// `--two-mounts`: the run's directory through the second mount, and the TTL.
    two_mounts: Option<(PathBuf, Duration)>,
}

/// Keeps one worker slot busy: starts an incarnation, answers its phases (or kills it in
/// the hunted one), reaps it, and starts the next until the run stops.
fn tend(shared: &Shared, layout: &Layout, exe: &Path, slot: usize, flags: &Flags) {
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
            cmd.args(crate::platform::WORKER_ARGS)
                .arg("torture")
                .arg(format!("{slot}:{generation}"))
                .arg("--dir")
                .arg(&layout.dir)
                .args(flags.gc.then_some("--gc"))
                .args(flags.break_exclusion.then_some("--break-exclusion"))
                .args(flags.descendants.then_some("--descendants"))
                .args(flags.document.then_some("--document"))
                .args(flags.ancestor.then_some("--ancestor-rename"))
                .args(flags.two_mounts.iter().flat_map(|(_, ttl)| {
                    ["--record-ttl-ms".to_string(), ttl.as_millis().to_string()]
                }))
                .args(
                    flags
                        .two_mounts
                        .iter()
                        .filter(|_| slot % 2 == 1)
                        .flat_map(|(via, _)| [std::ffi::OsString::from("--via"), via.into()]),
                )
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
                if st.hunt.is_some_and(|h| h == line) && st.hunt_moves {
                    // The move lands while this worker waits in the phase; then it goes on.
                    st.hunt = None;
                    drop(st);
                    shared.move_stores(&line);
                    shared.hunted.notify_all();
                } else if st.hunt.is_some_and(|h| h == line) && st.hunt_pauses {
                    // Paused past the TTL (its lease's renewals stop with it), then let go:
                    // a successor may have taken the lease over meanwhile.
                    st.hunt = None;
                    let child = st.slots[slot].child.as_ref().map(Child::id);
                    if !st.stopping {
                        st.kills += 1;
                        st.pauses += 1;
                        *st.landed.entry(format!("pause-{line}")).or_default() += 1;
                    }
                    drop(st);
                    shared.hunted.notify_all();
                    if let Some(pid) = child {
                        let ttl = flags.two_mounts.as_ref().map_or(Duration::ZERO, |t| t.1);
                        platform::pause(pid, ttl * 2);
                    }
                } else if st.hunt.is_some_and(|h| h == line) && shared.kill(&mut st, slot, &line) {
                    st.hunt = None;
                    shared.hunted.notify_all();
                    continue;
                } else {
                    drop(st);
                }
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
    /// An `--ancestor-rename` run's figures.
    ancestor: Option<Ancestor>,
}

/// What an `--ancestor-rename` run found.
struct Ancestor {
    /// LEASEHOLD_ALLOW_SHARED=1 was set (else every acquisition must have been refused).
    opted_in: bool,
    audit: check::AncestorReport,
}

/// Starts the attacker of an `--ancestor-rename` run: this binary as `nobody`, through
/// util-linux `setpriv`.
fn start_attacker(layout: &Layout) -> Result<Attacker, Failure> {
    #[cfg(unix)]
    if !rustix::process::getuid().is_root() {
        return Err(Failure::usage(
            "torture --ancestor-rename: needs root, to run the attacker as another user (nobody)",
        ));
    }
    let exe = std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find this executable: {e}")))?;
    let err = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(layout.stderr())
        .map_err(|e| io_failure(&layout.stderr(), e))?;
    let mut child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&exe)
        .args(crate::platform::WORKER_ARGS)
        .args(["torture", "0:0", "--dir"])
        .arg(&layout.dir)
        .args(["--ancestor-rename", "--attacker"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .map_err(|e| {
            Failure::failed(format!(
                "torture --ancestor-rename: cannot start the attacker as nobody through setpriv (util-linux): {e}"
            ))
        })?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(Failure::failed("torture: the attacker's pipes are missing"));
    };
    Ok(Attacker {
        child,
        stdin,
        stdout: BufReader::new(stdout),
    })
}

/// The checks of an `--ancestor-rename` run. Without the opt-in: no lease was ever held, no
/// operation acknowledged, and some were refused. With it: the overlaps and stops against
/// the moves ([`check::ancestor_audit`]), and every store generation — each replaced
/// `shared/generation.N`, and `shared/area` — against the operations placed in it
/// ([`check::split_by_generation`], then [`check::ops`]).
fn verify_ancestor(layout: &Layout, shared: &Shared) -> Result<Report, Failure> {
    let mut violations = std::mem::take(&mut shared.lock().violations);
    let logs = |kind: &str| {
        layout
            .read_logs(kind)
            .map_err(|e| io_failure(&layout.dir, e))
    };
    let (audit, moves) = check::ancestor_audit(&logs("audit")?);
    violations.extend(audit.violations.iter().cloned());
    let ops_text = logs("ops")?;
    let ops = check::ops_seen(&ops_text);
    violations.extend(ops.violations.iter().cloned());
    let options = crate::env::lease_options();
    let opted_in = options.allows_shared_state();
    let mut audit = audit;
    if !opted_in {
        if audit.intervals > 0 {
            violations.push(format!(
                "{} lease(s) held under a chain another user may rename (every acquisition must be refused)",
                audit.intervals
            ));
        }
        let acked = ops.registry_acked + ops.counter_acked;
        if acked > 0 {
            violations.push(format!(
                "{acked} operation(s) acknowledged under a chain another user may rename"
            ));
        }
        if ops.refused == 0 {
            violations.push("no acquisition was refused: the run proves nothing".into());
        }
    } else {
        let last = moves.last().map_or(0, |m| m.n);
        let stored = |p: PathBuf| existing_dir(&p).unwrap_or(p);
        let primaries: BTreeMap<PathBuf, u32> = (0..shared.lock().slots.len() as u32)
            .map(|s| (stored(layout.primary(s)), s))
            .collect();
        let roots: BTreeMap<PathBuf, u32> = (0..ROOT_POOL)
            .map(|r| (stored(layout.root(r)), r as u32))
            .collect();
        let (texts, across) = check::split_by_generation(&ops_text, last);
        audit.across_moves = across;
        for (n, text) in texts.into_iter().enumerate() {
            let n = n as u64;
            let dir = if n == last {
                layout.stores()
            } else {
                layout.shared().join(format!("{}.{n}", super::GENERATION))
            };
            let mut found = Vec::new();
            let mut present = BTreeSet::new();
            let home = dir.join("home");
            let registry = Registry::with_options(RegistryPaths::in_home(&home, None), options);
            match registry.acquire(&Budget::no_wait()) {
                Ok(()) => check::registry_entries(
                    &registry.scope(),
                    &primaries,
                    &roots,
                    &mut present,
                    &mut found,
                ),
                Err(e) => found.push(format!("registry at the end: {e}")),
            }
            registry.teardown();
            let counter = dir.join("counter");
            match options.acquire(dir.join("counter.lock"), &Budget::no_wait()) {
                Ok(_lease) => {
                    if let Err(e) = leasehold::patterns::durable::remove_temporaries(&counter) {
                        found.push(format!("cannot clean the counter's temporaries: {e}"));
                    }
                }
                Err(e) => found.push(format!("counter lease at the end: {e}")),
            }
            let text_of_counter = std::fs::read_to_string(&counter).unwrap_or_default();
            let value = text_of_counter.trim().parse::<u64>().unwrap_or_else(|_| {
                found.push(format!("counter torn at the end: {text_of_counter:?}"));
                0
            });
            found.extend(check::ops(&text, &present, value).violations);
            violations.extend(
                found
                    .into_iter()
                    .map(|v| format!("store generation {n}: {v}")),
            );
        }
    }
    Ok(Report {
        audit: check::AuditReport {
            intervals: audit.intervals,
            ..check::AuditReport::default()
        },
        ops,
        violations,
        temporaries: 0,
        gc: Collected::default(),
        ancestor: Some(Ancestor { opted_in, audit }),
    })
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
        ancestor: None,
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
    let audit = match layout.record_ttl {
        Some(_) => check::audit_acknowledged(&logs("audit")?),
        None => check::audit(&logs("audit")?),
    };
    violations.extend(audit.violations.iter().cloned());
    let temporaries = count_temporaries(layout);
    let doc =
        leasehold_stores::document::Document::open(layout.document(), layout.document_options());
    let mut n = 0;
    // Every worker is gone; under the record lease a baton the last holder left through the
    // other mount is another host's to the protocol (its identity names its mount), so it is
    // taken over after its TTL, not at once.
    let budget = match layout.record_ttl {
        Some(ttl) => Budget::timeout(ttl * 3 + Duration::from_secs(1)),
        None => Budget::no_wait(),
    };
    match doc.begin(&budget) {
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
        ancestor: None,
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
            "two_mounts": settings.two_mounts.is_some(),
            "pauses": st.pauses,
            "refused_after_pause": r.audit.stops,
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
        let mut v = v;
        if let Some(a) = &r.ancestor {
            let mut stops = a.audit.stop_ns.clone();
            stops.sort_unstable();
            let ambiguous = a.audit.across_moves;
            v["ancestor_rename"] = json!({
                "opted_in": a.opted_in,
                "moves": a.audit.moves,
                "moves_by_phase": st.moves,
                "generations": a.audit.generations,
                "refused": r.ops.refused,
                "lost": r.ops.lost,
                "operations_across_a_move": ambiguous,
                "overlaps_across_moves": a.audit.overlaps_across_moves,
                "stops": stops.len(),
                "stop_after_move_ms": {
                    "p50": percentile_ms(&stops, 50.0),
                    "p99": percentile_ms(&stops, 99.0),
                    "max": percentile_ms(&stops, 100.0),
                },
                "stop_bound_ms": (check::RECHECK_NS + check::STOP_ALLOWANCE_NS) / 1_000_000,
            });
        }
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
    if settings.two_mounts.is_some() {
        println!(
            "pauses past the TTL (among the kills): {}; updates refused once resumed (deposed): {}",
            st.pauses, r.audit.stops
        );
    }
    if settings.document {
        println!("operations: {operations} acknowledged document updates");
    } else {
        println!(
            "operations: {operations} acknowledged (registry {}, counter {})",
            r.ops.registry_acked, r.ops.counter_acked
        );
    }
    if r.ancestor.is_none() {
        println!(
            "takeovers: {} (latency kill → next acquisition: p50 {}, p90 {}, p99 {}, max {})",
            lat.len(),
            ms(pct(50.0)),
            ms(pct(90.0)),
            ms(pct(99.0)),
            ms(pct(100.0))
        );
    }
    println!("lease intervals checked: {}", r.audit.intervals);
    if r.ancestor.is_none() {
        println!("temporaries left by killed rewrites: {}", r.temporaries);
    }
    if let Some(a) = &r.ancestor {
        let mut stops = a.audit.stop_ns.clone();
        stops.sort_unstable();
        let moved: Vec<String> = st.moves.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let ambiguous = a.audit.across_moves;
        println!(
            "ancestor renames ({}): {} moves ({}), {} store generations",
            if a.opted_in {
                "LEASEHOLD_ALLOW_SHARED=1"
            } else {
                "no opt-in: every acquisition must be refused"
            },
            a.audit.moves,
            moved.join(", "),
            a.audit.generations
        );
        println!(
            "operations refused (untrusted chain): {}, lost to a move (refused, or not written): {}, across a move or killed: {ambiguous}",
            r.ops.refused, r.ops.lost
        );
        println!(
            "overlaps across a move: {}; COMMANDs stopped after their lock moved: {} (move end → recorded end: p50 {}, p99 {}, max {}; bound {} ms)",
            a.audit.overlaps_across_moves,
            stops.len(),
            ms(percentile_ms(&stops, 50.0)),
            ms(percentile_ms(&stops, 99.0)),
            ms(percentile_ms(&stops, 100.0)),
            (check::RECHECK_NS + check::STOP_ALLOWANCE_NS) / 1_000_000
        );
    }
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
