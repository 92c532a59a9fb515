//! The torture's checkers: mutual exclusion from the audit log, and acknowledged mutations
//! from the operations log against the final store.
//!
//! Mutual exclusion. A holder writes `enter` *after* its lease was granted and `exit`
//! *before* releasing it, each with a CLOCK_MONOTONIC timestamp, so every recorded interval
//! lies inside the real holding interval. A killed holder writes no `exit`; its interval
//! ends at the kill record, whose timestamp the supervisor takes *before* sending SIGKILL —
//! the holder dies (and the kernel drops its lock) only after that, so this end too lies
//! inside the real interval. (Ending it at the next holder's `enter` instead would make an
//! overlap with that holder impossible to see.) Recorded intervals are therefore subsets of
//! real ones: any overlap found is a real violation, and a successor granted the lock before
//! its predecessor was killed is caught.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Who wrote a record: a worker slot and its incarnation.
type Holder = (u32, u32);

/// What the audit log shows.
#[derive(Debug, Default)]
pub struct AuditReport {
    /// Lease holding intervals seen (all locks).
    pub intervals: usize,
    /// Kill → next acquisition of the lock the killed process held, in nanoseconds.
    pub takeover_ns: Vec<u64>,
    /// Holdings ended by a `stop` record (`--two-mounts`: a deposed writer refused).
    pub stops: usize,
    /// Overlaps and malformed records.
    pub violations: Vec<String>,
}

#[derive(Debug, Clone)]
struct Interval {
    holder: Holder,
    /// When the acquisition began (`try`; `start` where none was recorded).
    tried: u64,
    start: u64,
    end: u64,
    /// The latest the interval can have ended: `end`, except for one ended by a `stop`
    /// record, written after the lease's release (`end` is then `start`: nothing later is
    /// known to lie inside the real interval).
    end_upper: u64,
    /// Ended by a kill rather than by an `exit` record.
    killed: bool,
    /// Ended by an `exit` record: the holder's write was acknowledged.
    exited: bool,
}

/// The audit log's intervals per lock, its kill records and its moves, with what did not
/// parse.
#[derive(Default)]
struct Parsed {
    closed: BTreeMap<String, Vec<Interval>>,
    kills: BTreeMap<Holder, u64>,
    stops: usize,
    moves: Vec<Move>,
    violations: Vec<String>,
}

/// One move of the stores' directory (`--ancestor-rename`): generation `n` replaced
/// generation `n - 1` at the path at some instant between `t0` and `t1`.
#[derive(Debug, Clone, Copy)]
pub struct Move {
    pub n: u64,
    pub t0: u64,
    pub t1: u64,
}

