//! Shared-mount figures (`--only shared-mount`): the record lease on the two-mount bed — two
//! bindfs (FUSE) mounts A and B of one directory, on which a kernel lock taken through one
//! does not exclude one taken through the other (checked first), as two NFS clients with
//! `local_lock=all` — beside the kernel's lease on the same mount and beside npm's
//! `proper-lockfile` and Python `filelock`'s `SoftFileLock` on the same bed.
//!
//! "Another host" is a process reaching the directory through mount B in a PID namespace of
//! its own (`unshare --pid --fork --kill-child`, as root): the record lease's host identity
//! is a hash of host name, boot ID and PID namespace (`sys::host_identity`), so that process
//! really is another host to it — no test-only override is involved. Without root (or
//! `unshare`), those figures are `not measured` lines saying why.
//!
//! Every figure is an episode of real processes (`leasehold worker bench peer`, or a Node or
//! Python peer speaking the same lines): a holder takes the lease and says `A`, a waiter says
//! `W` and is seen asleep in `/proc` (waiting in the kernel, or between polls), the holder
//! keeps holding — asleep — for a few poll intervals more so that a polling waiter has
//! reached its longest interval, and then the holder either releases (hand-over: from the
//! holder's stamp just before its release to the waiter's acquisition) or is SIGKILLed
//! (takeover: from the kill to the waiter's acquisition). Medians and ratios are of one run,
//! the floors interleaved with the figures they are read against.
//!
//! The TTL is 1 s (0.5 s with `--quick`); the longest poll interval P of a record lease's
//! waiter is the library's (`RecordLease::longest_poll`: TTL/20 here), and the foreign
//! lockers are given the same P. The bare-poll floor is a thread of this process listing
//! the directory through mount B every P until a file created through mount A appears.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rustix::fs::{CWD, FlockOperation, Mode, OFlags};

use super::crew::{Crew, until_asleep};
use super::document::{node_packages, python_filelock};
use super::report::{Dist, NotMeasured, Plan, Row, Unit, io_fail, mono_ns};
use crate::exit::Failure;

/// A peer holding `proper-lockfile`'s lock: `node -e NODE_PEER PATH POLL_MS` (`NODE_PATH` has
/// the package). Default `stale` (10 s) and `update` (5 s); retries every POLL_MS.
const NODE_PEER: &str = r#"
const lockfile = require('proper-lockfile')
const [path, pollMs] = process.argv.slice(1)
const rl = require('readline').createInterface({ input: process.stdin })
const lines = rl[Symbol.asyncIterator]()
const p = Number(pollMs)
async function main () {
  console.log('W')
  const release = await lockfile.lock(path, {
    realpath: false,
    retries: { retries: 100000, factor: 1, minTimeout: p, maxTimeout: p, randomize: false }
  })
  console.log(`A ${process.hrtime.bigint()}`)
  await lines.next()
  const t = process.hrtime.bigint()
  await release()
  console.log(`R ${t}`)
  process.exit(0)
}
main().catch((e) => { console.error(e); process.exit(1) })
"#;

/// A peer holding `filelock.SoftFileLock(PATH + ".lock")`: `python3 -c PYTHON_PEER PATH
/// POLL_S LIMIT_S` (LIMIT_S < 0: wait without limit); `T` when LIMIT_S ran out.
const PYTHON_PEER: &str = r#"
import sys, time
from filelock import SoftFileLock, Timeout
path, poll, limit = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
lock = SoftFileLock(path + ".lock")
print("W", flush=True)
try:
    lock.acquire(timeout=limit, poll_interval=poll)
except Timeout:
    print("T", flush=True)
    sys.exit(0)
print("A", time.monotonic_ns(), flush=True)
sys.stdin.readline()
t = time.monotonic_ns()
lock.release()
print("R", t, flush=True)
"#;

/// proper-lockfile's default `stale`: a lock whose directory's mtime is older is broken.
const PROPER_LOCKFILE_STALE: Duration = Duration::from_secs(10);

/// One bindfs mount, unmounted on drop.
struct Mount {
    at: PathBuf,
}

