//! An exhaustive check of the record lease's protocol (docs/design.md, "The record lease")
//! on a model of the file-system operations it uses.
//!
//! The server's state is the baton's name: `free.T`, or `live.T.S.<holder>`. Each process
//! lists the directory (an atomic snapshot of that name), and renames the baton from the exact
//! name it observed to a new one, which the server does only if the baton still has that name.
//! Time is a global clock that ticks in steps while any process may stand still: a pause of
//! any length is a schedule the explorer tries, and a crash stops a process for good. A
//! holder's validity counts down from the clock read before its rename (granted, renewed);
//! a waiter's watch counts up from the listing that first showed a name.
//!
//! Every interleaving within the bounds (tokens up to [`Bounds::max_token`], heartbeat
//! sequence up to [`Bounds::max_seq`], one crash) is explored breadth-first; the invariants
//! are checked in every state reached:
//!
//! * at most one live process believes it holds with validity left;
//! * every grant's token exceeds every earlier grant's.
//!
//! A broken variant — a takeover that renames whatever live baton it finds at that moment,
//! rather than the one it watched go stale — must be caught, with a counterexample.

use std::collections::{HashMap, VecDeque};

/// The TTL in clock ticks (the holder's validity, a waiter's staleness wait).
const TTL: u8 = 3;

/// The baton: the one entry of the lease directory.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Baton {
    /// `free.T`.
    Free { token: u8 },
    /// `live.T.S.<holder>`.
    Live { token: u8, seq: u8, holder: u8 },
}

/// What a process is doing (its program counter and local variables).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Pc {
    /// About to list the directory.
    Idle,
    /// Saw `free.T`: will read its clock, then rename it to its own live name.
    SawFree { token: u8 },
    /// Read its clock (`pending` ticks of validity left from then); the rename is next.
    Granting { token: u8, pending: u8 },
    /// Watching `live.T.S.<holder>`, unchanged for `elapsed` ticks.
    Watching {
        token: u8,
        seq: u8,
        holder: u8,
        elapsed: u8,
    },
    /// Found it stale and read its clock; the takeover rename is next.
    Taking {
        token: u8,
        seq: u8,
        holder: u8,
        pending: u8,
    },
    /// Holds `live.T.S.<self>`, believing it with validity left while `left > 0`.
    Holding { token: u8, seq: u8, left: u8 },
    /// Holding, and read its clock for a renewal (the rename is next).
    Renewing {
        token: u8,
        seq: u8,
        left: u8,
        pending: u8,
    },
    /// Crashed (SIGKILL): does nothing, believes nothing.
    Dead,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct State {
    baton: Baton,
    procs: Vec<Pc>,
    /// The highest token granted so far.
    last_granted: u8,
    crashes_left: u8,
    /// Set when a grant's token was not above every earlier one (an invariant broken).
    token_regressed: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    /// The protocol as designed.
    Correct,
    /// Takeover renames whatever live baton it lists now, not the one it watched.
    TakeoverWithoutCheck,
    /// A waiter calls a baton stale one tick before a whole TTL has passed.
    ShortWait,
}

#[derive(Clone, Copy)]
struct Bounds {
    max_token: u8,
    max_seq: u8,
}

/// A configuration: each process's host.
struct Model {
    hosts: Vec<u8>,
    variant: Variant,
    bounds: Bounds,
}

/// The cases the explorer must reach for the check to mean something.
#[derive(Default, Debug)]
struct Coverage {
    takeover_after_ttl: bool,
    takeover_of_dead_same_host: bool,
    renewed_after_validity_ran_out: bool,
    renewal_found_lease_taken: bool,
    release: bool,
    crash_of_holder: bool,
}

impl Model {
    fn initial(&self) -> State {
        State {
            baton: Baton::Free { token: 0 },
            procs: vec![Pc::Idle; self.hosts.len()],
            last_granted: 0,
            crashes_left: 1,
            token_regressed: false,
        }
    }

