//! The power-loss torture: leasehold's stores driven on a crashfs mount that loses power at
//! random moments.
//!
//! Each round mounts the backing directory, starts the drivers (threads of this process,
//! each spawning real `leasehold` processes — and `crashfs session-batch` for batched
//! session appends — in their own process groups) and, after a random moment, cuts the
//! power: every worker process group is SIGKILLed and reaped, the volatile layer is dropped
//! (per the cut policy), the file system is unmounted and mounted again from the backing
//! directory — the reboot — and the checker proves, through the new mount:
//!
//! * every acknowledged registry mutation (one-shot `registry add/remove` exiting 0,
//!   `registry serve` answering ok) is in `registry list --json` and in the document;
//! * every acknowledged session record (a `session append` that exited 0; a batch the
//!   batched writer answered `ok` for) is in the log, in order, and nothing is there that
//!   was never sent;
//! * every acknowledged update of a `Document` (`leasehold doc update` exiting 0, each
//!   driver incrementing a counter of its own in one shared JSON document) is in the
//!   document: its counter is at least the acknowledged value and at most one above it (an
//!   update killed in flight may have landed), and the temporaries a cut left beside the
//!   document are gone once another update has been acknowledged;
//! * every acknowledged result transition (`stage`, `finish`, `apply`, `discard` exiting 0)
//!   is visible: candidate files and record, publication, applied files, removals;
//! * no document is torn (every registry document, result record and publication that
//!   exists parses), no session log has an unparseable line before its end (a torn *tail*
//!   is allowed after a cut and must be gone once the next writer has appended), and lock
//!   files and the result-lock namespace are intact (regular files, hex names).
//!
//! What was in flight at the cut (killed before its acknowledgement) may or may not have
//! landed; the checker accepts either and afterwards takes what the disk shows as the new
//! truth (it is durable now).
//!
//! The drivers never act on the mount themselves except through the spawned processes: the
//! acknowledgement is what the driver observed (an exit status, a response line) before the
//! cut, so "acknowledged" means exactly what a user of the CLI would rely on.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::fs::Mounted;
use crate::model::{CutPolicy, Faults, Rng};

/// The torture's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// How many power cuts.
    pub cuts: u32,
    /// Stop after this long even if fewer cuts were made.
    pub seconds: u64,
    /// The `leasehold` binary.
    pub leasehold: PathBuf,
    /// This binary (for the batched session writer).
    pub crashfs: PathBuf,
    /// Where the backing directory and the mount point go (a fresh temporary directory if
    /// `None`).
    pub work: Option<PathBuf>,
    /// Seed of every random choice (moments, cut prefixes, operations).
    pub seed: u64,
    /// How much of the volatile layer a cut keeps.
    pub policy: CutPolicy,
    /// Sync lies (the self-check).
    pub faults: Faults,
    /// The longest moment between the start of a round and its cut.
    pub max_round: Duration,
}

/// One round's and the whole run's figures.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Power cuts made.
    pub cuts: u32,
    /// Acknowledged registry mutations checked (one-shot).
    pub registry_oneshot: u64,
    /// Acknowledged registry mutations checked (`serve`).
    pub registry_serve: u64,
    /// Acknowledged session records checked (per-record fsync, the CLI).
    pub session_records: u64,
    /// Acknowledged session records checked (batched).
    pub session_batched: u64,
    /// Acknowledged result transitions checked.
    pub result_transitions: u64,
    /// Acknowledged document updates checked.
    pub document_updates: u64,
    /// Operations in flight at a cut (killed before their acknowledgement).
    pub in_flight: u64,
    /// Pending file-system operations kept / dropped / torn by the cuts.
    pub ops_kept: u64,
    /// See `ops_kept`.
    pub ops_dropped: u64,
    /// Writes kept in part.
    pub writes_torn: u64,
    /// Session logs found with a torn tail after a cut.
    pub torn_tails: u64,
    /// Torn tails that the next writer was seen to have cut away.
    pub tails_repaired: u64,
    /// Documents and logs examined for tearing.
    pub documents_checked: u64,
    /// Lock files examined.
    pub lock_files_checked: u64,
    /// Acknowledged operations missing after a cut.
    pub lost: u64,
    /// Torn documents (or logs torn before their end).
    pub torn: u64,
    /// Every violation, described.
    pub violations: Vec<String>,
    /// Wall-clock time.
    pub elapsed: Duration,
}

impl Report {
    /// Acknowledged operations checked, all kinds.
    pub fn acknowledged(&self) -> u64 {
        self.registry_oneshot
            + self.registry_serve
            + self.session_records
            + self.session_batched
            + self.result_transitions
            + self.document_updates
    }

    fn violation(&mut self, kind: Violation, what: String) {
        match kind {
            Violation::Lost => self.lost += 1,
            Violation::Torn => self.torn += 1,
            Violation::Other => {}
        }
        self.violations.push(what);
    }

    /// The summary printed at the end.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "power cuts: {} in {:.1} s",
            self.cuts,
            self.elapsed.as_secs_f64()
        );
        let _ = writeln!(
            s,
            "acknowledged operations checked: {} (registry one-shot {}, registry serve {}, \
             session records {} per-record + {} batched, result transitions {}, \
             document updates {})",
            self.acknowledged(),
            self.registry_oneshot,
            self.registry_serve,
            self.session_records,
            self.session_batched,
            self.result_transitions,
            self.document_updates
        );
        let _ = writeln!(
            s,
            "in flight at a cut (unacknowledged, either outcome accepted): {}",
            self.in_flight
        );
        let _ = writeln!(
            s,
            "unsynced file-system operations at the cuts: {} dropped, {} kept, {} writes torn",
            self.ops_dropped, self.ops_kept, self.writes_torn
        );
        let _ = writeln!(
            s,
            "documents and logs checked: {}; lock files checked: {}; torn session tails \
             found after a cut: {}, seen repaired by the next writer: {}",
            self.documents_checked, self.lock_files_checked, self.torn_tails, self.tails_repaired
        );
        let _ = writeln!(
            s,
            "lost: {}; torn: {}; violations: {}",
            self.lost,
            self.torn,
            self.violations.len()
        );
        s
    }
}