impl Drop for Mount {
    fn drop(&mut self) {
        let done = Command::new("fusermount3").arg("-u").arg(&self.at).status();
        if !done.is_ok_and(|s| s.success()) {
            let _ = Command::new("fusermount").arg("-u").arg(&self.at).status();
        }
    }
}

/// The two-mount bed under `dir`: mounts A and B of one backing directory, or why there is
/// none here.
fn bed(dir: &Path) -> Result<(Mount, Mount), String> {
    if Command::new("bindfs").arg("--version").output().is_err() {
        return Err("bindfs is not installed (apt-get install bindfs)".into());
    }
    let backing = dir.join("mount-backing");
    let mount = |name: &str| -> Result<Mount, String> {
        let at = dir.join(name);
        std::fs::create_dir_all(&at).map_err(|e| format!("cannot create {}: {e}", at.display()))?;
        match Command::new("bindfs").arg(&backing).arg(&at).output() {
            Ok(o) if o.status.success() => Ok(Mount { at }),
            Ok(o) => Err(format!(
                "bindfs could not mount here (FUSE missing?): {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => Err(format!("bindfs could not run: {e}")),
        }
    };
    std::fs::create_dir_all(&backing).map_err(|e| format!("cannot create the backing: {e}"))?;
    let (a, b) = (mount("mount-a")?, mount("mount-b")?);
    // The bed's premise: a kernel lock through A does not exclude one through B.
    let lock = |m: &Mount, op: FlockOperation| -> Result<_, String> {
        let fd = rustix::fs::openat(
            CWD,
            m.at.join("probe.lock"),
            OFlags::RDONLY | OFlags::CREATE | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| format!("cannot open a lock file on the bed: {e}"))?;
        rustix::fs::flock(&fd, op)
            .map(|()| fd)
            .map_err(|e| e.to_string())
    };
    let _held = lock(&a, FlockOperation::LockExclusive)?;
    if lock(&b, FlockOperation::NonBlockingLockExclusive).is_err() {
        return Err(
            "a kernel lock through one bindfs mount excludes the other here: they are not two hosts"
                .into(),
        );
    }
    Ok((a, b))
}

/// Whether a process can be started in a PID namespace of its own here, or why not.
fn other_host_possible() -> Result<(), &'static str> {
    if !rustix::process::geteuid().is_root() {
        return Err(
            "another host is a process in a PID namespace of its own (unshare --pid, as root): not root here",
        );
    }
    let ok = Command::new("unshare")
        .args(["--pid", "--fork", "--kill-child", "true"])
        .status()
        .is_ok_and(|s| s.success());
    match ok {
        true => Ok(()),
        false => {
            Err("unshare --pid --fork failed here (no util-linux unshare, or no PID namespaces)")
        }
    }
}

/// Who takes the lease in an episode.
#[derive(Clone)]
enum Who {
    /// `LeaseOptions::acquire_mount_lease` with `SharedMount::Record { ttl }`.
    Record,
    /// The kernel's lease, network file systems allowed.
    Kernel,
    /// npm `proper-lockfile`, the package at this `NODE_PATH`.
    ProperLockfile(PathBuf),
    /// Python `filelock.SoftFileLock`, importable with this `PYTHONPATH` (or as installed).
    SoftFileLock(Option<PathBuf>),
}

/// The timings of a run of this scenario.
#[derive(Clone, Copy)]
struct Timing {
    ttl: Duration,
    /// The longest poll interval of a record lease's waiter.
    poll: Duration,
    /// How long a holder keeps holding after its waiter is seen waiting (plus up to one
    /// poll interval: [`Timing::held`]).
    hold: Duration,
}

impl Timing {
    /// The hold, plus a part of a poll interval that varies from episode to episode (read
    /// off the clock's low bits), so that the moment of the release or kill does not fall
    /// at the same phase of a poller's interval every time.
    fn held(&self) -> Duration {
        let spread = self.poll.as_nanos().max(1) as u64;
        self.hold + Duration::from_nanos(mono_ns() % spread)
    }
}

/// One side of an episode: who, through which mount, and whether as another host.
struct Side<'a> {
    who: &'a Who,
    lock: PathBuf,
    other_host: bool,
}

