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
//! Processes are grouped in *domains*: those that share the kernel's lock on the lock file
//! (one host, one mount of the directory). A process takes its domain's kernel lock before it
//! looks at the baton and keeps it as long as it holds; a domain's processes also share the
//! host-local pass: the pass record (the baton's name N, the validity left of the grant or
//! renewal that created N — its base B counted down by the clock —, the server token T and
//! the local count k) and the `.wait` flag of the processes queued for the kernel lock. A
//! holder that releases with a waiter queued and validity left *passes*: it leaves the baton
//! as it is, the record current, and only lets go of the kernel lock; the waiter that gets the
//! lock next *adopts* — writes k + 1 into the record, then believes N with what is left of
//! its validity and the token (T, k + 1) — and renews later by renaming N to its own name.
//! Without a waiter the holder removes the record, then renames the baton to `free.T`. A
//! process that renames a baton to a grant (free, or a takeover) removes its domain's record
//! first. A waiter that holds the kernel lock takes a live baton over at once when its holder
//! is of its domain and gone (rule (a)) or when it is exactly the name the record gives
//! (rule (a'')); an adopter whose renewal finds the name gone (the record named an older
//! one: its writer died between a renewal and the record's write) lists, and renames a baton
//! of its own server token and domain to its own name. A waiter may decline a record it
//! could adopt (one asking for another TTL does) and list instead, and a queued one may give
//! up waiting.
//!
//! Every interleaving within the bounds (server tokens up to [`Bounds::max_token`], heartbeat
//! sequence up to [`Bounds::max_seq`], local counts below [`K_LIMIT`], one crash) is explored
//! breadth-first; the invariants are checked in every state reached:
//!
//! * at most one live process believes it holds with validity left;
//! * every grant's token — (T, 0) from the server, (T, k + 1) by adoption, ordered as
//!   `T·2^20 + k` is — exceeds every earlier grant's;
//! * a process that believes it holds has the newest token granted.
//!
//! Broken variants must be caught, each with a counterexample: a takeover that renames
//! whatever live baton it finds at that moment rather than the one it watched go stale; a
//! waiter that calls a baton stale a tick early; a release to free that leaves the pass
//! record; a grant that leaves it; and rule (a) judged by the host alone, not the domain.

use std::collections::{HashMap, VecDeque};

/// The TTL in clock ticks (the holder's validity, a waiter's staleness wait).
const TTL: u8 = 3;

/// Local counts stay below this (the implementation's 2^20): a holder whose k + 1 would reach
/// it releases to free instead of passing, and no record whose k + 1 reaches it is adopted.
const K_LIMIT: u8 = 3;

/// A baton's live name: `live.T.S.<holder>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Name {
    token: u8,
    seq: u8,
    holder: u8,
}

/// The baton: the one entry of the lease directory.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Baton {
    /// `free.T`.
    Free { token: u8 },
    /// `live.T.S.<holder>`.
    Live(Name),
}

/// A domain's pass record.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Record {
    name: Name,
    /// B + TTL − now: the validity left of the rename that created `name`.
    left: u8,
    k: u8,
}

/// What a process is doing (its program counter and local variables).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Pc {
    /// Not acquiring.
    Idle,
    /// Holds its domain's `.wait` flag and waits for the kernel lock.
    Queued,
    /// Holds the kernel lock: reads the pass record next (adopts, or lists).
    Locked,
    /// Saw `free.T`: will read its clock, then rename it to its own live name.
    SawFree { token: u8 },
    /// Read its clock (`pending` ticks of validity left from then); the rename is next.
    Granting { token: u8, pending: u8 },
    /// Watching the live name, unchanged for `elapsed` ticks.
    Watching { name: Name, elapsed: u8 },
    /// Found it stale and read its clock; the takeover rename is next.
    Taking { name: Name, pending: u8 },
    /// Believes `name` (its own, or adopted) with token (`name.token`, `k`), validity left
    /// while `left > 0`; `recorded`: the pass record says so.
    Holding {
        name: Name,
        k: u8,
        left: u8,
        recorded: bool,
    },
    /// Holding, and read its clock for a renewal (the rename is next).
    Renewing {
        name: Name,
        k: u8,
        left: u8,
        pending: u8,
    },
    /// Crashed (SIGKILL): does nothing, believes nothing, holds no lock.
    Dead,
}