#[derive(Debug, Clone, Copy)]
enum Violation {
    Lost,
    Torn,
    Other,
}

/// Runs the torture. `Err` only for a harness failure (cannot mount, cannot spawn); the
/// stores' violations are in the report.
pub fn run(config: &Config) -> io::Result<Report> {
    let started = Instant::now();
    let _tmp;
    let work = match &config.work {
        Some(w) => {
            fs::create_dir_all(w)?;
            w.clone()
        }
        None => {
            _tmp = tempfile::Builder::new()
                .prefix("crashfs-torture")
                .tempdir()?;
            _tmp.path().to_path_buf()
        }
    };
    let layout = Layout::create(&work)?;
    let mut world = World::new(&layout);
    let mut report = Report::default();
    let mut rng = Rng::new(config.seed);
    let deadline = started + Duration::from_secs(config.seconds);
    let trace = std::env::var_os("CRASHFS_TRACE").is_some();
    let t = |what: &str| {
        if trace {
            eprintln!(
                "crashfs torture: {:8.3} s {what}",
                started.elapsed().as_secs_f64()
            );
        }
    };
    loop {
        t("mount");
        // Power on: mount what is on the disk. After a cut this is the reboot, and the
        // check comes first, before any worker runs again.
        let mounted = Mounted::mount(&layout.backing, &layout.mnt, config.faults)
            .map_err(|e| step(e, "mount", report.cuts))?;
        if report.cuts > 0 {
            t("check");
            world.check(config, &layout, &mut report);
        }
        if report.cuts >= config.cuts || Instant::now() >= deadline || report.violations.len() > 50
        {
            mounted
                .unmount()
                .map_err(|e| step(e, "final unmount", report.cuts))?;
            break;
        }
        let moment = Duration::from_millis(
            20 + rng.upto(u64::try_from(config.max_round.as_millis()).unwrap_or(1000)),
        );
        let round_seed = rng.next_u64();
        t("round");
        world.round(config, &layout, moment, round_seed);
        t("cut");
        let cut = mounted
            .handle()
            .cut(config.policy, rng.next_u64())
            .map_err(|e| step(e, "power cut", report.cuts))?;
        report.ops_kept += cut.kept;
        report.ops_dropped += cut.dropped;
        report.writes_torn += cut.torn;
        t("unmount");
        mounted
            .unmount()
            .map_err(|e| step(e, "unmount after the cut", report.cuts))?;
        report.cuts += 1;
    }
    report.registry_oneshot = world.acks_oneshot;
    report.registry_serve = world.acks_serve;
    report.in_flight = world.in_flight;
    report.elapsed = started.elapsed();
    Ok(report)
}

/// A harness error with the step it happened at (after how many cuts), so that a failure
/// seen once in CI can be placed: `Software caused connection abort` alone, as CI printed
/// once, names no step.
fn step(e: io::Error, what: &str, cuts: u32) -> io::Error {
    io::Error::new(e.kind(), format!("{what} (after {cuts} power cuts): {e}"))
}

/// Where everything lives. Only `dirs/` (the registry's primaries and roots, user data the
/// registry points at) is created before the first mount; every store creates its own
/// directories on the mount, so their creation is under test too.
struct Layout {
    backing: PathBuf,
    mnt: PathBuf,
    sources: PathBuf,
}

const ONESHOT_WORKERS: usize = 2;
const SERVE_PRIMARIES: usize = 2;
const SESSION_WORKERS: usize = 2;
const BATCH_WORKERS: usize = 1;
const RESULT_WORKERS: usize = 2;
/// Drivers of `leasehold doc update` on one shared document, each with a counter of its own.
const DOC_WORKERS: usize = 2;
/// The shared document, on the mount.
const DOC: &str = "docs/settings.json";
/// How much padding `doc_bump` keeps in the document: it spans pages, so a torn write shows.
const DOC_PAD: usize = 5000;
const ROOTS: usize = 4;
const SOURCES: usize = 3;

impl Layout {
    fn create(work: &Path) -> io::Result<Layout> {
        let backing = work.join("backing");
        let mnt = work.join("mnt");
        let sources = work.join("sources");
        for d in [&backing, &mnt, &sources] {
            if d.exists() {
                fs::remove_dir_all(d)?;
            }
            fs::create_dir_all(d)?;
        }
        for i in 0..ONESHOT_WORKERS {
            fs::create_dir_all(backing.join(format!("dirs/p{i}")))?;
        }
        for i in 0..SERVE_PRIMARIES {
            fs::create_dir_all(backing.join(format!("dirs/q{i}")))?;
        }
        for i in 0..ROOTS {
            fs::create_dir_all(backing.join(format!("dirs/r{i}")))?;
        }
        for k in 0..SOURCES {
            let s = sources.join(k.to_string());
            fs::create_dir_all(s.join("sub"))?;
            fs::write(s.join("a.txt"), format!("source {k}: a\n"))?;
            fs::write(
                s.join("sub/b.txt"),
                format!("source {k}: b\n").repeat(k + 1),
            )?;
        }
        Ok(Layout {
            backing,
            mnt,
            sources,
        })
    }