impl Side<'_> {
    /// Its process, started in `crew` (a waiter that gives up after `limit`, where it can).
    fn spawn(&self, crew: &mut Crew, t: Timing, limit: Option<Duration>) -> Result<usize, Failure> {
        let mut cmd = match self.who {
            Who::Record | Who::Kernel => {
                let mut cmd = crate::platform::worker_command("bench")?;
                let ttl = match self.who {
                    Who::Record => t.ttl.as_millis(),
                    _ => 0,
                };
                cmd.args(["peer", "--lock"])
                    .arg(&self.lock)
                    .arg(format!("--record-ttl-ms={ttl}"));
                cmd
            }
            Who::ProperLockfile(modules) => {
                let mut cmd = Command::new("node");
                cmd.args(["-e", NODE_PEER])
                    .arg(&self.lock)
                    .arg(t.poll.as_millis().to_string())
                    .env("NODE_PATH", modules);
                cmd
            }
            Who::SoftFileLock(path) => {
                let mut cmd = Command::new("python3");
                cmd.args(["-c", PYTHON_PEER])
                    .arg(&self.lock)
                    .arg(t.poll.as_secs_f64().to_string())
                    .arg(limit.map_or("-1".into(), |l| l.as_secs_f64().to_string()));
                if let Some(p) = path {
                    cmd.env("PYTHONPATH", p);
                }
                cmd
            }
        };
        if self.other_host {
            let mut ns = Command::new("unshare");
            ns.args(["--pid", "--fork", "--kill-child"])
                .arg(cmd.get_program())
                .args(cmd.get_args());
            for (k, v) in cmd.get_envs() {
                if let Some(v) = v {
                    ns.env(k, v);
                }
            }
            cmd = ns;
        }
        crew.spawn_command(cmd)
    }
}

/// The process that waits for `idx` (inside `unshare`, its child): the one seen asleep.
fn waiting_pid(crew: &Crew, idx: usize, other_host: bool) -> Result<u32, Failure> {
    let pid = crew.pid(idx);
    if !other_host {
        return Ok(pid);
    }
    let children = format!("/proc/{pid}/task/{pid}/children");
    let limit = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(&children).map_err(io_fail("read /proc children"))?;
        if let Some(child) = text.split_whitespace().next().and_then(|c| c.parse().ok()) {
            return Ok(child);
        }
        if std::time::Instant::now() > limit {
            return Err(Failure::failed("bench: unshare never started its child"));
        }
        std::thread::yield_now();
    }
}

/// The next line from worker `idx` within `limit`, which must start with one of `tags`:
/// the tag and its number (0 where it has none).
fn line_from(
    crew: &Crew,
    idx: usize,
    tags: &[&str],
    limit: Duration,
) -> Result<(String, u64), Failure> {
    let (from, line) = crew.recv_within(limit)?;
    let mut it = line.split_whitespace();
    let tag = it.next().unwrap_or("");
    if from != idx || !tags.contains(&tag) {
        return Err(Failure::failed(format!(
            "bench: unexpected peer line {line:?} (wanted {tags:?} from peer {idx})"
        )));
    }
    let n = it.next().and_then(|n| n.parse().ok()).unwrap_or(0);
    Ok((tag.to_string(), n))
}

/// What ends the holder's hold.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    /// It releases: from its stamp to the waiter's acquisition.
    Release,
    /// SIGKILL: from the kill to the waiter's acquisition, the waiter giving up after the
    /// limit where it can.
    Kill(Duration),
}

