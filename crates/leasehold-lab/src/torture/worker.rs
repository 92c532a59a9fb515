//! The worker side of the torture: acknowledged mutations, announcing every phase.
//!
//! Before each phase in which a kill is interesting (holding a lease, and after every step
//! of a durable rewrite) the worker prints the phase's name and waits for a line on stdin.
//! The supervisor answers `go`, or SIGKILLs the worker's process group instead, so the kill
//! lands exactly in that phase. A closed stdin means the supervisor is gone: exit.

use std::io::{self, BufRead, Write};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use leasehold::patterns::durable::{Step, replace_file_observed};
use leasehold::patterns::keyed::KeyError;
use leasehold::{Budget, Classify, Error as LeaseError, ErrorClass};
use leasehold_stores::document::{Document, DocumentError, DocumentFiles, RealFiles};
use leasehold_stores::registry::{Registry, RegistryError};

use super::{AppendLog, KEY_POOL, Layout, ROOT_POOL, Rng, now_ns};

/// What an acquisition refused because of an unsafe path chain says (`Error::Untrusted`).
const UNTRUSTED: &str = "refusing to trust it";
use crate::exit::{Failure, Outcome};

/// How long a worker waits for a lease before giving up on that operation (unacknowledged).
const ACQUIRE_WAIT: Duration = Duration::from_secs(10);

/// Announces `name` and waits for the supervisor's `go`.
fn phase(name: &str) {
    let mut out = io::stdout().lock();
    if writeln!(out, "{name}").and_then(|()| out.flush()).is_err() {
        std::process::exit(0);
    }
    drop(out);
    let mut line = String::new();
    match io::stdin().lock().read_line(&mut line) {
        Ok(n) if n > 0 => {}
        _ => std::process::exit(0),
    }
}

/// Real file operations whose durable rewrite announces each step as a phase.
struct PhasedFiles;

impl DocumentFiles for PhasedFiles {
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        RealFiles.read(path)
    }
    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        phased_replace(path, bytes)
    }
    /// The staged write is checked after its last phase before the rename (as `RealFiles`
    /// does), so a move hunted at any phase up to there is seen.
    fn replace_checked(
        &self,
        path: &Path,
        bytes: &[u8],
        check: &mut dyn FnMut() -> io::Result<()>,
    ) -> io::Result<()> {
        replace_file_observed(path, bytes, &mut |step, _| {
            phase(&format!("write-{step:?}"));
            match step {
                leasehold::patterns::durable::Step::Synced => check(),
                _ => Ok(()),
            }
        })
    }
}

fn phased_replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace_file_observed(path, bytes, &mut |step, _| {
        phase(&format!("write-{step:?}"));
        Ok(())
    })
}

struct Logs {
    audit: AppendLog,
    ops: AppendLog,
    slot: u32,
    generation: u32,
}

impl Logs {
    fn open(layout: &Layout, slot: u32, generation: u32) -> Result<Logs, Failure> {
        let open = |p: &Path| {
            AppendLog::open(p).map_err(|e| Failure::failed(format!("{}: {e}", p.display())))
        };
        Ok(Logs {
            audit: open(&layout.log_of("audit", &format!("{slot}-{generation}")))?,
            ops: open(&layout.log_of("ops", &format!("{slot}-{generation}")))?,
            slot,
            generation,
        })
    }
    fn audit(&self, what: &str, lock: &str) -> Result<(), Failure> {
        let line = format!(
            "{what} {lock} {} {} {}",
            self.slot,
            self.generation,
            now_ns()
        );
        self.audit
            .record(&line)
            .map_err(|e| Failure::failed(format!("audit log: {e}")))
    }
    /// `--ancestor-rename`: records which store generation stands at the path now (`at SLOT
    /// GEN SEQ N`), before operation `seq` and after it. Moves never bring a generation back,
    /// so two equal readings mean no move happened in between.
    /// Returns the generation read (`None` in other runs).
    fn at(&self, layout: &Layout, seq: u64) -> Result<Option<String>, Failure> {
        if !layout.ancestor {
            return Ok(None);
        }
        let path = layout.generation_mark();
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Failure::failed(format!("{}: {e}", path.display())))?;
        let n = text.trim().to_string();
        self.op("at", &format!("{seq} {n}"))?;
        Ok(Some(n))
    }
    fn op(&self, what: &str, rest: &str) -> Result<(), Failure> {
        let line = format!("{what} {} {} {rest}", self.slot, self.generation);
        self.ops
            .record(&line)
            .map_err(|e| Failure::failed(format!("ops log: {e}")))
    }
}