    /// What a listing makes of the baton for process `me` (it just listed).
    fn observe(&self, baton: Baton) -> Pc {
        match baton {
            Baton::Free { token } => Pc::SawFree { token },
            Baton::Live { token, seq, holder } => Pc::Watching {
                token,
                seq,
                holder,
                elapsed: 0,
            },
        }
    }

    fn grant(&self, s: &mut State, me: usize, token: u8, left: u8) {
        if token <= s.last_granted {
            s.token_regressed = true;
        }
        s.last_granted = s.last_granted.max(token);
        s.baton = Baton::Live {
            token,
            seq: 0,
            holder: me as u8,
        };
        s.procs[me] = Pc::Holding {
            token,
            seq: 0,
            left,
        };
    }

    /// Every state one step from `s`, with the step's name.
    /// (`names`: spell the steps out, for a counterexample's trace; the search itself needs
    /// only the states.)
    fn next(&self, s: &State, cov: &mut Coverage, names: bool) -> Vec<(String, State)> {
        let mut out = Vec::new();
        let name = |f: std::fmt::Arguments<'_>| match names {
            true => f.to_string(),
            false => String::new(),
        };
        let dead = |i: u8| s.procs[i as usize] == Pc::Dead;
        for me in 0..s.procs.len() {
            let pc = s.procs[me];
            let mut push = |step: String, t: State| match names {
                true => out.push((format!("P{me} {step}"), t)),
                false => out.push((step, t)),
            };
            match pc {
                Pc::Dead => continue,
                Pc::Idle => {
                    let mut t = s.clone();
                    t.procs[me] = self.observe(s.baton);
                    push(name(format_args!("lists {:?}", s.baton)), t);
                }
                Pc::SawFree { token } => {
                    if token < self.bounds.max_token {
                        let mut t = s.clone();
                        t.procs[me] = Pc::Granting {
                            token,
                            pending: TTL,
                        };
                        push(
                            name(format_args!("reads its clock to take free.{token}")),
                            t,
                        );
                    }
                }
                Pc::Granting { token, pending } => {
                    let mut t = s.clone();
                    if s.baton == (Baton::Free { token }) {
                        self.grant(&mut t, me, token + 1, pending);
                        push(
                            name(format_args!("renames free.{token} -> live.{}.0", token + 1)),
                            t,
                        );
                    } else {
                        t.procs[me] = Pc::Idle;
                        push(name(format_args!("rename of free.{token} fails")), t);
                    }
                }
                Pc::Watching {
                    token,
                    seq,
                    holder,
                    elapsed,
                } => {
                    // Lists again: the same name keeps its count; another restarts the watch.
                    let mut t = s.clone();
                    let same = s.baton == Baton::Live { token, seq, holder };
                    if !same {
                        t.procs[me] = self.observe(s.baton);
                        push(name(format_args!("lists again: {:?}", s.baton)), t);
                    }
                    let same_host_dead =
                        self.hosts[holder as usize] == self.hosts[me] && dead(holder);
                    let waited = match self.variant {
                        Variant::ShortWait => TTL - 1,
                        _ => TTL,
                    };
                    if (elapsed >= waited || same_host_dead) && token < self.bounds.max_token {
                        let mut t = s.clone();
                        t.procs[me] = Pc::Taking {
                            token,
                            seq,
                            holder,
                            pending: TTL,
                        };
                        let why = match elapsed >= waited {
                            true => "unchanged for a TTL",
                            false => "its holder on this host is gone",
                        };
                        push(
                            name(format_args!(
                                "finds live.{token}.{seq}.P{holder} stale ({why})"
                            )),
                            t,
                        );
                    }
                }
                Pc::Taking {
                    token,
                    seq,
                    holder,
                    pending,
                } => {
                    let mut t = s.clone();
                    let observed = Baton::Live { token, seq, holder };
                    let target = match (self.variant, s.baton) {
                        (Variant::Correct | Variant::ShortWait, b) if b == observed => Some(token),
                        (Variant::TakeoverWithoutCheck, Baton::Live { token: now, .. }) => {
                            Some(now)
                        }
                        _ => None,
                    };
                    match target {
                        Some(now) if now < self.bounds.max_token => {
                            if self.hosts[holder as usize] == self.hosts[me] && dead(holder) {
                                cov.takeover_of_dead_same_host = true;
                            } else {
                                cov.takeover_after_ttl = true;
                            }
                            self.grant(&mut t, me, now + 1, pending);
                            push(
                                name(format_args!(
                                    "takes over: {:?} -> live.{}.0.P{me}",
                                    s.baton,
                                    now + 1
                                )),
                                t,
                            );
                        }
                        Some(_) => {}
                        None => {
                            t.procs[me] = Pc::Idle;
                            push(
                                name(format_args!("takeover rename of live.{token}.{seq} fails")),
                                t,
                            );
                        }
                    }
                }
                Pc::Holding { token, seq, left } => {
                    if seq < self.bounds.max_seq {
                        let mut t = s.clone();
                        t.procs[me] = Pc::Renewing {
                            token,
                            seq,
                            left,
                            pending: TTL,
                        };
                        push(name(format_args!("reads its clock to renew")), t);
                    }
                    // Release: stops believing, then renames live -> free (one step: the
                    // belief ends first either way).
                    let mut t = s.clone();
                    let mine = Baton::Live {
                        token,
                        seq,
                        holder: me as u8,
                    };
                    if s.baton == mine {
                        t.baton = Baton::Free { token };
                        cov.release = true;
                    }
                    t.procs[me] = Pc::Idle;
                    push(name(format_args!("releases live.{token}.{seq}")), t);
                }
                Pc::Renewing {
                    token,
                    seq,
                    left,
                    pending,
                } => {
                    let mut t = s.clone();
                    let mine = Baton::Live {
                        token,
                        seq,
                        holder: me as u8,
                    };
                    if s.baton == mine {
                        if left == 0 {
                            cov.renewed_after_validity_ran_out = true;
                        }
                        t.baton = Baton::Live {
                            token,
                            seq: seq + 1,
                            holder: me as u8,
                        };
                        t.procs[me] = Pc::Holding {
                            token,
                            seq: seq + 1,
                            left: pending,
                        };
                        push(
                            name(format_args!("renews live.{token}.{seq} -> .{}", seq + 1)),
                            t,
                        );
                    } else {
                        cov.renewal_found_lease_taken = true;
                        t.procs[me] = Pc::Idle;
                        push(
                            name(format_args!("renewal of live.{token}.{seq} fails: lost")),
                            t,
                        );
                    }
                }
            }
            if s.crashes_left > 0 && pc != Pc::Dead {
                let mut t = s.clone();
                t.crashes_left -= 1;
                t.procs[me] = Pc::Dead;
                if matches!(pc, Pc::Holding { .. } | Pc::Renewing { .. }) {
                    cov.crash_of_holder = true;
                }
                out.push((name(format_args!("P{me} is SIGKILLed")), t));
            }
        }
        // The clock ticks: validity counts down, watches count up (to the TTL, where they
        // stop mattering).
        let mut t = s.clone();
        let mut changed = false;
        for pc in t.procs.iter_mut() {
            let before = *pc;
            match pc {
                Pc::Granting { pending, .. } | Pc::Taking { pending, .. } => {
                    *pending = pending.saturating_sub(1)
                }
                Pc::Holding { left, .. } => *left = left.saturating_sub(1),
                Pc::Renewing { left, pending, .. } => {
                    *left = left.saturating_sub(1);
                    *pending = pending.saturating_sub(1);
                }
                Pc::Watching { elapsed, .. } => *elapsed = (*elapsed + 1).min(TTL),
                _ => {}
            }
            changed |= *pc != before;
        }
        if changed {
            out.push((name(format_args!("the clock ticks")), t));
        }
        out
    }

    /// The invariants' verdict on a state: `None` if it keeps them.
    fn violation(&self, s: &State) -> Option<String> {
        let believers: Vec<usize> = (0..s.procs.len())
            .filter(|&i| {
                matches!(
                    s.procs[i],
                    Pc::Holding { left: 1.., .. } | Pc::Renewing { left: 1.., .. }
                )
            })
            .collect();
        if believers.len() > 1 {
            return Some(format!(
                "processes {believers:?} all believe they hold with validity left"
            ));
        }
        s.token_regressed
            .then(|| "a grant's token was not above every earlier one".to_string())
    }
}

