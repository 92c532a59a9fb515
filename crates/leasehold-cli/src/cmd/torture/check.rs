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
    /// Overlaps and malformed records.
    pub violations: Vec<String>,
}

#[derive(Debug, Clone)]
struct Interval {
    holder: Holder,
    start: u64,
    end: u64,
    /// Ended by a kill rather than by an `exit` record.
    killed: bool,
}

/// Checks the audit log: records `enter LOCK SLOT GEN T`, `exit LOCK SLOT GEN T` and
/// `kill SLOT GEN T`.
pub fn audit(text: &str) -> AuditReport {
    let mut report = AuditReport::default();
    let mut kills: BTreeMap<Holder, u64> = BTreeMap::new();
    let mut open: BTreeMap<(String, Holder), u64> = BTreeMap::new();
    let mut closed: BTreeMap<String, Vec<Interval>> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split(' ').collect();
        let num = |s: &str| s.parse::<u64>().ok();
        match f.as_slice() {
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
                                start,
                                end: start,
                                killed: false,
                            });
                        }
                        open.insert(key, t);
                    } else if let Some(start) = previous {
                        closed.entry(key.0).or_default().push(Interval {
                            holder: key.1,
                            start,
                            end: t,
                            killed: false,
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
        closed.entry(lock).or_default().push(Interval {
            holder,
            start,
            end,
            killed,
        });
    }
    for (lock, mut intervals) in closed {
        intervals.sort_by_key(|i| (i.start, i.end));
        report.intervals += intervals.len();
        let mut widest: Option<&Interval> = None;
        for i in &intervals {
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
    let (mut counter_intents, mut allowed) = (0u64, BTreeMap::<(u32, u32), BTreeSet<bool>>::new());
    for &pair in present {
        allowed
            .entry(pair)
            .or_insert_with(|| BTreeSet::from([false]));
    }
    for (&(slot, _, _), (kind, acked)) in &intents {
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
}