    fn m(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    fn source_files(&self, k: usize) -> Vec<(String, Vec<u8>)> {
        let s = self.sources.join(k.to_string());
        ["a.txt", "sub/b.txt"]
            .iter()
            .map(|rel| (rel.to_string(), fs::read(s.join(rel)).unwrap_or_default()))
            .collect()
    }
}

/// What the drivers know was acknowledged, carried from round to round.
struct World {
    /// (home, primary, root) → present, or `None` when the last mutation was not
    /// acknowledged (either outcome accepted at the next check).
    registry: BTreeMap<Pair, Option<bool>>,
    /// Acknowledged registry mutations (one-shot, serve).
    acks_oneshot: u64,
    acks_serve: u64,
    sessions: BTreeMap<String, SessionExpect>,
    results: BTreeMap<String, ResultExpect>,
    next_result: u64,
    in_flight: u64,
    /// Logs that had a torn tail at the last check: it must be gone once written again.
    torn_logs: BTreeSet<String>,
    /// Each document driver's counter.
    docs: BTreeMap<String, DocExpect>,
    /// The temporaries beside the document at the last check (killed updates' leftovers).
    doc_temporaries: BTreeSet<String>,
}

/// What a document driver knows of its counter.
#[derive(Debug, Default, Clone)]
struct DocExpect {
    /// The value after the last acknowledged update (or the last check).
    value: u64,
    /// Updates since then that were not acknowledged (killed, or failed) and may have landed.
    maybe: u64,
    /// Acknowledged updates not yet counted by a check.
    unchecked: u64,
}

#[derive(Debug, Default, Clone)]
struct SessionExpect {
    batched: bool,
    acked: Vec<u64>,
    maybe: BTreeSet<u64>,
    next: u64,
    /// How many records the log held at the last check.
    acked_at_check: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResultState {
    Staged,
    Published,
    Applied,
    Discarded,
}

#[derive(Debug, Clone)]
struct ResultExpect {
    source: usize,
    state: ResultState,
    /// The last operation was not acknowledged: the ID is only checked for tearing, then
    /// abandoned.
    uncertain: bool,
    /// Acknowledged transitions not yet counted by a check.
    unchecked: u64,
}

/// The processes of the current round, so the cut can SIGKILL every one of them.
struct Power {
    on: bool,
    groups: BTreeSet<i32>,
}

static POWER: Mutex<Power> = Mutex::new(Power {
    on: false,
    groups: BTreeSet::new(),
});

fn power() -> std::sync::MutexGuard<'static, Power> {
    POWER.lock().unwrap_or_else(|p| p.into_inner())
}

/// Spawns `cmd` in its own process group, unless the power is off; registers the group.
fn spawn(cmd: &mut Command) -> Option<Child> {
    let mut p = power();
    if !p.on {
        return None;
    }
    cmd.process_group(0);
    match cmd.spawn() {
        Ok(child) => {
            p.groups.insert(i32::try_from(child.id()).unwrap_or(0));
            Some(child)
        }
        Err(e) => {
            eprintln!("crashfs torture: cannot spawn {cmd:?}: {e}");
            None
        }
    }
}

/// Reaps `child` and forgets its group.
fn reap(mut child: Child) -> Option<std::process::ExitStatus> {
    let status = child.wait().ok();
    power()
        .groups
        .remove(&i32::try_from(child.id()).unwrap_or(0));
    status
}

/// The cut, as far as processes go: no new spawn, SIGKILL to every registered group.
fn kill_all() {
    let mut p = power();
    p.on = false;
    for g in &p.groups {
        if let Some(pid) = rustix::process::Pid::from_raw(*g) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

fn powered() -> bool {
    power().on
}

/// A registry pair: (home, primary, root).
type Pair = (String, String, String);

/// One driver's outcome of a round.
#[derive(Default)]
struct Outcome {
    /// (pair, acknowledged state or `None` when unknown, whether `serve` did it).
    registry: Vec<(Pair, Option<bool>, bool)>,
    sessions: Vec<(String, SessionExpect)>,
    results: Vec<(String, ResultExpect)>,
    docs: Vec<(String, DocExpect)>,
    in_flight: u64,
}

impl World {
    fn new(_layout: &Layout) -> World {
        let mut sessions = BTreeMap::new();
        for w in 0..SESSION_WORKERS {
            sessions.insert(format!("rec-{w}"), SessionExpect::default());
        }
        for w in 0..BATCH_WORKERS {
            sessions.insert(
                format!("batch-{w}"),
                SessionExpect {
                    batched: true,
                    ..SessionExpect::default()
                },
            );
        }
        World {
            registry: BTreeMap::new(),
            acks_oneshot: 0,
            acks_serve: 0,
            sessions,
            results: BTreeMap::new(),
            next_result: 0,
            in_flight: 0,
            torn_logs: BTreeSet::new(),
            docs: (0..DOC_WORKERS)
                .map(|w| (format!("w{w}"), DocExpect::default()))
                .collect(),
            doc_temporaries: BTreeSet::new(),
        }
    }

    /// Runs every driver until the cut at `moment`, then kills every worker.
    fn round(&mut self, config: &Config, layout: &Layout, moment: Duration, seed: u64) {
        power().on = true;
        let mut seeds = Rng::new(seed);
        let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
            let mut handles = Vec::new();
            for w in 0..ONESHOT_WORKERS {
                let s = seeds.next_u64();
                handles.push(scope.spawn(move || oneshot_driver(config, layout, w, s)));
            }
            {
                let s = seeds.next_u64();
                handles.push(scope.spawn(move || serve_driver(config, layout, s)));
            }
            for (id, exp) in self.sessions.clone() {
                let s = seeds.next_u64();
                handles.push(scope.spawn(move || session_driver(config, layout, id, exp, s)));
            }
            for (key, exp) in self.docs.clone() {
                let s = seeds.next_u64();
                handles.push(scope.spawn(move || doc_driver(config, layout, key, exp, s)));
            }
            // Results: continue the certain, unfinished IDs; each worker also starts new ones.
            let mut per_worker: Vec<Vec<(String, ResultExpect)>> = vec![Vec::new(); RESULT_WORKERS];
            let mut i = 0;
            for (id, exp) in &self.results {
                if !exp.uncertain
                    && matches!(exp.state, ResultState::Staged | ResultState::Published)
                {
                    if let Some(v) = per_worker.get_mut(i % RESULT_WORKERS) {
                        v.push((id.clone(), exp.clone()));
                    }
                    i += 1;
                }
            }
            for (w, ids) in per_worker.into_iter().enumerate() {
                let s = seeds.next_u64();
                let first = self.next_result;
                handles.push(scope.spawn(move || result_driver(config, layout, w, ids, first, s)));
            }
            // The random moment of the cut. (Not a synchronisation: any moment is a valid
            // moment to lose power.)
            std::thread::sleep(moment);
            kill_all();
            if std::env::var_os("CRASHFS_TRACE").is_some() {
                eprintln!("crashfs torture: killed after {moment:?}");
            }
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        });
        self.next_result += 1;
        for o in outcomes {
            self.in_flight += o.in_flight;
            for (key, state, serve) in o.registry {
                match (state, serve) {
                    (Some(_), true) => self.acks_serve += 1,
                    (Some(_), false) => self.acks_oneshot += 1,
                    (None, _) => {}
                }
                self.registry.insert(key, state);
            }
            for (id, exp) in o.sessions {
                self.sessions.insert(id, exp);
            }
            for (id, exp) in o.results {
                self.results.insert(id, exp);
            }
            for (key, exp) in o.docs {
                self.docs.insert(key, exp);
            }
        }
    }

    /// The check after the reboot (see the module docs).
    fn check(&mut self, config: &Config, layout: &Layout, report: &mut Report) {
        let cut = report.cuts;
        self.check_registry(config, layout, report, cut);
        self.check_sessions(layout, report, cut);
        self.check_results(layout, report, cut);
        self.check_document(layout, report, cut);
        check_locks(layout, report, cut);
    }

    fn check_registry(&mut self, config: &Config, layout: &Layout, report: &mut Report, cut: u32) {
        for home in ["home1", "home2"] {
            let doc = layout.m(&format!("{home}/storages/multi_root_workspace.json"));
            let scope: BTreeMap<String, BTreeSet<String>> = match fs::read(&doc) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeMap::new(),
                Err(e) => {
                    report.violation(
                        Violation::Other,
                        format!("cut {cut}: cannot read {}: {e}", doc.display()),
                    );
                    continue;
                }
                Ok(bytes) => {
                    report.documents_checked += 1;
                    if serde_json::from_slice::<serde_json::Value>(&bytes).is_err() {
                        report.violation(
                            Violation::Torn,
                            format!(
                                "cut {cut}: torn registry document {} ({} bytes: {:?})",
                                doc.display(),
                                bytes.len(),
                                String::from_utf8_lossy(&bytes[..bytes.len().min(80)])
                            ),
                        );
                        continue;
                    }
                    match registry_list(config, layout, home) {
                        Ok(scope) => scope,
                        Err(e) => {
                            report.violation(
                                Violation::Other,
                                format!("cut {cut}: registry list in {home}: {e}"),
                            );
                            continue;
                        }
                    }
                }
            };
            for (key, expected) in self.registry.iter_mut().filter(|(k, _)| k.0 == home) {
                let (_, primary, root) = key;
                let present = scope.get(primary).is_some_and(|roots| roots.contains(root));
                if let Some(want) = *expected
                    && want != present
                {
                    report.violation(
                        Violation::Lost,
                        format!(
                            "cut {cut}: lost acknowledged registry {} of {root} under {primary} ({home})",
                            if want { "add" } else { "remove" }
                        ),
                    );
                }
                // What the disk shows is durable now: the truth for the next round.
                *expected = Some(present);
            }
            // Anything in the scope that no one ever added is a phantom.
            for (primary, roots) in &scope {
                for root in roots {
                    let key = (home.to_string(), primary.clone(), root.clone());
                    if !self.registry.contains_key(&key) {
                        report.violation(
                            Violation::Other,
                            format!("cut {cut}: registry {home} holds {root} under {primary}, never added"),
                        );
                    }
                }
            }
        }
    }

