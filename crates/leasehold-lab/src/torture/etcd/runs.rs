//! The `--etcd-run` mode: `leasehold run --etcd` itself under SIGKILL and SIGSTOP, its
//! COMMAND's roles, and the checks of its process trees (see the parent module's docs).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::MutexGuard;
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use serde_json::{Value, json};

use super::super::{AppendLog, Layout, check, now_ns};
use super::tend::{self, Driver, End, Hunt, PAUSE, Reply, Settings, Shared, State, TTL, verdict};
use crate::exit::{Failure, OK, Outcome};

/// Prints an `--etcd-run` report; removes the run directory unless a violation was found.
pub(super) fn finish_run(settings: &Settings, layout: &Layout, v: Value) -> Outcome {
    let violations: Vec<String> = v["violation_details"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|d| d.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    if settings.json {
        println!("{v}");
    } else {
        println!(
            "torture (etcd run): {} workers, {} s",
            settings.workers, v["seconds"]
        );
        println!(
            "kills of leasehold run: {} ({} with its supervisor); pauses past the TTL: {} ({} of the supervisor alone)",
            v["kills"], v["kills_with_supervisor"], v["pauses"], v["supervisor_pauses"]
        );
        println!(
            "increments: {} acknowledged, counter {}",
            v["operations"], v["counter"]
        );
        println!(
            "process trees checked: {} ({} activity records)",
            v["holders_checked"], v["activity_records"]
        );
    }
    verdict(settings.json, layout, &violations)
}

/// The etcd lock name of the counter (`--break-exclusion`: one per worker slot).
fn counter_name(slot: u32, broken: bool) -> String {
    if broken {
        format!("counter-{slot}")
    } else {
        "counter".to_string()
    }
}

/// The arguments that make this binary the torture's COMMAND, or its background child.
fn role_args(layout: &Layout, id: &str, endpoints: &str, prefix: &str, role: &str) -> Vec<String> {
    [
        "torture",
        "--etcd-worker",
        id,
        "--dir",
        &layout.dir.to_string_lossy(),
        "--etcd",
        endpoints,
        "--prefix",
        prefix,
        "--etcd-role",
        role,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// One `activity` record of holder `slot:generation` of the counter: `WHAT counter SLOT GEN T`,
/// the time taken while the process is alive and acting, so a recorded span lies inside the
/// real one.
fn activity(log: &AppendLog, what: &str, slot: u32, generation: u32) -> Result<(), Failure> {
    log.record(&format!("{what} counter {slot} {generation} {}", now_ns()))
        .map_err(|e| Failure::failed(format!("audit log: {e}")))
}

/// A role of the `--etcd-run` mode, run as COMMAND under `leasehold run --etcd`:
///
/// * `command`: records `enter`, starts its background child and waits for its first beat,
///   announces `holding` and waits for `go` (EOF: exit 3, nothing done), increments the
///   counter with a durable rewrite, records a last `beat` and exits 0 — leaving the
///   background child running;
/// * `background`: records a `beat` every 10 ms until it is killed.
///
/// Nothing of either may act once the lease is gone; the spans check proves it.
pub fn role(
    layout: &Layout,
    slot: u32,
    generation: u32,
    endpoints: &str,
    prefix: &str,
    role: &str,
) -> Outcome {
    let path = layout.log_of("audit", &format!("{slot}-{generation}"));
    let log =
        AppendLog::open(&path).map_err(|e| Failure::failed(format!("{}: {e}", path.display())))?;
    if role == "background" {
        let mut said = false;
        loop {
            activity(&log, "beat", slot, generation)?;
            if !said {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "beating").and_then(|()| out.flush());
                said = true;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
    if role != "command" {
        return Err(Failure::usage(format!("torture: unknown role {role:?}")));
    }
    activity(&log, "enter", slot, generation)?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find this executable: {e}")))?;
    let id = format!("{slot}:{generation}");
    let mut child = Command::new(exe)
        .args(role_args(layout, &id, endpoints, prefix, "background"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| Failure::failed(format!("cannot start the background child: {e}")))?;
    // Its first beat is the handshake; then it is on its own (never waited for).
    if let Some(out) = child.stdout.take() {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
    }
    // EOF: exit 3, nothing done.
    tend::announce("holding", 3);
    let counter = layout.counter();
    leasehold::patterns::durable::remove_temporaries(&counter).map_err(|e| {
        Failure::failed(format!(
            "{}: cannot clean temporaries: {e}",
            counter.display()
        ))
    })?;
    let text = std::fs::read_to_string(&counter)
        .map_err(|e| Failure::failed(format!("{}: cannot read: {e}", counter.display())))?;
    let Ok(n) = text.trim().parse::<u64>() else {
        return Err(Failure::failed(format!("counter torn: {text:?}")));
    };
    leasehold::patterns::durable::replace_file(&counter, format!("{}\n", n + 1).as_bytes())
        .map_err(|e| Failure::failed(format!("{}: cannot write: {e}", counter.display())))?;
    activity(&log, "beat", slot, generation)?;
    Ok(OK)
}

/// One holder (slot, generation) and the first and last instant its tree acted.
type HolderSpan = ((u32, u32), u64, u64);

/// What the spans check found.
struct Spans {
    holders: usize,
    records: usize,
    violations: Vec<String>,
}

/// Mutual exclusion of whole process trees: every record of holder `SLOT:GEN` (its COMMAND's
/// and its background child's) spans from the first to the last; no two holders' spans of
/// one lock may overlap. A tree that acted after its lease ended, beside the next holder's,
/// shows as an overlap.
fn spans(text: &str) -> Spans {
    let mut span: BTreeMap<(String, u32, u32), (u64, u64)> = BTreeMap::new();
    let mut violations = Vec::new();
    let mut records = 0;
    for (n, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split(' ').collect();
        let parsed = match f.as_slice() {
            ["enter" | "beat", lock, s, g, t] => {
                match (s.parse::<u32>(), g.parse::<u32>(), t.parse::<u64>()) {
                    (Ok(s), Ok(g), Ok(t)) => Some((lock.to_string(), s, g, t)),
                    _ => None,
                }
            }
            _ => None,
        };
        let Some((lock, s, g, t)) = parsed else {
            violations.push(format!("audit line {}: malformed record {line:?}", n + 1));
            continue;
        };
        records += 1;
        let e = span.entry((lock, s, g)).or_insert((t, t));
        e.0 = e.0.min(t);
        e.1 = e.1.max(t);
    }
    let mut by_lock: BTreeMap<String, Vec<HolderSpan>> = BTreeMap::new();
    for ((lock, s, g), (start, end)) in &span {
        by_lock
            .entry(lock.clone())
            .or_default()
            .push(((*s, *g), *start, *end));
    }
    for (lock, mut list) in by_lock {
        list.sort_by_key(|(_, start, end)| (*start, *end));
        let mut widest: Option<HolderSpan> = None;
        for &(holder, start, end) in &list {
            if let Some((w, _, wend)) = widest.filter(|(_, _, wend)| start < *wend) {
                violations.push(format!(
                    "{lock}: overlap: worker {}:{} acted at {start} while worker {}:{}'s tree acted until {wend}",
                    holder.0, holder.1, w.0, w.1
                ));
            }
            if widest.is_none_or(|(_, _, wend)| end > wend) {
                widest = Some((holder, start, end));
            }
        }
    }
    Spans {
        holders: span.len(),
        records,
        violations,
    }
}

/// Waits (at most 30 s) until no process of this run is left — every process the run
/// started names its directory in its arguments — and reaps what fell to us. `etcd`, the
/// private server (`--etcd-server`, its data in that directory), is not one: it runs until
/// the run ends (counting it made every `--etcd-server` run fail after 30 s).
fn wait_quiet(layout: &Layout, etcd: Option<u32>) -> Option<String> {
    let needle = layout.dir.to_string_lossy().into_owned();
    let me = std::process::id().to_string();
    let etcd = etcd.map(|pid| pid.to_string());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = std::fs::read_dir("/proc").ok().and_then(|dir| {
            dir.flatten()
                .filter(|e| {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    name.bytes().all(|b| b.is_ascii_digit())
                        && name != me.as_str()
                        && etcd.as_deref() != Some(&*name)
                })
                .find(|e| {
                    std::fs::read(e.path().join("cmdline"))
                        .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle.as_str()))
                })
                .map(|e| e.file_name().to_string_lossy().into_owned())
        });
        let pid = left?;
        if Instant::now() >= deadline {
            return Some(format!(
                "process {pid} of the run still alive 30 s after its end"
            ));
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The `--etcd-run` mode: see the module docs.
pub(super) fn run_mode(
    settings: &Settings,
    layout: &Layout,
    endpoints: &str,
    prefix: &str,
    etcd_pid: Option<u32>,
) -> Result<Value, Failure> {
    let started = Instant::now();
    std::fs::write(layout.counter(), "0\n")
        .map_err(|e| Failure::failed(format!("torture: {}: {e}", layout.counter().display())))?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find this executable: {e}")))?;
    let runs = Runs {
        exe,
        layout: layout.clone(),
        endpoints: endpoints.to_string(),
        prefix: prefix.to_string(),
        server: etcd_pid,
        broken: settings.break_exclusion,
    };
    let shared = tend::drive(settings, started, layout, runs);
    let mut violations: Vec<String> = shared.lock().violations.clone();
    violations.extend(wait_quiet(layout, etcd_pid));
    // Supervisors of killed runs fell to us (or to init): reap what is ours.
    while let Ok(Some(_)) = rustix::process::wait(rustix::process::WaitOptions::NOHANG) {}
    let audit = layout
        .read_logs("audit")
        .map_err(|e| Failure::failed(format!("torture: audit logs: {e}")))?;
    let spans = spans(&audit);
    violations.extend(spans.violations.iter().cloned());
    let ops = std::fs::read_to_string(layout.ops()).unwrap_or_default();
    let text = std::fs::read_to_string(layout.counter())
        .map_err(|e| Failure::failed(format!("torture: {}: {e}", layout.counter().display())))?;
    let counter = match text.trim().parse::<u64>() {
        Ok(n) => n,
        Err(_) => {
            violations.push(format!("counter torn at the end: {text:?}"));
            0
        }
    };
    let report = check::ops(&ops, &BTreeSet::new(), counter);
    violations.extend(report.violations.iter().cloned());
    let st = shared.lock();
    Ok(json!({
        "mode": "etcd-run",
        "workers": settings.workers,
        "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        "kills": st.kills,
        "pauses": st.pauses,
        "kills_with_supervisor": st.kills_with_supervisor,
        "supervisor_pauses": st.supervisor_pauses,
        "kills_by_phase": st.landed,
        "operations": report.counter_acked,
        "counter": counter,
        "holders_checked": spans.holders,
        "activity_records": spans.records,
        "violations": violations.len(),
        "violation_details": violations,
    }))
}

/// The process IDs whose parent is `pid` (from every `/proc/PID/stat`).
fn children_of(pid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|st| {
                    let (_, rest) = st.rsplit_once(')')?;
                    rest.split_whitespace().nth(1)?.parse::<i32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// `--etcd-run`'s slots: `leasehold run --etcd` with the counter COMMAND, again and again.
/// Besides the shared kill and pause of `run` at `holding`: SIGKILL of `run` and its
/// supervisor together, or SIGSTOP of the supervisor alone past the TTL, with etcd paused
/// meanwhile when it is the run's own (a partition), then SIGCONT. A run paused past its
/// TTL, or whose supervisor was, must end with `lease lost`, never 0.
struct Runs {
    exe: PathBuf,
    layout: Layout,
    endpoints: String,
    prefix: String,
    /// The server's process ID when it is the run's own (`--etcd-server`): it can be paused.
    server: Option<u32>,
    broken: bool,
}

impl Driver for Runs {
    /// The ops log: an `intent` before each run, an `ack` after each that ended 0.
    type Slot = AppendLog;

    fn open(&self, _: usize) -> Result<AppendLog, String> {
        AppendLog::open(&self.layout.ops()).map_err(|e| format!("ops log: {e}"))
    }

    fn command(&self, ops: &AppendLog, slot: usize, generation: u32) -> Result<Command, String> {
        let seq = u64::from(generation) + 1;
        let id = format!("{slot}:{generation}");
        ops.record(&format!("intent {slot} {generation} {seq} counter"))
            .map_err(|e| format!("ops log: {e}"))?;
        let mut command = Command::new(&self.exe);
        command
            .args(["run", "--etcd", &self.endpoints, "--ttl"])
            .arg(TTL.as_secs().to_string())
            .args(["--timeout", "10"])
            .arg(counter_name(slot as u32, self.broken))
            .arg("--")
            .arg(&self.exe)
            .args(role_args(
                &self.layout,
                &id,
                &self.endpoints,
                &self.prefix,
                "command",
            ));
        Ok(command)
    }

    fn what(&self) -> &'static str {
        "leasehold run for"
    }

    fn hunt(
        &self,
        shared: &Shared,
        mut st: MutexGuard<'_, State>,
        slot: usize,
        pid: i32,
        hunt: Hunt,
    ) -> Reply {
        match hunt {
            Hunt::KillWithSupervisor => {
                // `pkill -9 leasehold`: neither may act before both are dead.
                let both: Vec<Pid> = children_of(pid)
                    .into_iter()
                    .chain([pid])
                    .filter_map(Pid::from_raw)
                    .collect();
                for p in &both {
                    let _ = rustix::process::kill_process(*p, Signal::STOP);
                }
                if shared.kill(&mut st, slot, "holding-with-supervisor") {
                    st.kills_with_supervisor += 1;
                }
                for p in &both {
                    let _ = rustix::process::kill_process(*p, Signal::KILL);
                }
                Reply::Silent
            }
            Hunt::PauseSupervisor => {
                let Some(supervisor) = children_of(pid).first().copied().and_then(Pid::from_raw)
                else {
                    return Reply::Silent;
                };
                let server = self.server.and_then(|p| Pid::from_raw(p as i32));
                if rustix::process::kill_process(supervisor, Signal::STOP).is_err() {
                    return Reply::Go;
                }
                st.pauses += 1;
                st.supervisor_pauses += 1;
                // A partition: no keep-alive reaches etcd (every slot's lease goes; each run
                // must stop its tree).
                if let Some(server) = server {
                    let _ = rustix::process::kill_process(server, Signal::STOP);
                }
                drop(st);
                thread::sleep(PAUSE);
                if let Some(server) = server {
                    let _ = rustix::process::kill_process(server, Signal::CONT);
                }
                // (`run` killed it long ago if it works: then this finds nobody.)
                let _ = rustix::process::kill_process(supervisor, Signal::CONT);
                Reply::Paused
            }
            // The shared hunts, dealt with before the driver's.
            Hunt::Kill | Hunt::Pause => Reply::Silent,
        }
    }

    fn ended(&self, shared: &Shared, ops: &AppendLog, slot: usize, end: End) {
        let End {
            generation,
            status,
            killed,
            paused,
        } = end;
        let seq = u64::from(generation) + 1;
        let id = format!("{slot}:{generation}");
        let code = status.as_ref().ok().and_then(|s| s.code());
        if code == Some(0) {
            if let Err(e) = ops.record(&format!("ack {slot} {generation} {seq}")) {
                shared.violation(format!("ops log: {e}"));
            }
            if paused {
                shared.violation(format!(
                    "worker {id}: its run or its supervisor was paused past the TTL, yet COMMAND finished (status 0)"
                ));
            }
        } else if paused && !killed && code != Some(1) {
            shared.violation(format!(
                "worker {id}: its run or its supervisor was paused past the TTL and ended {status:?}, not with lease lost (1)"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::spans;

    #[test]
    fn trees_one_after_another_are_clean_and_a_tree_acting_beside_the_next_is_caught() {
        // 0:0's COMMAND enters at 100, its child beats until 300; 1:0 enters at 350.
        let clean = "enter counter 0 0 100\nbeat counter 0 0 300\nbeat counter 0 0 200\n\
                     enter counter 1 0 350\nbeat counter 1 0 400\n";
        let r = spans(clean);
        assert_eq!(
            (r.holders, r.records, r.violations.len()),
            (2, 5, 0),
            "{:?}",
            r.violations
        );
        // 0:0's background child beats once more, at 360: beside 1:0.
        let late = format!("{clean}beat counter 0 0 360\n");
        let r = spans(&late);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(
            r.violations[0].starts_with("counter: overlap"),
            "{:?}",
            r.violations
        );
        // Other lock names do not interfere; garbage is reported.
        let r =
            spans("enter counter-0 0 0 100\nbeat counter-0 0 0 300\nenter counter-1 1 0 200\nbe");
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(r.violations[0].contains("malformed"), "{:?}", r.violations);
    }
}
