//! The slots of an etcd torture run, the same for both drivers (the registry's workers and
//! `leasehold run --etcd`): one thread a slot starts an incarnation, answers its `holding`
//! with `go` or, when a hunt is on, kills or pauses it there, reaps it and starts the next;
//! the schedule picks the events and, at the end, kills every slot. A [`Driver`] says what
//! differs: the command, the hunts of its own, and what an incarnation's end means. Both
//! modes' settings, TTL and final verdict live here too, so that neither driver's file
//! refers to the other or to the parent module.

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process_group};

use super::super::{Layout, Rng};
use crate::exit::{Failure, OK, Outcome};
use crate::sync;

/// The workers' lease TTL: short, so that pauses and kills cost little time.
pub const TTL: Duration = Duration::from_secs(2);

/// What the user asked for.
pub struct Settings {
    pub workers: u32,
    pub events: u64,
    pub seconds: f64,
    pub json: bool,
    pub dir: Option<PathBuf>,
    /// Endpoints of an existing etcd; `None`: start a private one.
    pub endpoints: Option<String>,
    /// `--etcd-run`: torture `leasehold run --etcd` itself instead of the registry.
    pub run: bool,
    /// The checker's self-check (`--etcd-run` only): each worker slot its own lock name.
    pub break_exclusion: bool,
}

/// A run's last words, either mode's: its violations (after the report, unless `json`);
/// the run directory removed unless there was one, else kept as the evidence.
pub(super) fn verdict(json: bool, layout: &Layout, violations: &[String]) -> Outcome {
    if !json {
        println!("violations: {}", violations.len());
        for v in violations {
            println!("  {v}");
        }
    }
    let Some(first) = violations.first() else {
        let _ = std::fs::remove_dir_all(&layout.dir);
        return Ok(OK);
    };
    Err(Failure::failed(format!(
        "torture: {} violation(s) found, first: {first}; evidence kept in {}",
        violations.len(),
        layout.dir.display()
    )))
}

/// A slot's side of the handshake: announces `name` on stdout and waits for the `go` line;
/// exits with `gone` when the tending thread is gone (stdout or stdin closed).
pub(super) fn announce(name: &str, gone: i32) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{name}").and_then(|()| out.flush()).is_err() {
        std::process::exit(gone);
    }
    drop(out);
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(n) if n > 0 => {}
        _ => std::process::exit(gone),
    }
}

/// How long a pause lasts: past the workers' TTL, so that the paused lease expires.
pub(super) const PAUSE: Duration = Duration::from_millis(2600);

#[derive(Default)]
pub(super) struct Slot {
    pid: Option<i32>,
    killed: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Hunt {
    Kill,
    Pause,
    /// `--etcd-run`: `run` and its supervisor SIGKILLed together (both stopped first).
    KillWithSupervisor,
    /// `--etcd-run`: the supervisor alone SIGSTOPped, and etcd too (a partition) when it is
    /// the run's own, past the TTL.
    PauseSupervisor,
}

#[derive(Default)]
pub(super) struct State {
    slots: Vec<Slot>,
    hunt: Option<Hunt>,
    stopping: bool,
    pub(super) kills: u64,
    pub(super) pauses: u64,
    /// Of the kills: `run` and its supervisor together.
    pub(super) kills_with_supervisor: u64,
    /// Of the pauses: the supervisor alone (`--etcd-run`).
    pub(super) supervisor_pauses: u64,
    pub(super) landed: BTreeMap<String, u64>,
    pub(super) violations: Vec<String>,
    /// `holding` announcements answered with `go` (mutations let through).
    pub(super) answered: u64,
}

pub(super) struct Shared {
    state: Mutex<State>,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        sync::lock(&self.state)
    }

    pub(super) fn violation(&self, what: String) {
        self.lock().violations.push(what);
    }