/// One episode: `holder` takes the lease, `waiter` waits, the hold ends as `end` says.
/// Returns the nanoseconds measured, or `None` when the waiter gave up (a takeover that did
/// not come within its limit).
fn episode(holder: &Side, waiter: &Side, t: Timing, end: End) -> Result<Option<f64>, Failure> {
    let mut crew = Crew::new();
    let start = Duration::from_secs(60);
    let h = holder.spawn(&mut crew, t, None)?;
    line_from(&crew, h, &["W"], start)?;
    line_from(&crew, h, &["A"], start)?;
    let limit = match end {
        End::Kill(limit) => Some(limit),
        End::Release => None,
    };
    let w = waiter.spawn(&mut crew, t, limit)?;
    line_from(&crew, w, &["W"], start)?;
    let pid = waiting_pid(&crew, w, waiter.other_host)?;
    until_asleep(&format!("/proc/{pid}/stat"))?;
    // The hold itself, asleep: a scenario parameter, not a synchronisation.
    std::thread::sleep(t.held());
    let measured = match end {
        End::Release => {
            crew.send(h, "r")?;
            let (mut released, mut acquired) = (None, None);
            while released.is_none() || acquired.is_none() {
                let (from, line) = crew.recv_within(start)?;
                let mut it = line.split_whitespace();
                let (tag, n) = (it.next(), it.next().and_then(|n| n.parse::<u64>().ok()));
                match (from, tag, n) {
                    (f, Some("R"), Some(n)) if f == h => released = Some(n),
                    (f, Some("A"), Some(n)) if f == w => acquired = Some(n),
                    _ => {
                        return Err(Failure::failed(format!(
                            "bench: unexpected peer line {line:?} in a hand-over"
                        )));
                    }
                }
            }
            let (r, a) = (released.unwrap_or(0), acquired.unwrap_or(0));
            Some(a.saturating_sub(r) as f64)
        }
        End::Kill(limit) => {
            let killed = mono_ns();
            crew.kill(h);
            let (tag, at) = line_from(&crew, w, &["A", "T"], limit + Duration::from_secs(20))?;
            (tag == "A").then(|| at.saturating_sub(killed) as f64)
        }
    };
    if measured.is_some() {
        crew.send(w, "r")?;
        line_from(&crew, w, &["R"], start)?;
    }
    crew.finish(w);
    Ok(measured)
}

/// The bare-poll floor of a hand-over between mounts: a thread lists B's directory every
/// `poll` until the file a stamp later created through A appears; from the stamp to then.
fn bare_poll(a: &Path, b: &Path, name: &str, t: Timing) -> Result<f64, Failure> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (dir, want, poll) = (b.to_path_buf(), name.to_string(), t.poll);
    let watcher = std::thread::spawn(move || {
        loop {
            let seen = std::fs::read_dir(&dir).map(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_str() == Some(want.as_str()))
            });
            match seen {
                Ok(true) => return tx.send(Ok(mono_ns())),
                Ok(false) => std::thread::sleep(poll),
                Err(e) => return tx.send(Err(e)),
            }
        }
    });
    std::thread::sleep(t.held());
    let made = mono_ns();
    std::fs::write(a.join(name), b"").map_err(io_fail("create the floor's file"))?;
    let seen = rx
        .recv_timeout(Duration::from_secs(20))
        .map_err(|_| Failure::failed("bench: the bare poller never saw the file"))?
        .map_err(io_fail("list the directory through mount B"))?;
    let _ = watcher.join();
    Ok(seen.saturating_sub(made) as f64)
}