/// Parses the audit log: records `enter LOCK SLOT GEN T`, `exit LOCK SLOT GEN T`, `kill SLOT
/// GEN T`; `--ancestor-rename` adds `try LOCK SLOT GEN T` (an acquisition begins), `stop LOCK
/// SLOT GEN T` (the interval ends there unless an `exit` ended it) and `move N T0 T1`.
fn parse(text: &str) -> Parsed {
    let mut report = Parsed::default();
    let mut kills: BTreeMap<Holder, u64> = BTreeMap::new();
    let mut tries: BTreeMap<(String, Holder), u64> = BTreeMap::new();
    let mut open: BTreeMap<(String, Holder), u64> = BTreeMap::new();
    let mut closed: BTreeMap<String, Vec<Interval>> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split(' ').collect();
        let num = |s: &str| s.parse::<u64>().ok();
        match f.as_slice() {
            ["move", n, t0, t1] => {
                if let (Some(n), Some(t0), Some(t1)) = (num(n), num(t0), num(t1)) {
                    report.moves.push(Move { n, t0, t1 });
                    continue;
                }
            }
            ["try", lock, s, g, t] => {
                if let (Some(s), Some(g), Some(t)) = (num(s), num(g), num(t)) {
                    tries.insert((lock.to_string(), (s as u32, g as u32)), t);
                    continue;
                }
            }
            ["stop", lock, s, g, t] => {
                if let (Some(s), Some(g), Some(t)) = (num(s), num(g), num(t)) {
                    let key = (lock.to_string(), (s as u32, g as u32));
                    if let Some(start) = open.remove(&key) {
                        report.stops += 1;
                        let tried = tries.get(&key).copied().unwrap_or(start).min(start);
                        closed.entry(key.0).or_default().push(Interval {
                            holder: key.1,
                            tried,
                            start,
                            end: start,
                            end_upper: t.max(start),
                            killed: false,
                            exited: false,
                        });
                    }
                    continue;
                }
            }
            ["kill", s, g, t] => {
                if let (Some(s), Some(g), Some(t)) = (num(s), num(g), num(t)) {
                    let e = kills.entry((s as u32, g as u32)).or_insert(t);
                    *e = (*e).min(t);
                    continue;
                }
            }
            [what @ ("enter" | "exit"), lock, s, g, t] => {
                if let (Some(s), Some(g), Some(t)) = (num(s), num(g), num(t)) {
                    let key = (lock.to_string(), (s as u32, g as u32));
                    let previous = open.remove(&key);
                    if *what == "enter" {
                        if let Some(start) = previous {
                            report.violations.push(format!(
                                "{lock}: worker {s}:{g} entered again without an exit"
                            ));
                            closed.entry(key.0.clone()).or_default().push(Interval {
                                holder: key.1,
                                tried: start,
                                start,
                                end: start,
                                end_upper: start,
                                killed: false,
                                exited: false,
                            });
                        }
                        open.insert(key, t);
                    } else if let Some(start) = previous {
                        let tried = tries.get(&key).copied().unwrap_or(start).min(start);
                        closed.entry(key.0).or_default().push(Interval {
                            holder: key.1,
                            tried,
                            start,
                            end: t,
                            end_upper: t,
                            killed: false,
                            exited: true,
                        });
                    } else {
                        report
                            .violations
                            .push(format!("{lock}: worker {s}:{g} exited without an enter"));
                    }
                    continue;
                }
            }
            _ => {}
        }
        report
            .violations
            .push(format!("audit line {}: malformed record {line:?}", n + 1));
    }
    for ((lock, holder), start) in open {
        let (end, killed) = match kills.get(&holder) {
            Some(&k) => (k.max(start), true),
            None => {
                report.violations.push(format!(
                    "{lock}: worker {}:{} never exited and was not killed",
                    holder.0, holder.1
                ));
                (start, false)
            }
        };
        let tried = tries
            .get(&(lock.clone(), holder))
            .copied()
            .unwrap_or(start)
            .min(start);
        closed.entry(lock).or_default().push(Interval {
            holder,
            tried,
            start,
            end,
            end_upper: end,
            killed,
            exited: false,
        });
    }
    report.closed = closed;
    report.kills = kills;
    report
}

/// Checks the audit log (see [`parse`]): no two holders of one lock overlap.
pub fn audit(text: &str) -> AuditReport {
    audit_of(text, false)
}

/// [`audit`] among the acknowledged holdings only (`--two-mounts`): a lease with a TTL
/// ends by itself when its holder is paused past it, so a holder that was paused, killed
/// or refused (`stop`) may overlap its successor by design; what fencing promises is that
/// no two holdings whose writes were acknowledged (ended by `exit`) overlap. The writes of
/// the others are judged by the operations check (none may have overwritten an
/// acknowledged one).
pub fn audit_acknowledged(text: &str) -> AuditReport {
    audit_of(text, true)
}

fn audit_of(text: &str, acknowledged_only: bool) -> AuditReport {
    let parsed = parse(text);
    let mut report = AuditReport {
        violations: parsed.violations,
        stops: parsed.stops,
        ..AuditReport::default()
    };
    let kills = parsed.kills;
    for (lock, mut intervals) in parsed.closed {
        intervals.sort_by_key(|i| (i.start, i.end));
        report.intervals += intervals.len();
        let mut widest: Option<&Interval> = None;
        for i in intervals.iter().filter(|i| i.exited || !acknowledged_only) {
            if let Some(w) = widest.filter(|w| i.start < w.end) {
                report.violations.push(format!(
                    "{lock}: overlap: worker {}:{} entered at {} while worker {}:{} held it until {}",
                    i.holder.0, i.holder.1, i.start, w.holder.0, w.holder.1, w.end
                ));
            }
            if widest.is_none_or(|w| i.end > w.end) {
                widest = Some(i);
            }
        }
        for k in intervals.iter().filter(|i| i.killed) {
            let next = intervals
                .iter()
                .filter(|i| i.holder != k.holder && i.start >= k.end)
                .map(|i| i.start)
                .min();
            if let (Some(next), Some(&killed_at)) = (next, kills.get(&k.holder)) {
                report.takeover_ns.push(next.saturating_sub(killed_at));
            }
        }
    }
    report
}