impl Pc {
    /// Whether it holds its domain's kernel lock.
    fn locked(self) -> bool {
        !matches!(self, Pc::Idle | Pc::Queued | Pc::Dead)
    }

    fn believes(self) -> Option<(u8, u8)> {
        match self {
            Pc::Holding {
                name, k, left: 1.., ..
            }
            | Pc::Renewing {
                name, k, left: 1.., ..
            } => Some((name.token, k)),
            _ => None,
        }
    }
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct State {
    baton: Baton,
    procs: Vec<Pc>,
    /// Each domain's pass record.
    records: Vec<Option<Record>>,
    /// The highest token granted so far: (server token, local count).
    last_granted: (u8, u8),
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
    /// A release to free leaves the pass record in place.
    FreeKeepsRecord,
    /// A grant or takeover leaves the pass record in place (it is rewritten after).
    GrantKeepsRecord,
    /// Rule (a) and the adopter's recovery judge "of this domain" by the host alone.
    HostNotDomain,
}

#[derive(Clone, Copy)]
struct Bounds {
    max_token: u8,
    max_seq: u8,
}

/// A configuration: each process's host and domain (a domain lies within one host). A
/// process alone in its domain skips the `.wait` flag and writes no record: nobody else
/// reads them, and it removes its record itself before it could read it again.
struct Model {
    hosts: Vec<u8>,
    domains: Vec<u8>,
    variant: Variant,
    bounds: Bounds,
}

/// The cases the explorer must reach for the check to mean something.
#[derive(Default, Debug)]
struct Coverage {
    takeover_after_ttl: bool,
    takeover_of_dead_same_domain: bool,
    takeover_of_recorded_name: bool,
    renewed_after_validity_ran_out: bool,
    renewal_found_lease_taken: bool,
    release: bool,
    crash_of_holder: bool,
    pass: bool,
    adopt: bool,
    adopter_renewed: bool,
    crash_between_renewal_and_record: bool,
    adopter_recovered_after_stale_record: bool,
    gave_up_after_pass: bool,
}

impl Model {
    fn initial(&self) -> State {
        let domains = usize::from(*self.domains.iter().max().unwrap()) + 1;
        State {
            baton: Baton::Free { token: 0 },
            procs: vec![Pc::Idle; self.hosts.len()],
            records: vec![None; domains],
            last_granted: (0, 0),
            crashes_left: 1,
            token_regressed: false,
        }
    }

    fn domain(&self, p: usize) -> usize {
        usize::from(self.domains[p])
    }

    /// Whether `p` is the only process of its domain.
    fn alone(&self, p: usize) -> bool {
        self.domains
            .iter()
            .filter(|&&d| d == self.domains[p])
            .count()
            == 1
    }

    /// Whether the baton's identity `holder` counts as the same place as `me` for rule (a)
    /// and the adopter's recovery: its domain (the host identity includes the lock file's
    /// device and inode), or in the broken variant its host alone.
    fn same_identity(&self, holder: u8, me: usize) -> bool {
        let h = usize::from(holder);
        match self.variant {
            Variant::HostNotDomain => self.hosts[h] == self.hosts[me],
            _ => self.domains[h] == self.domains[me],
        }
    }

    /// What a listing makes of the baton.
    fn observe(&self, baton: Baton) -> Pc {
        match baton {
            Baton::Free { token } => Pc::SawFree { token },
            Baton::Live(name) => Pc::Watching { name, elapsed: 0 },
        }
    }

    fn record_grant(s: &mut State, token: (u8, u8)) {
        if token <= s.last_granted {
            s.token_regressed = true;
        }
        s.last_granted = s.last_granted.max(token);
    }

    /// The server grant (or takeover) of `token` to `me`, `left` ticks of validity.
    fn grant(&self, s: &mut State, me: usize, token: u8, left: u8) {
        Self::record_grant(s, (token, 0));
        let name = Name {
            token,
            seq: 0,
            holder: me as u8,
        };
        s.baton = Baton::Live(name);
        s.procs[me] = Pc::Holding {
            name,
            k: 0,
            left,
            recorded: false,
        };
    }