/// A worker's endless loop (it ends by SIGKILL, or when the supervisor closes stdin).
pub fn work(layout: &Layout, slot: u32, generation: u32) -> Outcome {
    let logs = Logs::open(layout, slot, generation)?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find this executable: {e}")))?;
    let mut rng = Rng::seeded();
    for seq in 1u64.. {
        if rng.below(2) == 0 {
            registry_op(layout, &logs, &mut rng, seq)?;
        } else if cfg!(unix) && layout.descendants && rng.below(3) == 0 {
            shared_read(layout, &logs, &exe)?;
        } else if cfg!(unix) {
            counter_op(layout, &logs, &exe, seq)?;
        } else {
            counter_in_process(layout, &logs, seq)?;
        }
    }
    Ok(0)
}

fn registry_op(layout: &Layout, logs: &Logs, rng: &mut Rng, seq: u64) -> Result<(), Failure> {
    let root = rng.below(ROOT_POOL as u64) as usize;
    let remove = rng.below(3) == 0;
    let verb = if remove { "remove" } else { "add" };
    let before = logs.at(layout, seq)?;
    logs.op("intent", &format!("{seq} reg {verb} {root}"))?;
    let options = crate::env::lease_options(); // e.g. a FUSE crash file system, opted into
    let registry =
        Registry::with_files_and_options(layout.registry(), Arc::new(PhasedFiles), None, options);
    if layout.ancestor {
        logs.audit("try", "registry")?;
    }
    let acquired = registry.acquire(&Budget::timeout(ACQUIRE_WAIT));
    if acquired.is_err() {
        logs.at(layout, seq)?;
    }
    match acquired {
        Ok(()) => {}
        Err(RegistryError::Contended { .. }) => return Ok(()),
        Err(e) if layout.ancestor && e.to_string().contains(UNTRUSTED) => {
            return logs.op("refused", &seq.to_string());
        }
        // The lock's path kept leading elsewhere while locking (`Error::Unstable`): the
        // library gives up after three reopens, as it must with directories moving.
        Err(RegistryError::Lease(leasehold::Error::Unstable { .. })) if layout.ancestor => {
            return logs.op("lost", &seq.to_string());
        }
        Err(e) => return logs.op("violation", &format!("registry did not load: {e}")),
    }
    logs.audit("enter", "registry")?;
    phase("holding");
    let (primary, root) = (layout.primary(logs.slot), layout.root(root));
    let done = if remove {
        registry.remove(&primary, &root)
    } else {
        registry.add(&primary, &root)
    };
    // Recorded before the release: the recorded interval lies within the real one.
    logs.audit("exit", "registry")?;
    registry.teardown();
    let after = logs.at(layout, seq)?;
    match done {
        Ok(()) => logs.op("ack", &seq.to_string()),
        // The store's directory was moved away under the lease: the write was refused, or
        // its rename found the staged file gone with the directory.
        Err(_) if before != after => logs.op("lost", &seq.to_string()),
        Err(e) => logs.op("violation", &format!("registry {verb} failed: {e}")),
    }
}