/// What the operations log shows against the final store.
#[derive(Debug, Default)]
pub struct OpsReport {
    /// Acknowledged registry mutations.
    pub registry_acked: u64,
    /// Acknowledged counter increments.
    pub counter_acked: u64,
    /// Operations refused because of an unsafe path chain (`--ancestor-rename`).
    pub refused: u64,
    /// Operations whose lease was lost because its directory was moved away (not written).
    pub lost: u64,
    /// Lost acknowledged mutations, phantom entries, violations workers saw.
    pub violations: Vec<String>,
}

#[derive(Debug)]
enum Kind {
    Registry { remove: bool, root: u32 },
    Counter,
}

/// Checks `intent SLOT GEN SEQ (reg add|remove ROOT | counter)`, `ack SLOT GEN SEQ` and
/// `violation SLOT GEN TEXT` records against the final registry (`present`: the (slot, root)
/// pairs it grants) and the final counter. A `wrote SLOT GEN N` record (a `--document`
/// run's acknowledged update wrote counter value N) must name an N no other acknowledged
/// update wrote: two updates that wrote the same value both started from the same version,
/// so one of them was lost.
///
/// Per (slot, root), operations are ordered by (incarnation, sequence) — one worker slot
/// owns its primary, and its incarnations run one after another. After the last
/// acknowledged operation only unacknowledged ones follow, each of which may or may not have
/// reached the disk before its worker died; the final state must be the outcome of one of
/// them (or of the acknowledged one).
pub fn ops(text: &str, present: &BTreeSet<(u32, u32)>, counter: u64) -> OpsReport {
    let (report, intents) = parse_ops(text);
    judge(report, &intents, present, counter)
}

/// What the operations log records, without a verdict on the final store: the counts and
/// the violations the workers saw.
pub fn ops_seen(text: &str) -> OpsReport {
    let (mut report, intents) = parse_ops(text);
    for (kind, acked) in intents.values() {
        match kind {
            Kind::Counter => report.counter_acked += u64::from(*acked),
            Kind::Registry { .. } => report.registry_acked += u64::from(*acked),
        }
    }
    report
}

type Intents = BTreeMap<(u32, u32, u64), (Kind, bool)>;

fn parse_ops(text: &str) -> (OpsReport, Intents) {
    let mut report = OpsReport::default();
    let mut intents: BTreeMap<(u32, u32, u64), (Kind, bool)> = BTreeMap::new();
    let mut wrote: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.splitn(4, ' ').collect();
        let num = |s: &str| s.parse::<u64>().ok();
        let parsed = match f.as_slice() {
            ["violation", s, g, what] => {
                report
                    .violations
                    .push(format!("worker {s}:{g} saw: {what}"));
                true
            }
            ["wrote", s, g, n] => match (num(s), num(g), num(n)) {
                (Some(s), Some(g), Some(n)) => {
                    if let Some((s0, g0)) = wrote.insert(n, (s, g)) {
                        report.violations.push(format!(
                            "counter value {n} was written by two acknowledged updates \
                             (workers {s0}:{g0} and {s}:{g}): one of them was lost"
                        ));
                    }
                    true
                }
                _ => false,
            },
            ["refused" | "lost", s, g, seq] if num(s).and(num(g)).and(num(seq)).is_some() => {
                match f[0] {
                    "refused" => report.refused += 1,
                    _ => report.lost += 1,
                }
                true
            }
            // Store generations seen (`--ancestor-rename`): see `ancestor`.
            ["at", s, g, rest] => num(s).and(num(g)).is_some() && rest.split(' ').count() == 2,
            ["ack", s, g, seq] => match (num(s), num(g), num(seq)) {
                (Some(s), Some(g), Some(seq)) => {
                    match intents.get_mut(&(s as u32, g as u32, seq)) {
                        Some((_, acked)) => *acked = true,
                        None => report
                            .violations
                            .push(format!("worker {s}:{g}: ack {seq} without an intent")),
                    }
                    true
                }
                _ => false,
            },
            ["intent", s, g, rest] => {
                let mut r = rest.split(' ');
                let seq = r.next().and_then(num);
                let kind = match (r.next(), r.next(), r.next().and_then(num)) {
                    (Some("counter"), None, None) => Some(Kind::Counter),
                    (Some("reg"), Some(v @ ("add" | "remove")), Some(root)) => {
                        Some(Kind::Registry {
                            remove: v == "remove",
                            root: root as u32,
                        })
                    }
                    _ => None,
                };
                match (num(s), num(g), seq, kind) {
                    (Some(s), Some(g), Some(seq), Some(kind)) => {
                        intents.insert((s as u32, g as u32, seq), (kind, false));
                        true
                    }
                    _ => false,
                }
            }
            _ => false,
        };
        if !parsed {
            report
                .violations
                .push(format!("ops line {}: malformed record {line:?}", n + 1));
        }
    }
    (report, intents)
}