    /// SIGKILLs `slot`'s process group (SIGCONT first, should it be stopped); counts the
    /// kill under `landed` unless the run is stopping. False when there was none to kill.
    pub(super) fn kill(&self, st: &mut State, slot: usize, landed: &str) -> bool {
        let s = &mut st.slots[slot];
        let Some(pid) = s.pid.filter(|_| !s.killed).and_then(Pid::from_raw) else {
            return false;
        };
        let _ = kill_process_group(pid, Signal::CONT);
        if kill_process_group(pid, Signal::KILL).is_err() {
            return false;
        }
        s.killed = true;
        if !st.stopping {
            st.kills += 1;
            *st.landed.entry(landed.to_string()).or_default() += 1;
        }
        true
    }
}

/// What an incarnation's `holding` gets once its hunt is dealt with.
pub(super) enum Reply {
    /// `go`.
    Go,
    /// `go`, after a pause past the TTL.
    Paused,
    /// Nothing: the incarnation is dead, or there was none to hunt.
    Silent,
}

/// What the two drivers' slots differ in.
pub(super) trait Driver: Send + Sync + 'static {
    /// What a slot keeps between its incarnations.
    type Slot;
    /// Opens `slot`; `Err`: the violation that stops the slot.
    fn open(&self, slot: usize) -> Result<Self::Slot, String>;
    /// Incarnation `generation` of `slot`; `Err`: the violation that stops the slot.
    fn command(&self, s: &Self::Slot, slot: usize, generation: u32) -> Result<Command, String>;
    /// What a slot's process is called in "cannot start …".
    fn what(&self) -> &'static str;
    /// A hunt of the driver's own (neither `Kill` nor `Pause`) at `pid`'s `holding`.
    fn hunt(
        &self,
        shared: &Shared,
        st: MutexGuard<'_, State>,
        slot: usize,
        pid: i32,
        hunt: Hunt,
    ) -> Reply;
    /// An incarnation of `slot` ended.
    fn ended(&self, shared: &Shared, s: &Self::Slot, slot: usize, end: End);
}

/// How an incarnation ended.
pub(super) struct End {
    pub(super) generation: u32,
    pub(super) status: io::Result<ExitStatus>,
    /// By the schedule's SIGKILL.
    pub(super) killed: bool,
    /// Past the TTL, at its `holding`.
    pub(super) paused: bool,
}

/// Runs the plan's slots under `driver` until its events are done, every slot killed and
/// reaped; the state left holds the counts and violations.
pub(super) fn drive<D: Driver>(
    plan: &Settings,
    started: Instant,
    layout: &Layout,
    driver: D,
) -> Arc<Shared> {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            slots: (0..plan.workers).map(|_| Slot::default()).collect(),
            ..State::default()
        }),
    });
    let driver = Arc::new(driver);
    let threads: Vec<_> = (0..plan.workers as usize)
        .map(|slot| {
            let (shared, layout, driver) = (shared.clone(), layout.clone(), driver.clone());
            thread::spawn(move || tend(&shared, &layout, &*driver, slot))
        })
        .collect();
    schedule(&shared, plan, started);
    for t in threads {
        if t.join().is_err() {
            shared.violation("a worker thread panicked".into());
        }
    }
    shared
}

/// The events of a run, until `--kills` of them or `--seconds`: a random worker SIGKILLed at
/// a random moment, or a hunt — the next worker to announce `holding` is SIGKILLed or paused
/// there; a few mutations go through between two events. Then every worker is killed.
fn schedule(shared: &Shared, plan: &Settings, started: Instant) {
    let deadline = started + Duration::from_secs_f64(plan.seconds);
    let mut rng = Rng::seeded();
    let mut through = 0;
    loop {
        {
            let st = shared.lock();
            if st.kills + st.pauses >= plan.events || Instant::now() >= deadline {
                break;
            }
        }
        thread::sleep(Duration::from_millis(20 + rng.below(60)));
        let mut st = shared.lock();
        // Between two events, let a few mutations through: a torture that kills every
        // holder would prove nothing about acknowledged writes.
        if st.hunt.is_some() || st.answered < through + 3 {
            continue;
        }
        through = st.answered;
        match rng.below(if plan.run { 5 } else { 3 }) {
            0 => {
                let slot = rng.below(st.slots.len() as u64) as usize;
                shared.kill(&mut st, slot, "random");
            }
            1 => st.hunt = Some(Hunt::Kill),
            2 => st.hunt = Some(Hunt::Pause),
            3 => st.hunt = Some(Hunt::KillWithSupervisor),
            _ => st.hunt = Some(Hunt::PauseSupervisor),
        }
    }
    {
        let mut st = shared.lock();
        st.stopping = true;
        st.hunt = None;
        for slot in 0..st.slots.len() {
            shared.kill(&mut st, slot, "shutdown");
        }
    }
}