    /// The shared document after a reboot: whole, every driver's counter at least its
    /// acknowledged value and at most its unacknowledged attempts above it; the temporaries
    /// the previous cut left are gone if an update was acknowledged since.
    fn check_document(&mut self, layout: &Layout, report: &mut Report, cut: u32) {
        let path = layout.m(DOC);
        let acked_since: u64 = self.docs.values().map(|e| e.unchecked).sum();
        let temporaries: BTreeSet<String> = path
            .parent()
            .and_then(|d| fs::read_dir(d).ok())
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp."))
            .collect();
        if acked_since > 0 {
            for t in self.doc_temporaries.intersection(&temporaries) {
                report.violation(
                    Violation::Other,
                    format!(
                        "cut {cut}: temporary {t} beside {DOC} is still there after {acked_since} acknowledged updates"
                    ),
                );
            }
        }
        self.doc_temporaries = temporaries;
        let counters: BTreeMap<String, u64> = match fs::read(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => {
                report.violation(
                    Violation::Other,
                    format!("cut {cut}: cannot read {}: {e}", path.display()),
                );
                return;
            }
            Ok(bytes) => {
                report.documents_checked += 1;
                match doc_counters(&bytes) {
                    Ok(c) => c,
                    Err(why) => {
                        report.violation(
                            Violation::Torn,
                            format!("cut {cut}: torn document {}: {why}", path.display()),
                        );
                        return;
                    }
                }
            }
        };
        for (key, exp) in self.docs.iter_mut() {
            let v = counters.get(key).copied().unwrap_or(0);
            report.document_updates += std::mem::take(&mut exp.unchecked);
            if v < exp.value {
                report.violation(
                    Violation::Lost,
                    format!(
                        "cut {cut}: document counter {key} is {v}, below its acknowledged {}",
                        exp.value
                    ),
                );
            } else if v > exp.value + exp.maybe {
                report.violation(
                    Violation::Other,
                    format!(
                        "cut {cut}: document counter {key} is {v}: more than the {} acknowledged and {} attempted since",
                        exp.value, exp.maybe
                    ),
                );
            }
            // What the disk shows is durable now: the truth for the next round.
            exp.value = v;
            exp.maybe = 0;
        }
    }