fn counter_op(layout: &Layout, logs: &Logs, exe: &Path, seq: u64) -> Result<(), Failure> {
    let before = logs.at(layout, seq)?;
    logs.op("intent", &format!("{seq} counter"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("run")
        .arg("--timeout")
        .arg(ACQUIRE_WAIT.as_secs().to_string())
        .arg(layout.counter_lock_of(logs.slot))
        .arg("--");
    if layout.ancestor {
        return counter_op_moved(layout, logs, cmd, exe, seq, before);
    }
    if !layout.descendants {
        let status = cmd
            .arg(exe)
            .args(increment_args(layout, logs))
            .status()
            .map_err(|e| Failure::failed(format!("cannot start leasehold run: {e}")))?;
        return match status.code() {
            Some(0) => logs.op("ack", &seq.to_string()),
            Some(75) => Ok(()),
            _ => logs.op(
                "violation",
                &format!("counter increment ended with {status}"),
            ),
        };
    }
    // COMMAND starts the increment in the background and exits: `run` ends while the
    // descendant still holds the inherited lease, which must stay held until it exits. The
    // descendant keeps the supervisor's stdin and stdout for its phases (an asynchronous
    // list's stdin is /dev/null before its own redirections: saved to 3 first), and records the
    // acknowledgement itself; this worker waits for it through their shared stderr pipe,
    // whose end of file says that `run` and the descendant have both gone.
    let (mut reader, writer) =
        std::io::pipe().map_err(|e| Failure::failed(format!("cannot make a pipe: {e}")))?;
    cmd.args(["sh", "-c", "exec 3<&0; \"$@\" <&3 3<&- &", "sh"])
        .arg(exe)
        .args(increment_args(layout, logs))
        .args(["--ack", &seq.to_string()])
        .stderr(writer);
    let child = cmd.spawn();
    drop(cmd); // our copy of the pipe's write end
    let mut child =
        child.map_err(|e| Failure::failed(format!("cannot start leasehold run: {e}")))?;
    let _ = std::io::copy(&mut reader, &mut std::io::stderr());
    let status = child
        .wait()
        .map_err(|e| Failure::failed(format!("waiting for leasehold run: {e}")))?;
    match status.code() {
        Some(0 | 75) => Ok(()),
        _ => logs.op(
            "violation",
            &format!("counter increment ended with {status}"),
        ),
    }
}

/// The counter's `run` of an `--ancestor-rename` run. `run` exits 74 when the counter's
/// directory was moved away under COMMAND (which it stopped): the worker ends COMMAND's
/// interval then (`stop` in its audit log: later than COMMAND's real end, never earlier). An
/// acquisition refused because of the unsafe chain (exit 2) is recorded as refused.
fn counter_op_moved(
    layout: &Layout,
    logs: &Logs,
    mut cmd: Command,
    exe: &Path,
    seq: u64,
    before: Option<String>,
) -> Result<(), Failure> {
    logs.audit("try", "counter")?;
    let mut child = cmd
        .arg(exe)
        .args(increment_args(layout, logs))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| Failure::failed(format!("cannot start leasehold run: {e}")))?;
    let mut err = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut err);
    }
    let status = child
        .wait()
        .map_err(|e| Failure::failed(format!("waiting for leasehold run: {e}")))?;
    // Ends COMMAND's interval unless it recorded its own exit (stopped by `run`, 74, or
    // failed because its directory moved under it).
    logs.audit("stop", "counter")?;
    let after = logs.at(layout, seq)?;
    match status.code() {
        Some(0) => logs.op("ack", &seq.to_string()),
        Some(75) => Ok(()),
        Some(74) => logs.op("lost", &seq.to_string()),
        Some(2) if err.contains(UNTRUSTED) => logs.op("refused", &seq.to_string()),
        // COMMAND's own reads and writes by path found its directory gone; or, with no move
        // during this operation, a COMMAND whose lock had moved away (which docs/cli.md lets
        // run on for up to 0.2 s) removed this one's staged counter as a leftover.
        Some(1) if before != after || err.to_lowercase().contains("no such file") => {
            logs.op("lost", &seq.to_string())
        }
        _ => logs.op(
            "violation",
            &format!("counter increment ended with {status}: {}", err.trim()),
        ),
    }
}