/// Keeps one slot busy: starts an incarnation, answers `holding` with `go`, or kills or
/// pauses it there when a hunt is on, reaps it, starts the next.
fn tend<D: Driver>(shared: &Shared, layout: &Layout, driver: &D, slot: usize) {
    let s = match driver.open(slot) {
        Ok(s) => s,
        Err(e) => return shared.violation(e),
    };
    for generation in 0u32.. {
        if shared.lock().stopping {
            return;
        }
        let mut command = match driver.command(&s, slot, generation) {
            Ok(c) => c,
            Err(e) => return shared.violation(e),
        };
        let stderr = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(layout.stderr());
        let spawned = stderr.and_then(|err| {
            command
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(err)
                .process_group(0)
                .spawn()
        });
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                let what = driver.what();
                return shared.violation(format!("cannot start {what} {slot}: {e}"));
            }
        };
        let pid = child.id() as i32;
        {
            let mut st = shared.lock();
            st.slots[slot] = Slot {
                pid: Some(pid),
                killed: false,
            };
            if st.stopping {
                shared.kill(&mut st, slot, "shutdown");
            }
        }
        let mut paused = false;
        let mut stdin = child.stdin.take();
        if let Some(out) = child.stdout.take() {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let st = shared.lock();
                if line != "holding" || st.stopping {
                    continue;
                }
                match answer(shared, driver, st, slot, pid) {
                    Reply::Silent => continue,
                    Reply::Paused => paused = true,
                    Reply::Go => {}
                }
                if let Some(w) = stdin.as_mut() {
                    let _ = writeln!(w, "go").and_then(|()| w.flush());
                }
            }
        }
        drop(stdin);
        // The slot forgets its process before reaping it: no kill can reach a reused PID.
        let killed = {
            let mut st = shared.lock();
            st.slots[slot].pid = None;
            st.slots[slot].killed
        };
        let status = child.wait();
        let end = End {
            generation,
            status,
            killed,
            paused,
        };
        driver.ended(shared, &s, slot, end);
    }
}

/// The hunt on, if any, at `pid`'s `holding`: a kill or a pause past the TTL of its process
/// group, or the driver's own.
fn answer<D: Driver>(
    shared: &Shared,
    driver: &D,
    mut st: MutexGuard<'_, State>,
    slot: usize,
    pid: i32,
) -> Reply {
    match st.hunt.take() {
        Some(Hunt::Kill) => {
            shared.kill(&mut st, slot, "holding");
            Reply::Silent
        }
        Some(Hunt::Pause) => {
            let Some(group) = Pid::from_raw(pid) else {
                return Reply::Silent;
            };
            if kill_process_group(group, Signal::STOP).is_err() {
                return Reply::Go;
            }
            st.pauses += 1;
            drop(st);
            // The pause itself: long enough for the lease to expire.
            thread::sleep(PAUSE);
            let st = shared.lock();
            if !st.slots[slot].killed {
                let _ = kill_process_group(group, Signal::CONT);
            }
            Reply::Paused
        }
        Some(hunt) => driver.hunt(shared, st, slot, pid, hunt),
        None => {
            st.answered += 1;
            Reply::Go
        }
    }
}