    fn check_sessions(&mut self, layout: &Layout, report: &mut Report, cut: u32) {
        for (id, exp) in self.sessions.iter_mut() {
            let log = layout.m(&format!("sessions/{id}/session.jsonl"));
            let bytes = match fs::read(&log) {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
                Err(e) => {
                    report.violation(
                        Violation::Other,
                        format!("cut {cut}: cannot read {}: {e}", log.display()),
                    );
                    continue;
                }
            };
            report.documents_checked += 1;
            let (whole, tail) = match bytes.iter().rposition(|b| *b == b'\n') {
                Some(p) => (&bytes[..=p], &bytes[p + 1..]),
                None => (&bytes[..0], &bytes[..]),
            };
            let mut seqs = Vec::new();
            let mut torn_inside = false;
            for line in whole.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                match serde_json::from_slice::<serde_json::Value>(line) {
                    Ok(v) => match v.get("seq").and_then(serde_json::Value::as_u64) {
                        Some(s) => seqs.push(s),
                        None => torn_inside = true,
                    },
                    Err(_) => torn_inside = true,
                }
            }
            if torn_inside {
                report.violation(
                    Violation::Torn,
                    format!(
                        "cut {cut}: session {id}: a line before the end of {} does not parse (a torn record in the middle)",
                        log.display()
                    ),
                );
            }
            // A torn tail found at the last check, and records appended since: the next
            // writer cut it away (had it not, the new record would be glued to the torn bytes
            // and the line would not parse above).
            let was_torn = self.torn_logs.remove(id);
            if was_torn && seqs.len() > exp.acked_at_check && !torn_inside {
                report.tails_repaired += 1;
            }
            if !tail.is_empty() {
                if !(was_torn && seqs.len() == exp.acked_at_check) {
                    report.torn_tails += 1;
                }
                self.torn_logs.insert(id.clone());
            }
            let present: BTreeSet<u64> = seqs.iter().copied().collect();
            if seqs.windows(2).any(|w| w[0] >= w[1]) {
                report.violation(
                    Violation::Other,
                    format!(
                        "cut {cut}: session {id}: records out of order or duplicated: {seqs:?}"
                    ),
                );
            }
            // Records acknowledged since the last check (all acknowledged ones are verified).
            let fresh = exp.acked.len().saturating_sub(exp.acked_at_check) as u64;
            if exp.batched {
                report.session_batched += fresh;
            } else {
                report.session_records += fresh;
            }
            for s in &exp.acked {
                if !present.contains(s) {
                    report.violation(
                        Violation::Lost,
                        format!("cut {cut}: session {id}: lost acknowledged record seq {s}"),
                    );
                }
            }
            for s in &present {
                if !exp.maybe.contains(s) && !exp.acked.contains(s) {
                    report.violation(
                        Violation::Other,
                        format!("cut {cut}: session {id}: record seq {s} was never written"),
                    );
                }
            }
            exp.acked_at_check = seqs.len();
            exp.acked = seqs;
            exp.maybe.clear();
        }
    }

    fn check_results(&mut self, layout: &Layout, report: &mut Report, cut: u32) {
        let root = layout.m("results");
        // No torn record or publication, whoever wrote it.
        for dir in ["results", "published"] {
            let Ok(entries) = fs::read_dir(root.join(dir)) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with('.') {
                    continue; // staging directories and temporaries are never read as stores
                }
                let doc = if dir == "results" {
                    e.path().join("entry.json")
                } else {
                    e.path()
                };
                match fs::read(&doc) {
                    Ok(bytes) => {
                        report.documents_checked += 1;
                        if serde_json::from_slice::<serde_json::Value>(&bytes).is_err() {
                            report.violation(
                                Violation::Torn,
                                format!(
                                    "cut {cut}: torn result document {} ({} bytes)",
                                    doc.display(),
                                    bytes.len()
                                ),
                            );
                        }
                    }
                    Err(e) if dir == "results" && e.kind() == io::ErrorKind::NotFound => {
                        report.violation(
                            Violation::Torn,
                            format!(
                                "cut {cut}: candidate {} has no entry.json",
                                root.join(dir).join(&name).display()
                            ),
                        );
                    }
                    Err(e) => report.violation(
                        Violation::Other,
                        format!("cut {cut}: cannot read {}: {e}", doc.display()),
                    ),
                }
            }
        }
        for (id, exp) in self.results.iter_mut() {
            if exp.uncertain {
                continue;
            }
            let candidate = root.join("results").join(id);
            let publication = root.join("published").join(format!("{id}.json"));
            let files = layout.source_files(exp.source);
            let mut problems = Vec::new();
            let has_candidate = candidate.join("entry.json").is_file();
            let has_publication = publication.is_file();
            match exp.state {
                ResultState::Staged | ResultState::Published => {
                    if !has_candidate {
                        problems.push("its candidate is gone".to_string());
                    }
                    for (rel, bytes) in &files {
                        if fs::read(candidate.join("files").join(rel)).ok().as_ref() != Some(bytes)
                        {
                            problems.push(format!("candidate file {rel} missing or different"));
                        }
                    }
                    if exp.state == ResultState::Published && !has_publication {
                        problems.push("its publication is gone".to_string());
                    }
                    if exp.state == ResultState::Staged && has_publication {
                        problems.push("it is published but was never finished".to_string());
                    }
                }
                ResultState::Applied => {
                    let target = layout.m(&format!("targets/{id}"));
                    for (rel, bytes) in &files {
                        if fs::read(target.join(rel)).ok().as_ref() != Some(bytes) {
                            problems.push(format!("applied file {rel} missing or different"));
                        }
                    }
                    if has_candidate || has_publication {
                        problems.push("applied, yet its candidate or publication is back".into());
                    }
                }
                ResultState::Discarded => {
                    if has_candidate || has_publication {
                        problems.push("discarded, yet its candidate or publication is back".into());
                    }
                }
            }
            report.result_transitions += exp.unchecked;
            exp.unchecked = 0;
            for p in problems {
                report.violation(
                    Violation::Lost,
                    format!("cut {cut}: result {id} ({:?} acknowledged): {p}", exp.state),
                );
            }
        }
        // Settled IDs are done with.
        self.results.retain(|_, e| {
            !e.uncertain && matches!(e.state, ResultState::Staged | ResultState::Published)
        });
    }
}

