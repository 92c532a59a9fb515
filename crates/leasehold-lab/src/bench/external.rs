//! Contenders in other languages: `leasehold bench --contender LABEL=COMMAND` (repeatable).
//!
//! A binding (the Node and Python packages) or a foreign locker (npm `proper-lockfile`, PyPI
//! `filelock`) is measured in the same run as the kernel floor, by the same parent and the same
//! arithmetic as the built-in methods: COMMAND runs through `sh -c`, once per worker process,
//! and speaks the built-in workers' protocol on its stdin and stdout. Its environment says
//! what to do:
//!
//! * `LEASEHOLD_BENCH_ROLE`: `loop` or `cycle`;
//! * `LEASEHOLD_BENCH_LOCK`: the lock file's path;
//! * `LEASEHOLD_BENCH_HOLD_NS`: how long to hold each acquisition (100000);
//! * `LEASEHOLD_BENCH_CYCLES` (role `cycle` only): how many acquire + release cycles.
//!
//! Role `loop` is exactly the built-in `loop` worker (`worker.rs`): print `R`, read one line
//! `go <end ns>`, then until `CLOCK_MONOTONIC` ≥ end loop *stamp start → acquire (exclusive,
//! unlimited wait) → stamp acquired → hold HOLD_NS asleep → stamp released → release → again
//! at once*, recording in memory only; then print one `r <start> <acquired> <released>` line
//! per acquisition (raw `CLOCK_MONOTONIC` nanoseconds) and `D <count>`. Each contender is one
//! more method of the uncued table (`uncued.rs`: W = 2 and 4, the same repeats, rotated with
//! the built-in methods), read against the kernel floors of the same run.
//!
//! Role `cycle` (uncontended acquire + release): print `R`, read `go`, do CYCLES cycles on the
//! free lock in batches of [`BATCH`], print `b <ns for the batch>` as each batch ends (the
//! parent waits at most 20 s for any line) and then `D <batches>`. The figure is the median batch over [`BATCH`], read against the uncontended
//! kernel floor (open, `flock(LOCK_EX)`, close) measured in this run's micro figures.
//!
//! Contender lines carry the ratios but no verdict: their targets are their binding's.

use std::path::Path;
use std::process::Command;

use super::crew::Crew;
use super::report::{Plan, median, mono_ns};
use super::worker::HOLD_NS;
use crate::exit::Failure;

/// Acquire + release cycles per reported batch of role `cycle`.
pub(crate) const BATCH: u64 = 100;

/// Upper bound on the cycles of role `cycle`: a foreign locker that takes milliseconds per
/// cycle on a loaded machine (proper-lockfile: 0.3 to 3 ms) still ends within seconds.
const MAX_CYCLES: u64 = 5_000;

/// One `--contender LABEL=COMMAND`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contender {
    /// Its name in the report (and the JSON's `method`).
    pub label: String,
    /// The shell command that starts one worker process.
    pub command: String,
}

impl Contender {
    /// Parses `LABEL=COMMAND` (clap's value parser): a label of visible characters without
    /// `=`, and a non-empty command.
    pub fn parse(s: &str) -> Result<Contender, String> {
        let (label, command) = s
            .split_once('=')
            .ok_or_else(|| format!("'{s}' is not LABEL=COMMAND"))?;
        let label = label.trim();
        if label.is_empty() || label.chars().any(|c| c.is_control()) {
            return Err(format!(
                "'{s}': the label before '=' must be a visible name"
            ));
        }
        if command.trim().is_empty() {
            return Err(format!("'{s}': the command after '=' is empty"));
        }
        Ok(Contender {
            label: label.to_string(),
            command: command.to_string(),
        })
    }

    /// The command that starts one worker process of this contender in `role` on `lock`.
    fn command(&self, role: &str, lock: &Path, cycles: Option<u64>) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(&self.command)
            .env("LEASEHOLD_BENCH_ROLE", role)
            .env("LEASEHOLD_BENCH_LOCK", lock)
            .env("LEASEHOLD_BENCH_HOLD_NS", HOLD_NS.to_string());
        if let Some(n) = cycles {
            cmd.env("LEASEHOLD_BENCH_CYCLES", n.to_string());
        }
        cmd
    }

    /// Starts one `loop` worker of this contender in `crew`.
    pub(super) fn spawn_loop(&self, crew: &mut Crew, lock: &Path) -> Result<usize, Failure> {
        crew.spawn_command(self.command("loop", lock, None))
            .map_err(|f| self.failed(&f.message))
    }

    fn failed(&self, what: &str) -> Failure {
        Failure::failed(format!(
            "bench: contender {:?} ({}): {what}",
            self.label, self.command
        ))
    }
}