/// The outcome of an exhaustive exploration.
struct Explored {
    states: usize,
    /// A schedule from the initial state to a violation, if one is reachable.
    counterexample: Option<Vec<String>>,
    coverage: Coverage,
}

/// A state packed into 64 bits (3 bits a token, 2 a sequence, a holder or a counter, 3
/// the program counter's tag), so that millions of states hash and store cheaply.
fn pack(s: &State) -> u64 {
    let mut v: u64 = 0;
    let mut put = |bits: u32, x: u8| {
        assert!(u64::from(x) < 1 << bits, "{x} does not fit in {bits} bits");
        v = v << bits | u64::from(x);
    };
    match s.baton {
        Baton::Free { token } => {
            put(1, 0);
            put(3, token);
            put(4, 0);
        }
        Baton::Live { token, seq, holder } => {
            put(1, 1);
            put(3, token);
            put(2, seq);
            put(2, holder);
        }
    }
    put(3, s.last_granted);
    put(1, s.crashes_left);
    put(1, u8::from(s.token_regressed));
    for pc in &s.procs {
        let (tag, a, b, c, d) = match *pc {
            Pc::Idle => (0, 0, 0, 0, 0),
            Pc::SawFree { token } => (1, token, 0, 0, 0),
            Pc::Granting { token, pending } => (2, token, 0, 0, pending),
            Pc::Watching {
                token,
                seq,
                holder,
                elapsed,
            } => (3, token, seq, holder, elapsed),
            Pc::Taking {
                token,
                seq,
                holder,
                pending,
            } => (4, token, seq, holder, pending),
            Pc::Holding { token, seq, left } => (5, token, seq, left, 0),
            Pc::Renewing {
                token,
                seq,
                left,
                pending,
            } => (6, token, seq, left, pending),
            Pc::Dead => (7, 0, 0, 0, 0),
        };
        put(3, tag);
        put(3, a);
        put(2, b);
        put(2, c);
        put(2, d);
    }
    v
}