/// Lock files are regular files; result locks are named by 64 lowercase hex digits.
fn check_locks(layout: &Layout, report: &mut Report, cut: u32) {
    let mut locks = Vec::new();
    for home in ["home1", "home2"] {
        locks.push(layout.m(&format!("{home}/storages/multi_root_workspace.lock")));
    }
    if let Ok(entries) = fs::read_dir(layout.m("sessions")) {
        for e in entries.flatten() {
            locks.push(e.path().join("session.lock"));
        }
    }
    let ns = layout.m("results/.result-locks-v1");
    match fs::symlink_metadata(&ns) {
        Ok(m) if !m.is_dir() => report.violation(
            Violation::Other,
            format!("cut {cut}: {} is not a directory", ns.display()),
        ),
        Ok(_) => {
            for e in fs::read_dir(&ns).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let hex = name.strip_suffix(".lock").unwrap_or("");
                let ok =
                    hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
                if !ok && !name.starts_with('.') {
                    report.violation(
                        Violation::Other,
                        format!("cut {cut}: stray name {name:?} in {}", ns.display()),
                    );
                }
                locks.push(e.path());
            }
        }
        Err(_) => {}
    }
    for lock in locks {
        match fs::symlink_metadata(&lock) {
            Err(_) => {} // never made durable: nobody holds a lock after a reboot anyway
            Ok(m) => {
                report.lock_files_checked += 1;
                if !m.is_file() {
                    report.violation(
                        Violation::Other,
                        format!(
                            "cut {cut}: lock file {} is not a regular file",
                            lock.display()
                        ),
                    );
                }
            }
        }
    }
}

/// The opt-ins every process of the torture needs: crashfs is a FUSE file system, which
/// leasehold refuses by default (its locks are local to one kernel; here there is only one),
/// and its files are the tester's own.
const OPT_INS: [(&str, &str); 2] = [
    ("LEASEHOLD_ALLOW_NETWORK_FS", "1"),
    ("LEASEHOLD_ALLOW_SHARED", "1"),
];