    /// Removes `me`'s domain's record before a grant's or takeover's rename.
    fn clear_before_grant(&self, s: &mut State, me: usize) {
        if self.variant != Variant::GrantKeepsRecord {
            s.records[self.domain(me)] = None;
        }
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
            let dom = self.domain(me);
            let record = s.records[dom];
            let mut push = |step: String, t: State| match names {
                true => out.push((format!("P{me} {step}"), t)),
                false => out.push((step, t)),
            };
            match pc {
                Pc::Dead => continue,
                // Alone in its domain, nobody reads its flag or its record, and its kernel
                // lock is free whenever it asks: it goes straight to the baton.
                Pc::Idle if self.alone(me) => {
                    let mut t = s.clone();
                    t.procs[me] = Pc::Locked;
                    push(name(format_args!("gets the kernel lock")), t);
                }
                Pc::Idle => {
                    let mut t = s.clone();
                    t.procs[me] = Pc::Queued;
                    push(name(format_args!("queues (shared lock on .wait)")), t);
                }
                Pc::Queued => {
                    let free = (0..s.procs.len())
                        .all(|p| p == me || self.domain(p) != dom || !s.procs[p].locked());
                    if free {
                        let mut t = s.clone();
                        t.procs[me] = Pc::Locked;
                        push(name(format_args!("gets the kernel lock, drops .wait")), t);
                    }
                    let mut t = s.clone();
                    t.procs[me] = Pc::Idle;
                    if record.is_some() {
                        cov.gave_up_after_pass = true;
                    }
                    push(
                        name(format_args!("gives up waiting for the kernel lock")),
                        t,
                    );
                }
                Pc::Locked => {
                    // It may also decline a record it could adopt, as a waiter whose TTL
                    // differs does: it lists.
                    let mut t = s.clone();
                    t.procs[me] = self.observe(s.baton);
                    push(name(format_args!("lists {:?}", s.baton)), t);
                    let mut t = s.clone();
                    match record {
                        Some(r) if r.left > 0 && r.k + 1 < K_LIMIT => {
                            cov.adopt = true;
                            let k = r.k + 1;
                            t.records[dom] = Some(Record { k, ..r });
                            Self::record_grant(&mut t, (r.name.token, k));
                            t.procs[me] = Pc::Holding {
                                name: r.name,
                                k,
                                left: r.left,
                                recorded: true,
                            };
                            push(
                                name(format_args!("adopts {:?} (k {k}) from the record", r.name)),
                                t,
                            );
                        }
                        _ => {}
                    }
                }
                Pc::SawFree { token } => {
                    if token < self.bounds.max_token {
                        let mut t = s.clone();
                        self.clear_before_grant(&mut t, me);
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
                        t.procs[me] = Pc::Locked;
                        push(name(format_args!("rename of free.{token} fails")), t);
                    }
                }
                Pc::Watching { name: n, elapsed } => {
                    // Lists again: the same name keeps its count; another restarts the watch.
                    if s.baton != Baton::Live(n) {
                        let mut t = s.clone();
                        t.procs[me] = self.observe(s.baton);
                        push(name(format_args!("lists again: {:?}", s.baton)), t);
                    }
                    let dead_here = self.same_identity(n.holder, me) && dead(n.holder);
                    let recorded = record.is_some_and(|r| r.name == n);
                    let waited = match self.variant {
                        Variant::ShortWait => TTL - 1,
                        _ => TTL,
                    };
                    if (elapsed >= waited || dead_here || recorded)
                        && n.token < self.bounds.max_token
                    {
                        if recorded && !dead_here && elapsed < waited && s.baton == Baton::Live(n) {
                            cov.takeover_of_recorded_name = true;
                        }
                        let mut t = s.clone();
                        self.clear_before_grant(&mut t, me);
                        t.procs[me] = Pc::Taking {
                            name: n,
                            pending: TTL,
                        };
                        let why = match (elapsed >= waited, dead_here) {
                            (true, _) => "unchanged for a TTL",
                            (false, true) => "its holder in this domain is gone",
                            (false, false) => "the pass record names it",
                        };
                        push(name(format_args!("finds {n:?} stale ({why})")), t);
                    }
                }
                Pc::Taking { name: n, pending } => {
                    let mut t = s.clone();
                    let target = match (self.variant, s.baton) {
                        (Variant::TakeoverWithoutCheck, Baton::Live(now)) => Some(now.token),
                        (Variant::TakeoverWithoutCheck, _) => None,
                        (_, b) if b == Baton::Live(n) => Some(n.token),
                        _ => None,
                    };
                    match target {
                        Some(now) if now < self.bounds.max_token => {
                            if self.same_identity(n.holder, me) && dead(n.holder) {
                                cov.takeover_of_dead_same_domain = true;
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
                            t.procs[me] = Pc::Locked;
                            push(name(format_args!("takeover rename of {n:?} fails")), t);
                        }
                    }
                }
                Pc::Holding {
                    name: n,
                    k,
                    left,
                    recorded,
                } => {
                    if !recorded && !self.alone(me) {
                        let mut t = s.clone();
                        t.records[dom] = Some(Record { name: n, left, k });
                        t.procs[me] = Pc::Holding {
                            name: n,
                            k,
                            left,
                            recorded: true,
                        };
                        push(name(format_args!("writes the record {n:?} k {k}")), t);
                    }
                    if n.seq < self.bounds.max_seq {
                        let mut t = s.clone();
                        t.procs[me] = Pc::Renewing {
                            name: n,
                            k,
                            left,
                            pending: TTL,
                        };
                        push(name(format_args!("reads its clock to renew")), t);
                    }
                    // Release: stops believing (the renewing thread stopped: N and B are
                    // final), then tests `.wait`.
                    let waiter = (0..s.procs.len())
                        .any(|p| p != me && self.domain(p) == dom && s.procs[p] == Pc::Queued);
                    let mut t = s.clone();
                    t.procs[me] = Pc::Idle;
                    if waiter && left > 0 && k + 1 < K_LIMIT {
                        cov.pass = true;
                        // The record made current (written, if the last write is not).
                        t.records[dom] = Some(Record { name: n, left, k });
                        push(name(format_args!("passes {n:?} k {k}")), t);
                    } else {
                        if self.variant != Variant::FreeKeepsRecord {
                            t.records[dom] = None;
                        }
                        if s.baton == Baton::Live(n) {
                            t.baton = Baton::Free { token: n.token };
                            cov.release = true;
                        }
                        push(name(format_args!("releases {n:?} to free")), t);
                    }
                }
                Pc::Renewing {
                    name: n,
                    k,
                    left,
                    pending,
                } => {
                    let mut t = s.clone();
                    let renewed = |seq: u8| Pc::Holding {
                        name: Name {
                            token: n.token,
                            seq,
                            holder: me as u8,
                        },
                        k,
                        left: pending,
                        recorded: false,
                    };
                    match s.baton {
                        Baton::Live(b) if b == n => {
                            if left == 0 {
                                cov.renewed_after_validity_ran_out = true;
                            }
                            if n.holder != me as u8 {
                                cov.adopter_renewed = true;
                            }
                            t.baton = Baton::Live(Name {
                                seq: n.seq + 1,
                                holder: me as u8,
                                ..n
                            });
                            t.procs[me] = renewed(n.seq + 1);
                            push(name(format_args!("renews {n:?} -> .{}", n.seq + 1)), t);
                        }
                        // The name is gone; the listing shows a baton of this process's
                        // server token whose holder is of this domain (the record it adopted
                        // named an older one): renamed to its own, keeping its token.
                        Baton::Live(b)
                            if b.token == n.token
                                && self.same_identity(b.holder, me)
                                && dead(b.holder) =>
                        {
                            cov.adopter_recovered_after_stale_record = true;
                            t.baton = Baton::Live(Name {
                                seq: b.seq + 1,
                                holder: me as u8,
                                ..b
                            });
                            t.procs[me] = renewed(b.seq + 1);
                            push(
                                name(format_args!(
                                    "renewal finds {n:?} gone, renews {b:?} -> .{}",
                                    b.seq + 1
                                )),
                                t,
                            );
                        }
                        _ => {
                            cov.renewal_found_lease_taken = true;
                            t.records[dom] = None;
                            t.procs[me] = Pc::Idle;
                            push(name(format_args!("renewal of {n:?} fails: lost")), t);
                        }
                    }
                }
            }
            if s.crashes_left > 0 && pc != Pc::Dead {
                let mut t = s.clone();
                t.crashes_left -= 1;
                t.procs[me] = Pc::Dead;
                match pc {
                    Pc::Holding {
                        recorded: false,
                        name: n,
                        ..
                    } if n.seq > 0 => cov.crash_between_renewal_and_record = true,
                    Pc::Holding { .. } | Pc::Renewing { .. } => cov.crash_of_holder = true,
                    _ => {}
                }
                out.push((name(format_args!("P{me} is SIGKILLed")), t));
            }
        }
        // The clock ticks: validity counts down, watches count up (to the TTL, where they
        // stop mattering).
        let mut t = s.clone();
        for pc in t.procs.iter_mut() {
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
        }
        for r in t.records.iter_mut().flatten() {
            r.left = r.left.saturating_sub(1);
        }
        if t != *s {
            out.push((name(format_args!("the clock ticks")), t));
        }
        out
    }