/// A row of nanosecond samples, read against `floor` where there is one.
fn row(
    key: &'static str,
    name: String,
    samples: &[f64],
    floor: Option<(&[f64], &'static str)>,
    target: impl FnOnce(&Dist, Option<&Dist>) -> Option<(String, bool)>,
) -> Row {
    let d = Dist::of(samples);
    let f = floor.map(|(s, what)| (Dist::of(s), what));
    Row {
        key,
        name,
        unit: Unit::Nanos,
        median: d.p50,
        dist: Some(d),
        floor: f.as_ref().map(|(fd, what)| (fd.p50, *what)),
        floor_dist: f.as_ref().map(|(fd, _)| *fd),
        target: target(&d, f.as_ref().map(|(fd, _)| fd)),
        samples: samples.len(),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

/// Every figure of this scenario: the rows, and what is not measured here (and why).
pub(super) fn run(dir: &Path, plan: &Plan) -> Result<(Vec<Row>, Vec<NotMeasured>), Failure> {
    let (a, b) = match bed(dir) {
        Ok(bed) => bed,
        Err(why) => {
            eprintln!("SKIP: shared-mount: {why}");
            return Ok((
                Vec::new(),
                vec![NotMeasured::new(
                    "mount_*",
                    "shared-mount figures",
                    "the two-mount bed (two bindfs mounts of one directory) cannot be had here: see the SKIP line",
                )],
            ));
        }
    };
    let ttl = Duration::from_millis(if plan.quick { 500 } else { 1000 });
    let poll = leasehold::RecordLease::longest_poll(ttl);
    let t = Timing {
        ttl,
        poll,
        hold: poll * 4,
    };
    let (reps, handovers) = (plan.takeovers, if plan.quick { 5 } else { 15 });
    let (mut rows, mut not) = (Vec::new(), Vec::new());
    let mut count = 0usize;
    let mut name = || {
        count += 1;
        format!("l{count}.lock")
    };
    let on = |m: &Mount, who: &Who, name: &str, other_host: bool| -> (PathBuf, Who, bool) {
        (m.at.join(name), who.clone(), other_host)
    };
    let run_one = |h: (PathBuf, Who, bool), w: (PathBuf, Who, bool), end: End| {
        let holder = Side {
            who: &h.1,
            lock: h.0,
            other_host: h.2,
        };
        let waiter = Side {
            who: &w.1,
            lock: w.0,
            other_host: w.2,
        };
        episode(&holder, &waiter, t, end)
    };
    let kill = End::Kill(Duration::from_secs(30));
    let (record, kernel) = (Who::Record, Who::Kernel);

    // Same host: takeover after SIGKILL and hand-over between waiters, record lease against
    // the kernel's lease on the same mount, interleaved.
    let (mut rec, mut ker) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        for (who, into) in [(&record, &mut rec), (&kernel, &mut ker)] {
            let l = name();
            if let Some(ns) = run_one(on(&a, who, &l, false), on(&a, who, &l, false), kill)? {
                into.push(ns);
            }
        }
    }
    rows.push(row(
        "mount_takeover_same_host",
        format!(
            "record lease (TTL {}), takeover after SIGKILL on the same host (kill → acquire)",
            ms(ttl)
        ),
        &rec,
        Some((&ker, "kernel lease on the same mount")),
        |d, f| f.map(|f| ("p50 ≤ 2× the kernel lease's".into(), d.p50 <= 2.0 * f.p50)),
    ));
    let (mut rec, mut ker) = (Vec::new(), Vec::new());
    for _ in 0..handovers {
        for (who, into) in [(&record, &mut rec), (&kernel, &mut ker)] {
            let l = name();
            let got = run_one(on(&a, who, &l, false), on(&a, who, &l, false), End::Release)?;
            into.extend(got);
        }
    }
    rows.push(row(
        "mount_handover_same_host",
        "record lease, hand-over between waiters on one host (release → acquire)".into(),
        &rec,
        Some((&ker, "kernel lease on the same mount")),
        |d, f| f.map(|f| ("p50 ≤ 1.5× the kernel lease's".into(), d.p50 <= 1.5 * f.p50)),
    ));

    // Another host: mount B in a PID namespace of its own.
    let mut floor = Vec::new();
    for _ in 0..handovers {
        floor.push(bare_poll(&a.at, &b.at, &name(), t)?);
    }
    let floor_name = "bare poll of B every P (no lock)";
    match other_host_possible() {
        Ok(()) => {
            let mut took = Vec::new();
            for _ in 0..reps {
                let l = name();
                took.extend(run_one(
                    on(&a, &record, &l, false),
                    on(&b, &record, &l, true),
                    kill,
                )?);
            }
            let bound = ttl + poll;
            rows.push(row(
                "mount_takeover_other_host",
                format!(
                    "record lease (TTL {}), takeover after SIGKILL by another host (kill → acquire)",
                    ms(ttl)
                ),
                &took,
                None,
                |d, _| {
                    Some((
                        format!("p50 ≤ TTL + one poll interval = {}", ms(bound)),
                        took.len() == reps && d.p50 <= bound.as_nanos() as f64,
                    ))
                },
            ));
            let mut handed = Vec::new();
            for _ in 0..handovers {
                let l = name();
                let got = run_one(
                    on(&a, &record, &l, false),
                    on(&b, &record, &l, true),
                    End::Release,
                )?;
                handed.extend(got);
            }
            rows.push(row(
                "mount_handover_other_host",
                format!(
                    "record lease, hand-over to another host (release → acquire; P = {})",
                    ms(poll)
                ),
                &handed,
                Some((&floor, floor_name)),
                |d, _| {
                    Some((
                        format!("p50 ≤ one poll interval P = {}", ms(poll)),
                        d.p50 <= poll.as_nanos() as f64,
                    ))
                },
            ));
        }
        Err(why) => not.push(NotMeasured::new(
            "mount_takeover_other_host, mount_handover_other_host",
            "record lease, takeover by and hand-over to another host",
            why,
        )),
    }

    // The foreign lockers on the same bed: holder through A, waiter through B.
    let base = dir.join("mount-peers");
    std::fs::create_dir_all(&base).map_err(io_fail("create directory"))?;
    let mut peers: Vec<(Who, &'static str, &'static str, &'static str)> = Vec::new();
    match node_packages(&base) {
        Ok(modules) => peers.push((
            Who::ProperLockfile(modules),
            "mount_handover_proper_lockfile",
            "mount_takeover_proper_lockfile",
            "proper-lockfile (mkdir + mtime, stale 10 s)",
        )),
        Err(why) => not.push(NotMeasured::new(
            "mount_handover_proper_lockfile, mount_takeover_proper_lockfile",
            "proper-lockfile on the two-mount bed",
            why,
        )),
    }
    match python_filelock(&base) {
        Ok(path) => peers.push((
            Who::SoftFileLock(path),
            "mount_handover_softfilelock",
            "mount_takeover_softfilelock",
            "filelock.SoftFileLock",
        )),
        Err(why) => not.push(NotMeasured::new(
            "mount_handover_softfilelock, mount_takeover_softfilelock",
            "filelock.SoftFileLock on the two-mount bed",
            why,
        )),
    }
    for (who, handover_key, takeover_key, label) in peers {
        let mut handed = Vec::new();
        for _ in 0..handovers {
            let l = name();
            handed.extend(run_one(
                on(&a, &who, &l, false),
                on(&b, &who, &l, false),
                End::Release,
            )?);
        }
        rows.push(row(
            handover_key,
            format!(
                "{label}, hand-over between the mounts (retry every P = {})",
                ms(poll)
            ),
            &handed,
            Some((&floor, floor_name)),
            |_, _| None,
        ));
        // A takeover waits out proper-lockfile's 10 s stale, or SoftFileLock's never: three
        // tries of a full run, one of a quick run; SoftFileLock's waiter gives up after
        // three TTLs.
        let (tries, limit) = match who {
            Who::ProperLockfile(_) => (if plan.quick { 0 } else { 3 }, PROPER_LOCKFILE_STALE * 2),
            _ => (if plan.quick { 1 } else { 3 }, ttl * 3),
        };
        if tries == 0 {
            not.push(NotMeasured::new(
                takeover_key,
                "proper-lockfile, takeover after SIGKILL on the two-mount bed",
                "a takeover waits out its 10 s stale: measured by a full run only",
            ));
            continue;
        }
        let mut took = Vec::new();
        for _ in 0..tries {
            let l = name();
            took.extend(run_one(
                on(&a, &who, &l, false),
                on(&b, &who, &l, false),
                End::Kill(limit),
            )?);
        }
        let name = match took.len() {
            0 => format!(
                "{label}, takeover after SIGKILL through the other mount: none within {} ({tries} tries; the figure is that wait)",
                ms(limit)
            ),
            k => format!(
                "{label}, takeover after SIGKILL through the other mount (kill → acquire; {k} of {tries} within {})",
                ms(limit)
            ),
        };
        let samples = match took.is_empty() {
            true => vec![limit.as_nanos() as f64],
            false => took.clone(),
        };
        rows.push(row(takeover_key, name, &samples, None, |_, _| {
            Some(("takes over".into(), took.len() == tries))
        }));
    }
    drop((a, b));
    Ok((rows, not))
}