/// The attacker of an `--ancestor-rename` run, running as another user: for every `move`
/// line on stdin it makes generation N of the stores' directory (`shared/fresh.N`: the
/// registry's storages directory, the counter at 0, the generation's number), swaps it with
/// `shared/area` in one `renameat2(RENAME_EXCHANGE)` — the path never stands empty — and
/// renames the replaced one to `shared/generation.N-1`, then answers `moved N T0 T1` (the
/// monotonic clock before and after the swap).
pub fn attack(layout: &Layout) -> Outcome {
    let shared = layout.shared();
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        Failure::failed(format!("torture attacker: {what}: {e}"))
    };
    let mut n = 0u64;
    for line in io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
        n += 1;
        let fresh = shared.join(format!("fresh.{n}"));
        let storages =
            leasehold_stores::registry::RegistryPaths::in_home(&fresh.join("home"), None)
                .document
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| fresh.clone());
        std::fs::create_dir_all(&storages).map_err(|e| fail("mkdir", &e))?;
        std::fs::write(fresh.join("counter"), "0\n").map_err(|e| fail("counter", &e))?;
        std::fs::write(fresh.join(super::GENERATION), format!("{n}\n"))
            .map_err(|e| fail("generation", &e))?;
        let t0 = now_ns();
        exchange(&fresh, &layout.stores()).map_err(|e| fail("renameat2", &e))?;
        let t1 = now_ns();
        let old = shared.join(format!("{}.{}", super::GENERATION, n - 1));
        std::fs::rename(&fresh, &old).map_err(|e| fail("rename", &e))?;
        let mut out = io::stdout().lock();
        if writeln!(out, "moved {n} {t0} {t1}")
            .and_then(|()| out.flush())
            .is_err()
        {
            break;
        }
    }
    Ok(0)
}

/// Swaps the directories `a` and `b` in one step.
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).map_err(io::Error::from)
}

#[cfg(not(target_os = "linux"))]
fn exchange(_: &Path, _: &Path) -> io::Result<()> {
    Err(io::Error::other("renameat2 is Linux's"))
}

/// The worker arguments of an increment as COMMAND (after the executable).
fn increment_args(layout: &Layout, logs: &Logs) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = crate::platform::WORKER_ARGS
        .iter()
        .chain(&["torture", "--increment"])
        .map(Into::into)
        .collect();
    args.push(format!("{}:{}", logs.slot, logs.generation).into());
    args.push("--dir".into());
    args.push(layout.dir.clone().into());
    if layout.ancestor {
        args.push("--ancestor-rename".into());
    }
    args
}

/// A `--descendants` run's reader: the counter read under `run --shared` (so that the
/// shared-mode gates exist, and exclusive runs wait through them).
fn shared_read(layout: &Layout, logs: &Logs, exe: &Path) -> Result<(), Failure> {
    let status = Command::new(exe)
        .args(["run", "--shared", "--timeout"])
        .arg(ACQUIRE_WAIT.as_secs().to_string())
        .arg(layout.counter_lock())
        .arg("--")
        .arg(exe)
        .args(crate::platform::WORKER_ARGS)
        .args(["torture", "--read"])
        .arg(format!("{}:{}", logs.slot, logs.generation))
        .arg("--dir")
        .arg(&layout.dir)
        .status()
        .map_err(|e| Failure::failed(format!("cannot start leasehold run: {e}")))?;
    match status.code() {
        Some(0 | 75) => Ok(()),
        _ => logs.op("violation", &format!("counter read ended with {status}")),
    }
}

/// The command `run --shared` executes: the counter must parse (never torn under a lease).
pub fn read(layout: &Layout, slot: u32, generation: u32) -> Outcome {
    let logs = Logs::open(layout, slot, generation)?;
    phase("reading");
    let path = layout.counter();
    let bytes = std::fs::read(&path)
        .map_err(|e| Failure::failed(format!("{}: cannot read: {e}", path.display())))?;
    let text = String::from_utf8_lossy(&bytes);
    if text.trim().parse::<u64>().is_err() {
        logs.op(
            "violation",
            &format!("counter torn under a shared lease: {text:?}"),
        )?;
    }
    Ok(0)
}