    /// The invariants' verdict on a state: `None` if it keeps them.
    fn violation(&self, s: &State) -> Option<String> {
        let believers: Vec<usize> = (0..s.procs.len())
            .filter(|&i| s.procs[i].believes().is_some())
            .collect();
        if believers.len() > 1 {
            return Some(format!(
                "processes {believers:?} all believe they hold with validity left"
            ));
        }
        if s.token_regressed {
            return Some("a grant's token was not above every earlier one".to_string());
        }
        believers
            .iter()
            .find(|&&i| s.procs[i].believes() != Some(s.last_granted))
            .map(|i| format!("P{i} believes it holds with a token older than the newest grant"))
    }
}

/// The outcome of an exhaustive exploration.
struct Explored {
    states: usize,
    /// A schedule from the initial state to a violation, if one is reachable.
    counterexample: Option<Vec<String>>,
    coverage: Coverage,
}

/// Writes small fields into a 128-bit word, most significant first.
struct Packer(u128);

impl Packer {
    fn put(&mut self, bits: u32, x: u8) {
        assert!(u32::from(x) < 1 << bits, "{x} does not fit in {bits} bits");
        self.0 = self.0 << bits | u128::from(x);
    }

    fn name(&mut self, n: Name) {
        self.put(3, n.token);
        self.put(2, n.seq);
        self.put(2, n.holder);
    }
}

/// Reads them back, least significant (last written) first.
struct Unpacker(u128);

impl Unpacker {
    fn take(&mut self, bits: u32) -> u8 {
        let x = (self.0 & ((1 << bits) - 1)) as u8;
        self.0 >>= bits;
        x
    }