fn unpack(mut v: u64, procs: usize) -> State {
    let mut take = |bits: u32| {
        let x = (v & ((1 << bits) - 1)) as u8;
        v >>= bits;
        x
    };
    let mut pcs = vec![Pc::Idle; procs];
    for pc in pcs.iter_mut().rev() {
        let (d, c, b, a, tag) = (take(2), take(2), take(2), take(3), take(3));
        *pc = match tag {
            0 => Pc::Idle,
            1 => Pc::SawFree { token: a },
            2 => Pc::Granting {
                token: a,
                pending: d,
            },
            3 => Pc::Watching {
                token: a,
                seq: b,
                holder: c,
                elapsed: d,
            },
            4 => Pc::Taking {
                token: a,
                seq: b,
                holder: c,
                pending: d,
            },
            5 => Pc::Holding {
                token: a,
                seq: b,
                left: c,
            },
            6 => Pc::Renewing {
                token: a,
                seq: b,
                left: c,
                pending: d,
            },
            _ => Pc::Dead,
        };
    }
    let token_regressed = take(1) == 1;
    let crashes_left = take(1);
    let last_granted = take(3);
    let (x, y, token, live) = (take(2), take(2), take(3), take(1));
    let baton = match live {
        0 => Baton::Free { token },
        _ => Baton::Live {
            token,
            seq: y,
            holder: x,
        },
    };
    State {
        baton,
        procs: pcs,
        last_granted,
        crashes_left,
        token_regressed,
    }
}