fn leasehold(config: &Config) -> Command {
    let mut c = Command::new(&config.leasehold);
    c.envs(OPT_INS);
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// How a one-shot command ended.
enum Ran {
    /// Not started: the power is already off.
    NotStarted,
    /// Killed by the cut.
    Killed,
    /// Exited by itself with this status.
    Exited(i32),
}

/// Runs a one-shot `leasehold` command to its end (or the cut).
fn oneshot(mut cmd: Command) -> Ran {
    let Some(mut child) = spawn(&mut cmd) else {
        return Ran::NotStarted;
    };
    if let Some(mut o) = child.stdout.take() {
        let _ = io::copy(&mut o, &mut io::sink());
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = io::Read::read_to_string(&mut e, &mut err);
    }
    match reap(child).and_then(|s| s.code()) {
        Some(code) => {
            if code != 0 && code != 75 && powered() {
                eprintln!("crashfs torture: {cmd:?} exited {code}: {}", err.trim());
            }
            Ran::Exited(code)
        }
        None => Ran::Killed,
    }
}

fn registry_list(
    config: &Config,
    layout: &Layout,
    home: &str,
) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let out = Command::new(&config.leasehold)
        .envs(OPT_INS)
        .arg("registry")
        .arg("--home")
        .arg(layout.m(home))
        .args(["--timeout", "10", "list", "--json"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    Ok(scope_of(&v))
}

fn scope_of(v: &serde_json::Value) -> BTreeMap<String, BTreeSet<String>> {
    let mut scope = BTreeMap::new();
    if let Some(obj) = v.get("scope").and_then(serde_json::Value::as_object) {
        for (p, roots) in obj {
            let set = roots
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|r| r.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            scope.insert(p.clone(), set);
        }
    }
    scope
}

fn canonical(layout: &Layout, rel: &str) -> String {
    let p = layout.m(rel);
    fs::canonicalize(&p)
        .unwrap_or(p)
        .to_string_lossy()
        .into_owned()
}

/// One-shot registry mutations on `home1`, primary `p{w}`.
fn oneshot_driver(config: &Config, layout: &Layout, w: usize, seed: u64) -> Outcome {
    let mut rng = Rng::new(seed);
    let mut out = Outcome::default();
    let primary = canonical(layout, &format!("dirs/p{w}"));
    while powered() {
        let r = rng.upto(ROOTS as u64 - 1);
        let root = canonical(layout, &format!("dirs/r{r}"));
        let add = rng.upto(2) != 0;
        let mut cmd = leasehold(config);
        cmd.arg("registry")
            .arg("--home")
            .arg(layout.m("home1"))
            .args(["--timeout", "10"])
            .arg(if add { "add" } else { "remove" })
            .arg(&primary)
            .arg(&root);
        let key = ("home1".to_string(), primary.clone(), root.clone());
        match oneshot(cmd) {
            Ran::Exited(0) => out.registry.push((key, Some(add), false)),
            Ran::Exited(75) => {} // contended: nothing changed
            Ran::Exited(_) => out.registry.push((key, None, false)),
            Ran::Killed => {
                out.registry.push((key, None, false));
                out.in_flight += 1;
                break;
            }
            Ran::NotStarted => break,
        }
    }
    out
}

/// `registry serve` on `home2`, primaries `q*`.
fn serve_driver(config: &Config, layout: &Layout, seed: u64) -> Outcome {
    let mut rng = Rng::new(seed);
    let mut out = Outcome::default();
    let mut cmd = leasehold(config);
    cmd.arg("registry")
        .arg("--home")
        .arg(layout.m("home2"))
        .arg("serve")
        .stdin(Stdio::piped());
    let Some(mut child) = spawn(&mut cmd) else {
        return out;
    };
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        let _ = reap(child);
        return out;
    };
    let mut lines = BufReader::new(stdout).lines();
    loop {
        let q = rng.upto(SERVE_PRIMARIES as u64 - 1);
        let r = rng.upto(ROOTS as u64 - 1);
        let primary = canonical(layout, &format!("dirs/q{q}"));
        let root = canonical(layout, &format!("dirs/r{r}"));
        let add = rng.upto(2) != 0;
        let req = serde_json::json!({
            "op": if add { "add" } else { "remove" },
            "primary": primary,
            "root": root,
        });
        let key = ("home2".to_string(), primary, root);
        if writeln!(stdin, "{req}")
            .and_then(|()| stdin.flush())
            .is_err()
        {
            break;
        }
        match lines.next() {
            Some(Ok(line)) => {
                let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
                if v.get("ok").and_then(serde_json::Value::as_bool) == Some(true) {
                    out.registry.push((key, Some(add), true));
                } else if v.get("error").and_then(serde_json::Value::as_str)
                    != Some("registry-contended")
                {
                    out.registry.push((key, None, true));
                }
                if !powered() {
                    break;
                }
            }
            _ => {
                out.registry.push((key, None, true));
                out.in_flight += 1;
                break;
            }
        }
    }
    drop(stdin);
    let _ = reap(child);
    out
}

/// Session appends: `rec-*` through `leasehold session append` (fsync per record; a run is
/// acknowledged when it exits 0), `batch-*` through `crashfs session-batch` (one fsync per
/// batch; each batch acknowledged by its `ok`).
/// `leasehold doc update` of the shared document, one at a time, each COMMAND
/// (`crashfs doc-bump KEY`) incrementing this driver's counter.
fn doc_driver(
    config: &Config,
    layout: &Layout,
    key: String,
    mut exp: DocExpect,
    seed: u64,
) -> Outcome {
    let mut rng = Rng::new(seed);
    let mut out = Outcome::default();
    while powered() {
        let mut cmd = leasehold(config);
        cmd.args(["doc", "update", "--timeout", "20"])
            .arg(layout.m(DOC))
            .arg("--")
            .arg(&config.crashfs)
            .arg("doc-bump")
            .arg(&key);
        match oneshot(cmd) {
            Ran::NotStarted => break,
            Ran::Exited(0) => {
                exp.value += 1;
                exp.maybe = 0;
                exp.unchecked += 1;
            }
            // Contended past the timeout: nothing written.
            Ran::Exited(75) => {}
            Ran::Killed | Ran::Exited(_) => {
                exp.maybe += 1;
                out.in_flight += 1;
                break;
            }
        }
        if rng.upto(4) == 0 {
            std::thread::yield_now();
        }
    }
    out.docs.push((key, exp));
    out
}

/// The counters of the torture's shared document, or why it is not a whole one (it must
/// parse, and carry its full padding).
fn doc_counters(bytes: &[u8]) -> Result<BTreeMap<String, u64>, String> {
    let v: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("{} bytes that do not parse: {e}", bytes.len()))?;
    let obj = v
        .as_object()
        .ok_or_else(|| format!("{} bytes that are not an object", bytes.len()))?;
    if obj
        .get("pad")
        .and_then(serde_json::Value::as_str)
        .map(str::len)
        != Some(DOC_PAD)
    {
        return Err("its padding is not whole".into());
    }
    Ok(obj
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
        .collect())
}

/// `crashfs doc-bump KEY`: the document `input` (empty: none yet) with counter `key`
/// incremented and the padding in place.
pub fn doc_bump(input: &[u8], key: &str) -> Result<Vec<u8>, String> {
    let mut doc: serde_json::Map<String, serde_json::Value> = if input.is_empty() {
        serde_json::Map::new()
    } else {
        serde_json::from_slice(input).map_err(|e| format!("not a JSON object: {e}"))?
    };
    let n = doc
        .get(key)
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    doc.insert(key.to_string(), (n + 1).into());
    doc.insert("pad".into(), "x".repeat(DOC_PAD).into());
    serde_json::to_vec(&doc).map_err(|e| e.to_string())
}