/// The counter on Windows: the same increment under a `Lease` this worker takes itself,
/// not through `leasehold run`. There COMMAND does not inherit the lease (the lease lasts
/// while `run` lives) and a kill (`TerminateProcess`) ends one process, not a group: a
/// killed worker's `run` and incrementer would live on, unkilled, past their kill record.
fn counter_in_process(layout: &Layout, logs: &Logs, seq: u64) -> Result<(), Failure> {
    logs.op("intent", &format!("{seq} counter"))?;
    let options = crate::env::lease_options();
    let lease = match options.acquire(
        layout.counter_lock_of(logs.slot),
        &Budget::timeout(ACQUIRE_WAIT),
    ) {
        Ok(lease) => lease,
        Err(e) if e.is_contended() => return Ok(()),
        Err(e) => return logs.op("violation", &format!("counter lease: {e}")),
    };
    let done = increment_held(layout, logs);
    drop(lease);
    match done {
        Ok(()) => logs.op("ack", &seq.to_string()),
        Err(e) => logs.op(
            "violation",
            &format!("counter increment failed: {}", e.message),
        ),
    }
}

/// The command `run` executes under the counter lease: read, increment, durably rewrite;
/// with `ack`, then record operation `ack` as acknowledged (see [`counter_op`]).
pub fn increment(layout: &Layout, slot: u32, generation: u32, ack: Option<u64>) -> Outcome {
    let logs = Logs::open(layout, slot, generation)?;
    if let Err(e) = increment_held(layout, &logs) {
        // Still holding the lease (it ends with this process): the interval ends here.
        let _ = logs.audit("exit", "counter");
        return Err(e);
    }
    if let Some(seq) = ack {
        logs.op("ack", &seq.to_string())?;
    }
    Ok(0)
}

/// The increment itself, under the counter's lease (held by `run`, or by this process).
fn increment_held(layout: &Layout, logs: &Logs) -> Result<(), Failure> {
    logs.audit("enter", "counter")?;
    phase("holding");
    let path = layout.counter();
    // Under the counter's lease: temporaries beside it are killed increments' leftovers.
    leasehold::patterns::durable::remove_temporaries(&path).map_err(|e| {
        Failure::failed(format!("{}: cannot clean temporaries: {e}", path.display()))
    })?;
    let bytes = std::fs::read(&path)
        .map_err(|e| Failure::failed(format!("{}: cannot read: {e}", path.display())))?;
    let text = String::from_utf8_lossy(&bytes);
    let Ok(n) = text.trim().parse::<u64>() else {
        logs.op("violation", &format!("counter torn: {text:?}"))?;
        return Err(Failure::failed("counter torn"));
    };
    phased_replace(&path, format!("{}\n", n + 1).as_bytes())
        .map_err(|e| Failure::failed(format!("{}: cannot write: {e}", path.display())))?;
    logs.audit("exit", "counter")
}

/// A keyed worker of `--gc`: takes the lease of a random ID of the pool (waiting, or trying
/// once), holds it through a phase, releases. Most acquisitions vouch for their ID (as
/// `stage` does); the others may only take an ID whose lock file exists (as `paths` does).
pub fn keyed(layout: &Layout, slot: u32, generation: u32) -> Outcome {
    let logs = Logs::open(layout, slot, generation)?;
    let leases = layout.keyed();
    let mut rng = Rng::seeded();
    loop {
        let id = format!("k{}", rng.below(KEY_POOL));
        let vouch = rng.below(4) != 0;
        let budget = match rng.below(3) {
            0 => Budget::no_wait(),
            _ => Budget::timeout(ACQUIRE_WAIT),
        };
        let lease = match leases.acquire(&id, &budget, |_| vouch) {
            Ok(lease) => lease,
            Err(KeyError::Unknown { .. }) if !vouch => continue,
            Err(KeyError::Lease(e)) if e.is_contended() => continue,
            Err(e) => {
                logs.op("violation", &format!("keyed {id}: {e}"))?;
                continue;
            }
        };
        logs.audit("enter", &format!("key-{id}"))?;
        phase("holding");
        if let Err(e) = lease.verify() {
            logs.op(
                "violation",
                &format!("keyed {id}: lease lost while held: {e}"),
            )?;
        }
        logs.audit("exit", &format!("key-{id}"))?;
        drop(lease);
    }
}