fn explore(model: &Model) -> Explored {
    let init = model.initial();
    let n = init.procs.len();
    assert!(
        n <= 3,
        "a state of more than 3 processes does not fit in 64 bits"
    );
    // Every state seen (packed), with the state it was first reached from (for the trace).
    let mut seen: HashMap<u64, u64> = HashMap::new();
    let mut queue = VecDeque::new();
    let mut coverage = Coverage::default();
    seen.insert(pack(&init), u64::MAX);
    queue.push_back(pack(&init));
    while let Some(packed) = queue.pop_front() {
        let s = unpack(packed, n);
        if seen.len() < 10_000 {
            assert_eq!(
                pack(&s),
                packed,
                "{s:?} packs back to what it was unpacked from"
            );
        }
        if let Some(why) = model.violation(&s) {
            let mut path = vec![packed];
            while let Some(&prev) = seen.get(path.last().unwrap()) {
                if prev == u64::MAX {
                    break;
                }
                path.push(prev);
            }
            path.reverse();
            // The steps, spelled out by asking each state again which step led to the next.
            let mut trace: Vec<String> = path
                .windows(2)
                .map(|w| {
                    let steps = model.next(&unpack(w[0], n), &mut Coverage::default(), true);
                    let (step, _) = steps.into_iter().find(|(_, t)| pack(t) == w[1]).unwrap();
                    step
                })
                .collect();
            trace.push(format!("VIOLATION: {why}"));
            return Explored {
                states: seen.len(),
                counterexample: Some(trace),
                coverage,
            };
        }
        for (_, t) in model.next(&s, &mut coverage, false) {
            let t = pack(&t);
            if let std::collections::hash_map::Entry::Vacant(e) = seen.entry(t) {
                e.insert(packed);
                queue.push_back(t);
            }
        }
    }
    Explored {
        states: seen.len(),
        counterexample: None,
        coverage,
    }
}

const BOUNDS: Bounds = Bounds {
    max_token: 4,
    max_seq: 2,
};

#[test]
fn three_hosts_with_a_pause_and_a_crash_never_both_hold() {
    let model = Model {
        hosts: vec![0, 1, 2],
        variant: Variant::Correct,
        bounds: BOUNDS,
    };
    let out = explore(&model);
    assert!(
        out.counterexample.is_none(),
        "{}",
        out.counterexample.unwrap_or_default().join("\n")
    );
    let c = &out.coverage;
    assert!(c.takeover_after_ttl, "{c:?}");
    assert!(c.renewed_after_validity_ran_out, "{c:?}");
    assert!(c.renewal_found_lease_taken, "{c:?}");
    assert!(c.release && c.crash_of_holder, "{c:?}");
    eprintln!("three hosts: {} states, no violation", out.states);
}

#[test]
fn two_processes_on_one_host_take_over_a_dead_holder_at_once_and_never_both_hold() {
    let model = Model {
        hosts: vec![0, 0, 1],
        variant: Variant::Correct,
        bounds: BOUNDS,
    };
    let out = explore(&model);
    assert!(
        out.counterexample.is_none(),
        "{}",
        out.counterexample.unwrap_or_default().join("\n")
    );
    assert!(
        out.coverage.takeover_of_dead_same_host,
        "{:?}",
        out.coverage
    );
    eprintln!("one host shared: {} states, no violation", out.states);
}

#[test]
fn a_takeover_that_does_not_check_the_record_it_watched_is_caught() {
    let model = Model {
        hosts: vec![0, 1, 2],
        variant: Variant::TakeoverWithoutCheck,
        bounds: BOUNDS,
    };
    let out = explore(&model);
    let trace = out
        .counterexample
        .expect("the explorer must find the broken takeover's counterexample");
    let text = trace.join("\n");
    eprintln!("counterexample:\n{text}");
    assert!(text.contains("VIOLATION"), "{text}");
    // The schedule the protocol's check exists for: the holder renewed between the watch
    // and the takeover.
    assert!(text.contains("renews"), "{text}");
    assert!(text.contains("takes over"), "{text}");
}

#[test]
fn a_waiter_that_calls_a_baton_stale_before_a_whole_ttl_is_caught() {
    let model = Model {
        hosts: vec![0, 1, 2],
        variant: Variant::ShortWait,
        bounds: BOUNDS,
    };
    let trace = explore(&model)
        .counterexample
        .expect("the explorer must find the short wait's counterexample");
    let text = trace.join("\n");
    assert!(text.contains("VIOLATION"), "{text}");
}