fn session_driver(
    config: &Config,
    layout: &Layout,
    id: String,
    mut exp: SessionExpect,
    seed: u64,
) -> Outcome {
    let mut rng = Rng::new(seed);
    let mut out = Outcome::default();
    let dir = layout.m("sessions");
    'runs: while powered() {
        let mut cmd = if exp.batched {
            let mut c = Command::new(&config.crashfs);
            c.envs(OPT_INS);
            c.arg("session-batch").arg("--dir").arg(&dir).arg(&id);
            c.stdout(Stdio::piped()).stderr(Stdio::piped());
            c
        } else {
            let mut c = leasehold(config);
            c.arg("session")
                .arg("--dir")
                .arg(&dir)
                .arg("append")
                .arg(&id);
            c
        };
        cmd.stdin(Stdio::piped());
        let Some(mut child) = spawn(&mut cmd) else {
            break;
        };
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = reap(child);
            break;
        };
        let mut answers = BufReader::new(stdout).lines();
        let batches = 1 + rng.upto(3);
        let mut sent = Vec::new();
        let mut broken = false;
        for _ in 0..batches {
            let n = 1 + rng.upto(3);
            let batch: Vec<u64> = (0..n)
                .map(|_| {
                    exp.next += 1;
                    exp.next
                })
                .collect();
            exp.maybe.extend(batch.iter().copied());
            let records: Vec<String> = batch
                .iter()
                .map(|s| serde_json::json!({"id": id, "seq": s, "pad": "x".repeat(40)}).to_string())
                .collect();
            let wrote = if exp.batched {
                let line = serde_json::to_string(&records).unwrap_or_default();
                writeln!(stdin, "{line}").and_then(|()| stdin.flush())
            } else {
                records
                    .iter()
                    .try_for_each(|r| writeln!(stdin, "{r}"))
                    .and_then(|()| stdin.flush())
            };
            if wrote.is_err() {
                broken = true;
                break;
            }
            if exp.batched {
                match answers.next() {
                    Some(Ok(a)) if a == "ok" => {
                        for s in &batch {
                            exp.maybe.remove(s);
                        }
                        exp.acked.extend(batch);
                    }
                    _ => {
                        broken = true;
                        break;
                    }
                }
            } else {
                sent.extend(batch);
            }
        }
        drop(stdin);
        drop(answers);
        let status = reap(child);
        match status.and_then(|s| s.code()) {
            Some(0) if !broken => {
                for s in &sent {
                    exp.maybe.remove(s);
                }
                exp.acked.extend(sent);
            }
            Some(75) => {
                // Owned by another process (cannot happen: one driver per ID).
                eprintln!("crashfs torture: session {id} contended");
            }
            _ => {
                out.in_flight += 1;
                break 'runs;
            }
        }
    }
    out.sessions.push((id, exp));
    out
}

/// Result lifecycles: stage → finish → apply or discard.
fn result_driver(
    config: &Config,
    layout: &Layout,
    w: usize,
    carried: Vec<(String, ResultExpect)>,
    first: u64,
    seed: u64,
) -> Outcome {
    let mut rng = Rng::new(seed);
    let mut out = Outcome::default();
    let mut queue: Vec<(String, ResultExpect)> = carried;
    let mut n = 0;
    let results = |args: &[&std::ffi::OsStr]| {
        let mut cmd = leasehold(config);
        cmd.arg("results")
            .arg("--root")
            .arg(layout.m("results"))
            .args(["--timeout", "10"])
            .args(args);
        oneshot(cmd)
    };
    while powered() {
        let (id, mut exp) = match queue.pop() {
            Some(x) => x,
            None => {
                n += 1;
                let id = format!("r{first}-w{w}-{n}");
                let source = usize::try_from(rng.upto(SOURCES as u64 - 1)).unwrap_or(0);
                let src = layout.sources.join(source.to_string());
                let r = results(&[
                    "stage".as_ref(),
                    id.as_ref(),
                    "--from".as_ref(),
                    src.as_os_str(),
                ]);
                if matches!(r, Ran::NotStarted) {
                    break;
                }
                let acked = matches!(r, Ran::Exited(0));
                let killed = matches!(r, Ran::Killed);
                if killed {
                    out.in_flight += 1;
                }
                let exp = ResultExpect {
                    source,
                    state: ResultState::Staged,
                    uncertain: !acked,
                    unchecked: u64::from(acked),
                };
                if !acked {
                    out.results.push((id, exp));
                    if killed {
                        break;
                    }
                    continue;
                }
                (id, exp)
            }
        };
        let (args, next): (Vec<std::ffi::OsString>, ResultState) = match exp.state {
            ResultState::Staged => (
                vec!["finish".into(), id.clone().into()],
                ResultState::Published,
            ),
            _ if rng.upto(1) == 0 => {
                let target = layout.m(&format!("targets/{id}"));
                (
                    vec![
                        "apply".into(),
                        id.clone().into(),
                        "--to".into(),
                        target.into(),
                    ],
                    ResultState::Applied,
                )
            }
            _ => (
                vec!["discard".into(), id.clone().into()],
                ResultState::Discarded,
            ),
        };
        let argv: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        match results(&argv) {
            Ran::NotStarted => {
                queue.push((id, exp));
                break;
            }
            Ran::Exited(0) => {
                exp.state = next;
                exp.unchecked += 1;
                if matches!(next, ResultState::Published) {
                    queue.push((id, exp));
                } else {
                    out.results.push((id, exp));
                }
            }
            other => {
                exp.uncertain = true;
                let killed = matches!(other, Ran::Killed);
                if killed {
                    out.in_flight += 1;
                }
                out.results.push((id, exp));
                if killed {
                    break;
                }
            }
        }
    }
    out.results.extend(queue);
    out
}