/// The collector of `--gc`: removes every lock file nobody holds (no ID has a record), once
/// per phase, and records how many it removed. With `--break-exclusion` it is the broken
/// collector of the checker's self-check instead ([`unlink_without_locks`]).
pub fn collect(layout: &Layout, slot: u32, generation: u32) -> Outcome {
    let logs = Logs::open(layout, slot, generation)?;
    let collected = AppendLog::open(&layout.collected())
        .map_err(|e| Failure::failed(format!("{}: {e}", layout.collected().display())))?;
    let leases = layout.keyed();
    loop {
        phase("collect");
        let done = match layout.broken {
            true => unlink_without_locks(&layout.keyed_namespace()),
            false => leases.collect(Duration::ZERO, || Ok(Vec::new())),
        };
        match done {
            Ok(done) => collected
                .record(&format!("{} {}", done.removed, u8::from(done.busy)))
                .map_err(|e| Failure::failed(format!("collected log: {e}")))?,
            Err(e) => logs.op("violation", &format!("collect: {e}"))?,
        }
    }
}

/// A collector that skips the protocol (the checker's self-check): it unlinks every key's
/// lock file it finds without taking the file's lock or the collector lock, so a holder's
/// file can go while it is held and a newcomer then locks a new one beside it.
fn unlink_without_locks(
    ns: &std::path::Path,
) -> Result<leasehold::patterns::keyed::Collection, KeyError> {
    let mut done = leasehold::patterns::keyed::Collection::default();
    let Ok(entries) = std::fs::read_dir(ns) else {
        return Ok(done);
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let key_file = name
            .to_str()
            .is_some_and(|n| n.len() == 69 && n.ends_with(".lock"));
        if key_file && std::fs::remove_file(entry.path()).is_ok() {
            done.removed += 1;
        }
    }
    Ok(done)
}