/// A contender's uncontended acquire + release, next to the kernel floor of the same run.
#[derive(Debug, Clone)]
pub(crate) struct Cycle {
    pub label: String,
    /// Median ns per acquire + release (over the batches).
    pub ns: f64,
    /// Batches measured.
    pub batches: usize,
    /// The uncontended kernel floor of this run (open, `flock(LOCK_EX)`, close), where the
    /// platform has one.
    pub floor: Option<f64>,
}

impl Cycle {
    /// The figure over the floor.
    pub(crate) fn ratio(&self) -> Option<f64> {
        self.floor.filter(|f| *f > 0.0).map(|f| self.ns / f)
    }
}

/// How many cycles role `cycle` runs: about as many as the micro figures time per variant,
/// in whole batches.
fn cycles(plan: &Plan) -> u64 {
    let n = (plan.repeats * plan.batch) as u64;
    (n.clamp(BATCH, MAX_CYCLES) / BATCH) * BATCH
}

/// Runs role `cycle` of every contender, one process each, on a lock of its own in `dir`.
pub(super) fn uncontended(
    dir: &Path,
    plan: &Plan,
    contenders: &[Contender],
    floor: Option<f64>,
) -> Result<Vec<Cycle>, Failure> {
    let n = cycles(plan);
    let mut out = Vec::new();
    for (i, c) in contenders.iter().enumerate() {
        let lock = dir.join(format!("contender-{i}-cycle.lock"));
        let mut crew = Crew::new();
        crew.spawn_command(c.command("cycle", &lock, Some(n)))
            .map_err(|f| c.failed(&f.message))?;
        let (_, ready) = crew.recv().map_err(|f| c.failed(&f.message))?;
        if ready != "R" {
            return Err(c.failed(&format!("unexpected line {ready:?} (wanted R)")));
        }
        crew.send(0, &format!("go {}", mono_ns()))?;
        let mut per_cycle = Vec::new();
        loop {
            let (_, line) = crew.recv().map_err(|f| c.failed(&f.message))?;
            let mut it = line.split_whitespace();
            match (it.next(), it.next().and_then(|v| v.parse::<u64>().ok())) {
                (Some("b"), Some(ns)) => per_cycle.push(ns as f64 / BATCH as f64),
                (Some("D"), _) => break,
                _ => return Err(c.failed(&format!("unexpected line {line:?}"))),
            }
        }
        crew.finish(0);
        if per_cycle.is_empty() {
            return Err(c.failed("reported no batch"));
        }
        out.push(Cycle {
            label: c.label.clone(),
            ns: median(&per_cycle),
            batches: per_cycle.len(),
            floor,
        });
    }
    Ok(out)
}

/// The uncontended lines of the report.
pub(super) fn table(cycles: &[Cycle]) -> String {
    let mut out = format!(
        "\ncontenders, uncontended acquire + release (median of batches of {BATCH}), against the uncontended kernel floor of this run (open + flock(LOCK_EX) + close)\n\n"
    );
    let mut cells: Vec<[String; 5]> = vec![[
        "method".into(),
        "per cycle".into(),
        "floor".into(),
        "×floor".into(),
        "batches".into(),
    ]];
    for c in cycles {
        cells.push([
            c.label.clone(),
            super::fmt_value(c.ns, super::report::Unit::Nanos),
            c.floor.map_or("—".into(), |f| {
                super::fmt_value(f, super::report::Unit::Nanos)
            }),
            c.ratio().map_or("—".into(), |r| format!("{r:.2}×")),
            c.batches.to_string(),
        ]);
    }
    out.push_str(&super::aligned(&cells, |i| i == 0));
    out
}

/// The uncontended lines as JSON.
pub(super) fn json(cycles: &[Cycle]) -> serde_json::Value {
    serde_json::Value::Array(
        cycles
            .iter()
            .map(|c| {
                serde_json::json!({
                    "method": c.label,
                    "ns_per_cycle": c.ns,
                    "batches": c.batches,
                    "cycles_per_batch": BATCH,
                    "floor_ns": c.floor,
                    "ratio_vs_floor": c.ratio(),
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contender_is_label_equals_command() {
        let c = Contender::parse("node=node bench/worker.js --x=1").unwrap();
        assert_eq!(c.label, "node");
        assert_eq!(c.command, "node bench/worker.js --x=1");
        assert!(Contender::parse("node").is_err());
        assert!(Contender::parse("=node w.js").is_err());
        assert!(Contender::parse("node=  ").is_err());
    }

    #[test]
    fn cycles_are_whole_batches_within_bounds() {
        let quick = Plan::new(true);
        let full = Plan::new(false);
        for p in [quick, full] {
            let n = cycles(&p);
            assert!(
                n.is_multiple_of(BATCH) && (BATCH..=MAX_CYCLES).contains(&n),
                "{n}"
            );
        }
    }
}