fn judge(
    mut report: OpsReport,
    intents: &Intents,
    present: &BTreeSet<(u32, u32)>,
    counter: u64,
) -> OpsReport {
    let (mut counter_intents, mut allowed) = (0u64, BTreeMap::<(u32, u32), BTreeSet<bool>>::new());
    for &pair in present {
        allowed
            .entry(pair)
            .or_insert_with(|| BTreeSet::from([false]));
    }
    for (&(slot, _, _), (kind, acked)) in intents {
        match kind {
            Kind::Counter => {
                counter_intents += 1;
                report.counter_acked += u64::from(*acked);
            }
            Kind::Registry { remove, root } => {
                report.registry_acked += u64::from(*acked);
                let set = allowed
                    .entry((slot, *root))
                    .or_insert_with(|| BTreeSet::from([false]));
                if *acked {
                    set.clear();
                }
                set.insert(!remove);
            }
        }
    }
    for ((slot, root), set) in &allowed {
        let is = present.contains(&(*slot, *root));
        if !set.contains(&is) {
            report.violations.push(format!(
                "registry: primary p{slot} root r{root} is {} at the end, against its acknowledged mutations",
                if is { "present" } else { "absent" }
            ));
        }
    }
    if counter < report.counter_acked || counter > counter_intents {
        report.violations.push(format!(
            "counter is {counter} at the end: {} increments were acknowledged, {counter_intents} attempted",
            report.counter_acked
        ));
    }
    report
}

/// What an `--ancestor-rename` run shows (with the opt-in): see [`ancestor_audit`].
#[derive(Debug, Default)]
pub struct AncestorReport {
    /// Lease holding intervals seen (all locks).
    pub intervals: usize,
    /// Moves of the stores' directory.
    pub moves: usize,
    /// Overlaps of two holders of one lock path that a move separated (allowed).
    pub overlaps_across_moves: usize,
    /// For every counter COMMAND whose lock was surely moved away while it ran: from the end
    /// of that move to COMMAND's recorded end, in nanoseconds.
    pub stop_ns: Vec<u64>,
    /// Store generations (the first, and one per move).
    pub generations: u64,
    /// Operations that a move may have overlapped (their two readings of the generation
    /// differ, or the second is missing: killed), checked in each generation they span.
    pub across_moves: usize,
    pub violations: Vec<String>,
}

/// The time allowed past `run`'s re-verification period (0.2 s) for SIGTERM to land, `run`
/// to reap COMMAND and exit, and the worker to record that: the recorded end is that much
/// later than COMMAND's real one.
pub const STOP_ALLOWANCE_NS: u64 = 300_000_000;

/// `run`'s re-verification period (docs/cli.md, "The lock moved away").
pub const RECHECK_NS: u64 = 200_000_000;