    fn name(&mut self) -> Name {
        let holder = self.take(2);
        let seq = self.take(2);
        let token = self.take(3);
        Name { token, seq, holder }
    }
}

const NO_NAME: Name = Name {
    token: 0,
    seq: 0,
    holder: 0,
};

/// A state packed into 128 bits (3 bits a token, 2 a sequence, a holder, a count or a
/// clock's, 4 the program counter's tag), so that millions of states hash and store cheaply.
fn pack(s: &State) -> u128 {
    let mut p = Packer(0);
    match s.baton {
        Baton::Free { token } => {
            p.put(1, 0);
            p.name(Name { token, ..NO_NAME });
        }
        Baton::Live(n) => {
            p.put(1, 1);
            p.name(n);
        }
    }
    p.put(3, s.last_granted.0);
    p.put(2, s.last_granted.1);
    p.put(1, s.crashes_left);
    p.put(1, u8::from(s.token_regressed));
    for r in &s.records {
        let r2 = r.unwrap_or(Record {
            name: NO_NAME,
            left: 0,
            k: 0,
        });
        p.put(1, u8::from(r.is_some()));
        p.name(r2.name);
        p.put(2, r2.left);
        p.put(2, r2.k);
    }
    for pc in &s.procs {
        let (tag, n, a, b, c) = match *pc {
            Pc::Idle => (0, NO_NAME, 0, 0, 0),
            Pc::Queued => (1, NO_NAME, 0, 0, 0),
            Pc::Locked => (2, NO_NAME, 0, 0, 0),
            Pc::SawFree { token } => (3, Name { token, ..NO_NAME }, 0, 0, 0),
            Pc::Granting { token, pending } => (4, Name { token, ..NO_NAME }, pending, 0, 0),
            Pc::Watching { name, elapsed } => (5, name, elapsed, 0, 0),
            Pc::Taking { name, pending } => (6, name, pending, 0, 0),
            Pc::Holding {
                name,
                k,
                left,
                recorded,
            } => (7, name, left, k, u8::from(recorded)),
            Pc::Renewing {
                name,
                k,
                left,
                pending,
            } => (8, name, left, k, pending),
            Pc::Dead => (9, NO_NAME, 0, 0, 0),
        };
        p.put(4, tag);
        p.name(n);
        p.put(2, a);
        p.put(2, b);
        p.put(2, c);
    }
    p.0
}

fn unpack(v: u128, procs: usize, domains: usize) -> State {
    let mut u = Unpacker(v);
    let mut pcs = vec![Pc::Idle; procs];
    for pc in pcs.iter_mut().rev() {
        let (c, b, a) = (u.take(2), u.take(2), u.take(2));
        let n = u.name();
        *pc = match u.take(4) {
            0 => Pc::Idle,
            1 => Pc::Queued,
            2 => Pc::Locked,
            3 => Pc::SawFree { token: n.token },
            4 => Pc::Granting {
                token: n.token,
                pending: a,
            },
            5 => Pc::Watching {
                name: n,
                elapsed: a,
            },
            6 => Pc::Taking {
                name: n,
                pending: a,
            },
            7 => Pc::Holding {
                name: n,
                k: b,
                left: a,
                recorded: c == 1,
            },
            8 => Pc::Renewing {
                name: n,
                k: b,
                left: a,
                pending: c,
            },
            _ => Pc::Dead,
        };
    }
    let mut records = vec![None; domains];
    for r in records.iter_mut().rev() {
        let (k, left) = (u.take(2), u.take(2));
        let name = u.name();
        *r = (u.take(1) == 1).then_some(Record { name, left, k });
    }
    let token_regressed = u.take(1) == 1;
    let crashes_left = u.take(1);
    let last_k = u.take(2);
    let last_t = u.take(3);
    let n = u.name();
    let baton = match u.take(1) {
        0 => Baton::Free { token: n.token },
        _ => Baton::Live(n),
    };
    State {
        baton,
        procs: pcs,
        records,
        last_granted: (last_t, last_k),
        crashes_left,
        token_regressed,
    }
}

fn explore(model: &Model) -> Explored {
    let init = model.initial();
    let (n, d) = (init.procs.len(), init.records.len());
    assert!(
        n <= 3 && d <= 3,
        "a state of more than 3 processes or domains does not fit in 128 bits"
    );
    // Every state seen (packed), with the state it was first reached from (for the trace).
    let mut seen: HashMap<u128, u128> = HashMap::new();
    let mut queue = VecDeque::new();
    let mut coverage = Coverage::default();
    seen.insert(pack(&init), u128::MAX);
    queue.push_back(pack(&init));
    while let Some(packed) = queue.pop_front() {
        let s = unpack(packed, n, d);
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
                if prev == u128::MAX {
                    break;
                }
                path.push(prev);
            }
            path.reverse();
            // The steps, spelled out by asking each state again which step led to the next.
            let mut trace: Vec<String> = path
                .windows(2)
                .map(|w| {
                    let steps = model.next(&unpack(w[0], n, d), &mut Coverage::default(), true);
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

/// Three hosts, each its own domain.
fn three_hosts(variant: Variant) -> Model {
    Model {
        hosts: vec![0, 1, 2],
        domains: vec![0, 1, 2],
        variant,
        bounds: BOUNDS,
    }
}

/// Two processes in one domain, a third on another host.
fn one_domain_shared(variant: Variant) -> Model {
    Model {
        hosts: vec![0, 0, 1],
        domains: vec![0, 0, 1],
        variant,
        bounds: BOUNDS,
    }
}

/// Two processes in one domain, a third on the same host through another mount (its own
/// domain: another device, so another kernel lock and another pass record). As designed,
/// this is [`one_domain_shared`] again (the baton's identity is the domain's); it is the
/// configuration where rule (a) judged by the host alone goes wrong.
fn two_mounts_of_one_host(variant: Variant) -> Model {
    Model {
        hosts: vec![0, 0, 0],
        domains: vec![0, 0, 1],
        variant,
        bounds: BOUNDS,
    }
}

fn assert_safe(what: &str, out: Explored) -> Coverage {
    assert!(
        out.counterexample.is_none(),
        "{}",
        out.counterexample.unwrap_or_default().join("\n")
    );
    eprintln!("{what}: {} states, no violation", out.states);
    out.coverage
}

fn assert_caught(what: &str, model: &Model) -> String {
    let out = explore(model);
    let trace = out
        .counterexample
        .unwrap_or_else(|| panic!("the explorer must find {what}'s counterexample"));
    let text = trace.join("\n");
    eprintln!(
        "{what}: counterexample after {} states:\n{text}",
        out.states
    );
    assert!(text.contains("VIOLATION"), "{text}");
    text
}

#[test]
fn three_hosts_with_a_pause_and_a_crash_never_both_hold() {
    let c = assert_safe("three hosts", explore(&three_hosts(Variant::Correct)));
    assert!(c.takeover_after_ttl, "{c:?}");
    assert!(c.renewed_after_validity_ran_out, "{c:?}");
    assert!(c.renewal_found_lease_taken, "{c:?}");
    assert!(c.release && c.crash_of_holder, "{c:?}");
}

#[test]
fn two_processes_of_one_domain_pass_and_take_over_at_once_and_never_both_hold() {
    let c = assert_safe(
        "one domain shared",
        explore(&one_domain_shared(Variant::Correct)),
    );
    assert!(c.takeover_of_dead_same_domain, "{c:?}");
    assert!(c.takeover_of_recorded_name, "{c:?}");
    assert!(c.takeover_after_ttl, "{c:?}");
    assert!(c.pass && c.adopt && c.adopter_renewed, "{c:?}");
    assert!(c.crash_between_renewal_and_record, "{c:?}");
    assert!(c.adopter_recovered_after_stale_record, "{c:?}");
    assert!(c.gave_up_after_pass, "{c:?}");
    assert!(c.release && c.crash_of_holder, "{c:?}");
}

#[test]
fn a_takeover_that_does_not_check_the_record_it_watched_is_caught() {
    let text = assert_caught(
        "the unchecked takeover",
        &three_hosts(Variant::TakeoverWithoutCheck),
    );
    // The schedule the protocol's check exists for: the holder renewed between the watch
    // and the takeover.
    assert!(text.contains("renews"), "{text}");
    assert!(text.contains("takes over"), "{text}");
}

#[test]
fn a_waiter_that_calls_a_baton_stale_before_a_whole_ttl_is_caught() {
    assert_caught("the short wait", &three_hosts(Variant::ShortWait));
}

#[test]
fn a_release_to_free_that_leaves_the_pass_record_is_caught() {
    let text = assert_caught(
        "the release that keeps the record",
        &one_domain_shared(Variant::FreeKeepsRecord),
    );
    assert!(text.contains("adopts"), "{text}");
}

#[test]
fn a_grant_that_leaves_the_pass_record_is_caught() {
    let text = assert_caught(
        "the grant that keeps the record",
        &one_domain_shared(Variant::GrantKeepsRecord),
    );
    assert!(text.contains("adopts"), "{text}");
}

#[test]
fn rule_a_judged_by_the_host_alone_is_caught() {
    let text = assert_caught(
        "rule (a) by host",
        &two_mounts_of_one_host(Variant::HostNotDomain),
    );
    assert!(text.contains("adopts"), "{text}");
}