/// A `--document` worker: increments of `{"n": N, "pad": …}` through
/// [`Document::try_update`] (the document's lease, the durable content read under it, the
/// rewrite), announcing `closure` inside the closure and `write-STEP` after every step of the
/// rewrite; between updates, lock-free reads. Inside each update (the lease held, killed
/// writers' temporaries collected) no temporary may be beside the document. Every read must
/// be a whole version (it parses,
/// and its padding is the one its `n` makes) and no older than what this process saw or
/// wrote before. Each acknowledged update records the `n` it wrote (`wrote`), then `ack`.
pub fn document(layout: &Layout, slot: u32, generation: u32) -> Outcome {
    let logs = Arc::new(Logs::open(layout, slot, generation)?);
    let hook_logs = logs.clone();
    let options = layout
        .document_options()
        .lock_path(layout.document_lock_of(slot))
        .observe(move |step| {
            if step == Step::DirSynced {
                // The last step before the release: recorded within the lease.
                hook_logs
                    .audit("exit", "document")
                    .map_err(|e| io::Error::other(e.message))?;
            }
            phase(&format!("write-{step:?}"));
            Ok(())
        });
    let doc = Document::open(layout.document(), options);
    // The one name a killed writer's temporary has under the kernel's lease.
    let held = layout
        .document()
        .file_name()
        .map(|n| leasehold::patterns::durable::held_temporary_name(&n.to_string_lossy()));
    let mut rng = Rng::seeded();
    let mut newest = 0u64;
    for seq in 1u64.. {
        if rng.below(3) == 0 {
            match doc.read() {
                Ok(None) => {}
                Ok(Some(snap)) => match document_n(&snap.content) {
                    Ok(n) if n < newest => logs.op(
                        "violation",
                        &format!("read version n={n} after n={newest}: went back"),
                    )?,
                    Ok(n) => newest = n,
                    Err(why) => logs.op("violation", &format!("read a torn version: {why}"))?,
                },
                Err(e) => logs.op("violation", &format!("read failed: {e}"))?,
            }
            continue;
        }
        logs.op("intent", &format!("{seq} counter"))?;
        let mut wrote = None;
        let done = doc.try_update(&Budget::timeout(ACQUIRE_WAIT), |cur| {
            logs.audit("enter", "document")
                .map_err(|e| io::Error::other(e.message))?;
            // The update collected killed writers' temporaries under the lease, and no other
            // writer can be making one now — except, under a record lease, a deposed writer
            // that resumed and stages its version before it learns it was deposed. Under the
            // kernel's lease a killed writer's temporary has the one fixed name, which this
            // update's rewrite replaces (or its release removes, if it writes nothing): the
            // run's end checks that it went.
            let left = temporaries(&layout.dir, held.as_deref());
            if left > 0 && layout.record_ttl.is_none() {
                logs.op(
                    "violation",
                    &format!("{left} temporaries beside the document inside an update"),
                )
                .map_err(|e| io::Error::other(e.message))?;
            }
            phase("closure");
            let n = match cur {
                None => 0,
                Some(c) => document_n(c).map_err(io::Error::other)?,
            };
            wrote = Some(n + 1);
            Ok::<_, io::Error>(Some(document_content(n + 1)))
        });
        match (done, wrote) {
            (Ok(_), Some(n)) => {
                if n <= newest {
                    logs.op(
                        "violation",
                        &format!("wrote n={n} after seeing n={newest}: an update was lost"),
                    )?;
                }
                newest = newest.max(n);
                logs.op("wrote", &n.to_string())?;
                logs.op("ack", &seq.to_string())?;
            }
            (Err(e), _) if e.class() == ErrorClass::Contended => {}
            // A deposed writer (paused past the record lease's TTL while another took over)
            // refused: it held nothing from the moment it was paused, and wrote nothing.
            (Err(DocumentError::Lease(LeaseError::LeaseLost { .. })), wrote)
                if layout.record_ttl.is_some() =>
            {
                if wrote.is_some() {
                    logs.audit("stop", "document")?;
                }
            }
            (Ok(_), None) => logs.op("violation", "an update returned without its closure")?,
            (Err(e), _) => logs.op("violation", &format!("update failed: {e}"))?,
        }
    }
    Ok(0)
}

/// The temporaries of durable rewrites in `dir`.
/// The temporaries in `dir`, but for one named `except`.
fn temporaries(dir: &Path, except: Option<&str>) -> usize {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(".tmp.") && Some(n.as_str()) != except)
                .count()
        })
        .unwrap_or(0)
}

/// How many bytes of padding a torture document carries: more than a page, so that a torn
/// version (a short read of a half-written file) could not pass for a whole one.
const DOCUMENT_PAD: usize = 6000;

/// The torture document whose counter is `n`: `{"n": N, "pad": "NNN…"}`, the padding `n`'s
/// digits repeated.
pub fn document_content(n: u64) -> Vec<u8> {
    let digits = n.to_string();
    let pad: String = digits.chars().cycle().take(DOCUMENT_PAD).collect();
    serde_json::to_vec(&serde_json::json!({ "n": n, "pad": pad })).unwrap_or_default()
}

/// The counter of a whole torture document, or why `bytes` is not one.
pub fn document_n(bytes: &[u8]) -> Result<u64, String> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("{} bytes that do not parse: {e}", bytes.len()))?;
    let n = value["n"]
        .as_u64()
        .ok_or_else(|| format!("no counter in {} bytes", bytes.len()))?;
    if document_content(n) != bytes {
        return Err(format!("n={n} with a padding that is not n's"));
    }
    Ok(n)
}