/// Checks the audit log of an `--ancestor-rename` run with the opt-in, where the stores'
/// directory is swapped for a fresh one again and again. Exactly what is checked:
///
/// Intervals are as in [`audit`]; one a `stop` record ended (COMMAND stopped by `run`, or
/// failed without its `exit`: the worker writes `stop` after `run` exited, so after the
/// lease's release) counts for overlaps only at its entry, and its `stop` is used for the
/// time bounds, which it can only make stricter.
///
/// * **Overlaps.** Two holders of one lock path may overlap only if a move could lie between
///   their acquisitions (a move that began before the later one entered and ended after
///   the earlier of their `try` records): then they hold different files. Any other
///   overlap is a violation. For the counter (COMMAND under `run`) an allowed overlap must
///   also end within 0.2 s + [`STOP_ALLOWANCE_NS`] of the latest such move, since `run` stops
///   a COMMAND whose lock moved away within its 0.2 s period and a newcomer's COMMAND may
///   overlap only until then (docs/cli.md). A registry holder has no such bound: it does
///   not write once its lock moved (its store verifies the chain before each write).
/// * **Stops.** A counter COMMAND that ran across a whole move that began after it entered
///   (so its lock surely moved) must have ended within 0.2 s + [`STOP_ALLOWANCE_NS`] of that
///   move's end.
pub fn ancestor_audit(text: &str) -> (AncestorReport, Vec<Move>) {
    let parsed = parse(text);
    let mut report = AncestorReport {
        violations: parsed.violations,
        moves: parsed.moves.len(),
        generations: parsed.moves.len() as u64 + 1,
        ..AncestorReport::default()
    };
    let mut moves = parsed.moves;
    moves.sort_by_key(|m| m.n);
    let bound = RECHECK_NS + STOP_ALLOWANCE_NS;
    for (lock, mut intervals) in parsed.closed {
        intervals.sort_by_key(|i| (i.start, i.end));
        report.intervals += intervals.len();
        let timed = lock == "counter";
        for (k, b) in intervals.iter().enumerate() {
            for a in intervals[..k].iter().filter(|a| b.start < a.end) {
                let from = a.tried.min(b.tried);
                let separating = moves
                    .iter()
                    .filter(|m| m.t0 < b.start && m.t1 > from)
                    .max_by_key(|m| m.n);
                let Some(m) = separating else {
                    report.violations.push(format!(
                        "{lock}: overlap with no move between: worker {}:{} entered at {} while worker {}:{} held it until {}",
                        b.holder.0, b.holder.1, b.start, a.holder.0, a.holder.1, a.end
                    ));
                    continue;
                };
                report.overlaps_across_moves += 1;
                let overlap_end = a.end_upper.min(b.end_upper);
                if timed && overlap_end > m.t1 + bound {
                    report.violations.push(format!(
                        "{lock}: workers {}:{} and {}:{} overlapped until {} ms after move {} ended (allowed: {} ms)",
                        a.holder.0, a.holder.1, b.holder.0, b.holder.1,
                        (overlap_end - m.t1) / 1_000_000, m.n, bound / 1_000_000
                    ));
                }
            }
            if !timed || b.killed {
                continue;
            }
            if let Some(m) = moves.iter().find(|m| m.t0 > b.start && m.t1 < b.end_upper) {
                let late = b.end_upper - m.t1;
                report.stop_ns.push(late);
                if late > bound {
                    report.violations.push(format!(
                        "{lock}: worker {}:{}'s COMMAND ran {} ms past move {}, which moved its lock away (allowed: {} ms)",
                        b.holder.0, b.holder.1, late / 1_000_000, m.n, bound / 1_000_000
                    ));
                }
            }
        }
    }
    (report, moves)
}

/// Splits the operations log of an `--ancestor-rename` run by store generation. Every
/// operation records the generation standing at the path before it began and after it ended
/// (`at SLOT GEN SEQ N`); moves never bring a generation back, so two equal readings place
/// the operation — its lease and its write — in that generation: it is checked there as
/// recorded. One whose readings differ (a move in between), or whose second reading is
/// missing (killed), may have written to any generation in between (the one its lease was
/// in): it goes to each of them unacknowledged (may or may not have landed). Counter
/// increments go everywhere unacknowledged: a newcomer's COMMAND may overlap one whose lock
/// was moved for up to 0.2 s (checked by [`ancestor_audit`]), so an increment can be lost
/// there by design; the counter of each generation is only checked for increments nobody
/// made. Returns per generation `0..=last` its operations log text, and how many operations
/// were placed in more than one.
pub fn split_by_generation(text: &str, last: u64) -> (Vec<String>, usize) {
    let mut at: BTreeMap<(String, String, String), Vec<u64>> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if let ["at", s, g, seq, n] = f.as_slice()
            && let Ok(n) = n.parse::<u64>()
        {
            at.entry((s.to_string(), g.to_string(), seq.to_string()))
                .or_default()
                .push(n);
        }
    }
    let n = usize::try_from(last).unwrap_or(0) + 1;
    let mut out: Vec<String> = vec![String::new(); n];
    let mut across = 0;
    let mut span: BTreeMap<(String, String, String), (u64, u64, bool)> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.splitn(5, ' ').collect();
        match f.as_slice() {
            ["intent", s, g, seq, what] => {
                let key = (s.to_string(), g.to_string(), seq.to_string());
                let seen = at.get(&key).cloned().unwrap_or_default();
                let first = seen.first().copied().unwrap_or(0);
                let (second, known) = match seen.get(1) {
                    Some(&b) => (b, true),
                    None => (last, false),
                };
                let counter = what.starts_with("counter");
                let exact = known && first == second && !counter;
                across += usize::from(first != second || !known);
                span.insert(key, (first, second, exact));
                for e in first..=second.min(last) {
                    if let Some(slot) = out.get_mut(e as usize) {
                        slot.push_str(line);
                        slot.push('\n');
                    }
                }
            }
            ["ack", s, g, seq] => {
                let key = (s.to_string(), g.to_string(), seq.to_string());
                if let Some(&(e, _, true)) = span.get(&key)
                    && let Some(slot) = out.get_mut(e as usize)
                {
                    slot.push_str(line);
                    slot.push('\n');
                }
            }
            _ => {}
        }
    }
    (out, across)
}

/// The registry's final scope against what the workers may have written: every entry whose
/// primary and root are known goes into `present` as (worker slot, root number); any other is
/// a violation (the registry holds something no worker wrote). One copy for the file and the
/// etcd torture.
pub fn registry_entries(
    scope: &leasehold_stores::registry::Scope,
    primaries: &BTreeMap<PathBuf, u32>,
    roots: &BTreeMap<PathBuf, u32>,
    present: &mut BTreeSet<(u32, u32)>,
    violations: &mut Vec<String>,
) {
    for (p, rs) in scope {
        for r in rs {
            match (primaries.get(p), roots.get(r)) {
                (Some(&s), Some(&r)) => {
                    present.insert((s, r));
                }
                _ => violations.push(format!(
                    "registry holds an entry no worker wrote: {} → {}",
                    p.display(),
                    r.display()
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_holders_and_a_takeover_after_a_kill_are_clean() {
        let log = "enter registry 0 0 100\nexit registry 0 0 200\n\
                   enter registry 1 0 250\nkill 1 0 300\n\
                   enter registry 0 0 340\nexit registry 0 0 400\n\
                   enter counter 1 0 100\nexit counter 1 0 500\n";
        let r = audit(log);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.intervals, 4);
        assert_eq!(r.takeover_ns, vec![40], "kill at 300 → next enter at 340");
    }

    #[test]
    fn overlapping_holders_are_a_violation() {
        let log = "enter registry 0 0 100\nenter registry 1 0 150\n\
                   exit registry 0 0 200\nexit registry 1 0 300\n";
        let r = audit(log);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(r.violations[0].contains("overlap"), "{:?}", r.violations);
    }

    #[test]
    fn a_successor_entering_before_its_predecessor_was_killed_is_a_violation() {
        // Worker 1:0 never exited; it was killed at 300, but 0:0 entered at 250.
        let log = "enter counter 1 0 100\nenter counter 0 0 250\n\
                   kill 1 0 300\nexit counter 0 0 400\n";
        let r = audit(log);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(r.violations[0].contains("overlap"), "{:?}", r.violations);
        // Same lock, different lock names do not interfere.
        let other = "enter counter 1 0 100\nenter registry 0 0 250\nkill 1 0 300\n\
                     exit registry 0 0 400\n";
        assert!(audit(other).violations.is_empty());
    }

    #[test]
    fn a_holder_that_neither_exited_nor_was_killed_and_garbage_are_violations() {
        let r = audit("enter counter 1 0 100\nenter cou");
        assert_eq!(r.violations.len(), 2, "{:?}", r.violations);
    }

    #[test]
    fn acknowledged_mutations_must_be_in_the_final_store() {
        let log = "intent 0 0 1 reg add 3\nack 0 0 1\n\
                   intent 0 0 2 reg remove 3\n\
                   intent 0 0 3 counter\nack 0 0 3\nintent 0 1 1 counter\n";
        // The unacknowledged remove may or may not have landed; the counter's second
        // increment likewise.
        for present in [BTreeSet::new(), BTreeSet::from([(0, 3)])] {
            for counter in [1, 2] {
                let r = ops(log, &present, counter);
                assert!(r.violations.is_empty(), "{:?}", r.violations);
                assert_eq!((r.registry_acked, r.counter_acked), (1, 1));
            }
        }
        let lost = "intent 0 0 1 reg add 3\nack 0 0 1\n";
        assert_eq!(ops(lost, &BTreeSet::new(), 0).violations.len(), 1);
        let phantom = ops("", &BTreeSet::from([(2, 1)]), 0);
        assert_eq!(phantom.violations.len(), 1, "{:?}", phantom.violations);
        let counter_lost = ops("intent 0 0 1 counter\nack 0 0 1\n", &BTreeSet::new(), 0);
        assert_eq!(counter_lost.violations.len(), 1);
        let twice = ops(
            "intent 0 0 1 counter\nwrote 0 0 1\nack 0 0 1\n\
             intent 1 0 1 counter\nwrote 1 0 1\nack 1 0 1\n",
            &BTreeSet::new(),
            2,
        );
        assert_eq!(twice.violations.len(), 1, "{:?}", twice.violations);
        assert!(
            twice.violations[0].contains("lost"),
            "{:?}",
            twice.violations
        );
        let seen = ops(
            "violation 0 0 registry did not load: x\n",
            &BTreeSet::new(),
            0,
        );
        assert_eq!(seen.violations.len(), 1);
    }

    #[test]
    fn overlaps_are_allowed_only_across_a_move_and_commands_only_within_the_bound() {
        let ms = 1_000_000u64;
        // Registry: 0:0 held from 100 to 900 ms; 1:0 entered at 500 ms.
        let overlap = |moves: &str| {
            format!(
                "try registry 0 0 {}\nenter registry 0 0 {}\nexit registry 0 0 {}\n\
                 try registry 1 0 {}\nenter registry 1 0 {}\nexit registry 1 0 {}\n{moves}",
                90 * ms,
                100 * ms,
                900 * ms,
                400 * ms,
                500 * ms,
                600 * ms
            )
        };
        let (r, _) = ancestor_audit(&overlap(""));
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        let (r, _) = ancestor_audit(&overlap(&format!("move 1 {} {}\n", 300 * ms, 301 * ms)));
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.overlaps_across_moves, 1);
        // A move after the later one entered does not separate them.
        let (r, _) = ancestor_audit(&overlap(&format!("move 1 {} {}\n", 550 * ms, 551 * ms)));
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        // A COMMAND whose lock moved at 300 ms may run on until 300 + 500 ms, no longer.
        let counter = |end: u64| {
            format!(
                "try counter 0 0 {}\nenter counter 0 0 {}\nstop counter 0 0 {}\nmove 1 {} {}\n",
                90 * ms,
                100 * ms,
                end * ms,
                299 * ms,
                300 * ms
            )
        };
        let (r, _) = ancestor_audit(&counter(700));
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.stop_ns, vec![400 * ms]);
        let (r, _) = ancestor_audit(&counter(900));
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
    }

    #[test]
    fn operations_go_to_the_generation_they_ran_in_or_unacknowledged_to_each_they_span() {
        let log = "at 0 0 1 0\nintent 0 0 1 reg add 3\nat 0 0 1 0\nack 0 0 1\n\
                   at 0 0 2 0\nintent 0 0 2 reg add 4\nat 0 0 2 1\nack 0 0 2\n\
                   at 0 0 3 1\nintent 0 0 3 counter\nat 0 0 3 1\nack 0 0 3\n\
                   at 0 1 1 1\nintent 0 1 1 reg remove 3\n";
        let (by, across) = split_by_generation(log, 2);
        assert_eq!(across, 2, "the op across a move and the killed one");
        assert!(by[0].contains("intent 0 0 1") && by[0].contains("ack 0 0 1"));
        assert!(by[0].contains("intent 0 0 2") && by[1].contains("intent 0 0 2"));
        assert!(!by[0].contains("ack 0 0 2") && !by[1].contains("ack 0 0 2"));
        assert!(by[1].contains("intent 0 0 3") && !by[1].contains("ack 0 0 3"));
        assert!(by[1].contains("intent 0 1 1") && by[2].contains("intent 0 1 1"));
        // Generation 0 must hold (0, 3); (0, 4) may be there or not.
        let present = BTreeSet::from([(0, 3)]);
        assert!(ops(&by[0], &present, 0).violations.is_empty());
        assert_eq!(ops(&by[0], &BTreeSet::new(), 0).violations.len(), 1);
    }
}
