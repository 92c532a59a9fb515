//! The record lease on a two-host bed without NFS: two bindfs (FUSE) mounts of one
//! directory, on which a kernel lock taken through one mount does not exclude one taken
//! through the other (checked first) — as two NFS clients with `local_lock=all`. Processes
//! are made two hosts by [`RecordLease::acquire_on_host`], which exists in test builds only
//! (`#[cfg(test)]`): the children are this test binary, run again with `RECORD_CHILD` set.

use super::*;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};

thread_local! {
    /// How far this thread's clock has jumped ahead (a simulated suspend: the boot clock
    /// counts the time a machine slept).
    pub(super) static CLOCK_JUMP: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

/// Two bindfs mounts of one backing directory, unmounted on drop.
struct TwoMounts {
    backing: PathBuf,
    mounts: [PathBuf; 2],
}

impl TwoMounts {
    /// `None` (after printing `SKIP: <what>: <why>`) where the bed cannot be made here.
    fn make(dir: &Path, what: &str) -> Option<TwoMounts> {
        if Command::new("bindfs").arg("--version").output().is_err() {
            eprintln!("SKIP: {what}: bindfs is not installed (apt-get install bindfs)");
            return None;
        }
        let backing = dir.join("backing");
        std::fs::create_dir_all(&backing).unwrap();
        let mut mounted = Vec::new();
        for i in 0..2 {
            let m = dir.join(format!("m{i}"));
            std::fs::create_dir_all(&m).unwrap();
            match Command::new("bindfs").arg(&backing).arg(&m).output() {
                Ok(o) if o.status.success() => mounted.push(m),
                other => {
                    eprintln!("SKIP: {what}: bindfs could not mount here (no FUSE?): {other:?}");
                    for m in mounted {
                        unmount(&m);
                    }
                    return None;
                }
            }
        }
        let bed = TwoMounts {
            backing,
            mounts: [mounted[0].clone(), mounted[1].clone()],
        };
        // The bed stands for two hosts only if a kernel lock through one mount does not
        // exclude one through the other.
        std::fs::write(bed.backing.join("probe"), b"").unwrap();
        let a = std::fs::File::open(bed.mounts[0].join("probe")).unwrap();
        let b = std::fs::File::open(bed.mounts[1].join("probe")).unwrap();
        use rustix::fs::{FlockOperation, flock};
        flock(&a, FlockOperation::NonBlockingLockExclusive).unwrap();
        if flock(&b, FlockOperation::NonBlockingLockExclusive).is_err() {
            eprintln!(
                "SKIP: {what}: a flock through one bindfs mount excludes the other here, so the two mounts are not two hosts"
            );
            return None;
        }
        Some(bed)
    }
}

fn unmount(m: &Path) {
    let ok = Command::new("fusermount3").arg("-u").arg(m).status();
    if !ok.is_ok_and(|s| s.success()) {
        let _ = Command::new("fusermount").arg("-u").arg(m).status();
    }
}

impl Drop for TwoMounts {
    fn drop(&mut self) {
        for m in &self.mounts {
            unmount(m);
        }
    }
}

/// The fencing token of server token `t` and local count `k`.
fn tok(t: u64, k: u64) -> u64 {
    t << pass::TOKEN_SHIFT | k
}

/// Whether `token` is that of a process that took the lease over at once from a first
/// holder (token 1) killed on its host: adopted from the pass record the holder's renewing
/// thread writes after the grant (the next local count), or, if the holder died before that
/// write, taken over under rule (a) (the next server token).
fn taken_over_at_once(token: u64) -> bool {
    token == tok(1, 1) || token == tok(2, 0)
}

/// A child process, SIGKILLed and reaped on drop (a failing test leaves none behind).
struct Kid(Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// This test binary, run again as a child in `role`.
fn child(role: &str, lock: &Path, host: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "record::tests::child_process",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("RECORD_CHILD", role)
    .env("RECORD_LOCK", lock)
    .env("RECORD_HOST", host)
    .stdin(Stdio::piped())
    .stdout(Stdio::piped());
    cmd
}

/// Reads the child's stdout up to its line with `word` (the harness prints its
/// own lines too), returning the rest of that line.
fn await_line(child: &mut Child, word: &str) -> String {
    let out = child.stdout.as_mut().unwrap();
    let mut lines = BufReader::new(out);
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            lines.read_line(&mut line).unwrap() > 0,
            "child ended before {word}"
        );
        // The harness's own "test ... " may precede the word on its line.
        if let Some(at) = line.find(word) {
            return line[at + word.len()..].trim().to_owned();
        }
        assert!(!line.contains("OVERLAP"), "{line}");
    }
}

/// The children's side: does nothing unless run as a child (`RECORD_CHILD`).
#[test]
fn child_process() {
    let Ok(role) = std::env::var("RECORD_CHILD") else {
        return;
    };
    let lock = PathBuf::from(std::env::var("RECORD_LOCK").unwrap());
    let host = std::env::var("RECORD_HOST").unwrap();
    match role.as_str() {
        // Holds the lease until killed.
        "hold" => {
            let ttl = Duration::from_millis(
                std::env::var("RECORD_TTL_MS").map_or(60_000, |v| v.parse().unwrap()),
            );
            let lease =
                RecordLease::acquire_on_host(&lock, ttl, &Budget::timeout(ttl), &host).unwrap();
            println!("HELD {}", lease.fencing_token());
            std::io::stdout().flush().unwrap();
            let mut buf = String::new();
            let _ = std::io::stdin().read_line(&mut buf);
        }
        // Takes the lease ROUNDS times; inside, proves it is alone with an exclusive
        // creation on the backing directory (a local file system), renews twice (each
        // renewal fails if the baton was taken) and logs its token.
        "rounds" => {
            let rounds: u32 = std::env::var("RECORD_ROUNDS").unwrap().parse().unwrap();
            let witness = PathBuf::from(std::env::var("RECORD_WITNESS").unwrap());
            for _ in 0..rounds {
                let ttl = Duration::from_secs(5);
                let lease = RecordLease::acquire_on_host(
                    &lock,
                    ttl,
                    &Budget::timeout(Duration::from_secs(120)),
                    &host,
                )
                .unwrap();
                let inside = witness.join("inside");
                if std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&inside)
                    .is_err()
                {
                    println!("OVERLAP token {}", lease.fencing_token());
                    std::process::exit(3);
                }
                // A renewal is a rename through the mount: it fails if anyone took the
                // baton meanwhile, and it keeps this process inside for a round trip.
                lease.renew().unwrap();
                let mut log = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(witness.join("tokens"))
                    .unwrap();
                writeln!(log, "{}", lease.fencing_token()).unwrap();
                lease.verify().unwrap();
                lease.renew().unwrap();
                std::fs::remove_file(&inside).unwrap();
                lease.release().unwrap();
            }
            println!("DONE");
        }
        // Holds the lease with a TTL of 1 s, then, once told (a line on stdin), checks it
        // before a write and says what it found.
        "hold-then-verify" => {
            let ttl = Duration::from_secs(1);
            let lease =
                RecordLease::acquire_on_host(&lock, ttl, &Budget::timeout(ttl), &host).unwrap();
            println!("HELD {}", lease.fencing_token());
            std::io::stdout().flush().unwrap();
            let mut buf = String::new();
            std::io::stdin().read_line(&mut buf).unwrap();
            match lease.verify() {
                Ok(()) => println!("VERIFY held"),
                Err(Error::LeaseLost { .. }) => println!("VERIFY lost"),
                Err(e) => println!("VERIFY error {e}"),
            }
        }
        // Holds the lease under this process's own host identity until killed.
        "hold-own-identity" => {
            let ttl = Duration::from_secs(60);
            let lease = RecordLease::acquire(&lock, ttl, &Budget::timeout(ttl)).unwrap();
            println!("HELD {}", lease.fencing_token());
            std::io::stdout().flush().unwrap();
            let mut buf = String::new();
            let _ = std::io::stdin().read_line(&mut buf);
        }
        // Forever: takes the lease (TTL 300 ms), logs the validity it believes it has,
        // reports the grant, waits for a line on stdin, and three times checks
        // it and logs the validity it then believes it has — `token start end` on the boot
        // clock, one line per write — then logs `token end time` and releases; a lost lease
        // is logged and waited for again.
        "torture" => {
            let ttl = Duration::from_millis(300);
            let mut log = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(std::env::var("RECORD_LOG").unwrap())
                .unwrap();
            loop {
                let budget = Budget::timeout(Duration::from_secs(60));
                let lease = RecordLease::acquire_on_host(&lock, ttl, &budget, &host).unwrap();
                let believe = |log: &mut std::fs::File| {
                    let now = sys::boot_clock();
                    if let Some(left) = lease.remaining() {
                        let (t, a, b) = (
                            lease.fencing_token(),
                            now.as_nanos(),
                            (now + left).as_nanos(),
                        );
                        log.write_all(format!("{t} {a} {b}\n").as_bytes()).unwrap();
                    }
                };
                believe(&mut log);
                println!("ROUND {}", lease.fencing_token());
                std::io::stdout().flush().unwrap();
                // Holding, it waits to be told to go on (the test may stop or kill it first).
                let mut go = String::new();
                if std::io::stdin().read_line(&mut go).unwrap() == 0 {
                    return;
                }
                for _ in 0..3 {
                    if lease.verify().is_err() {
                        log.write_all(b"LOST\n").unwrap();
                        break;
                    }
                    believe(&mut log);
                }
                // Believes no more from here: the release follows.
                let end = format!(
                    "{} end {}\n",
                    lease.fencing_token(),
                    sys::boot_clock().as_nanos()
                );
                log.write_all(end.as_bytes()).unwrap();
                drop(lease);
            }
        }
        // Holds the lease `LeaseOptions::acquire_mount_lease` calls for, with a record lease
        // chosen, under this process's own host identity, until killed.
        "hold-mount" => {
            let ttl = Duration::from_secs(60);
            let options = LeaseOptions::new().on_shared_mount(crate::SharedMount::Record { ttl });
            let lease = options
                .acquire_mount_lease(&lock, crate::LockMode::Exclusive, &Budget::timeout(ttl))
                .unwrap();
            println!("HELD {:?}", lease.fencing_token());
            std::io::stdout().flush().unwrap();
            let mut buf = String::new();
            let _ = std::io::stdin().read_line(&mut buf);
        }
        // Holds the lease (TTL RECORD_TTL_MS, default 60 s) and takes orders on stdin:
        // `renew` (answers `RENEWED ok <token>` or `RENEWED error ...`), `release` (answers
        // `RELEASED ok` or `RELEASED error ...`, then waits for the end of its input).
        "hold-then-release" => {
            let ttl = Duration::from_millis(
                std::env::var("RECORD_TTL_MS").map_or(60_000, |v| v.parse().unwrap()),
            );
            let lease =
                RecordLease::acquire_on_host(&lock, ttl, &Budget::timeout(ttl), &host).unwrap();
            println!("HELD {}", lease.fencing_token());
            std::io::stdout().flush().unwrap();
            let mut lease = Some(lease);
            for line in std::io::stdin().lines() {
                let Ok(line) = line else { break };
                match (line.as_str(), lease.take()) {
                    ("renew", Some(l)) => {
                        match l.renew() {
                            Ok(()) => println!("RENEWED ok {}", l.fencing_token()),
                            Err(e) => println!("RENEWED error {e}"),
                        }
                        lease = Some(l);
                    }
                    ("release", Some(l)) => match l.release() {
                        Ok(()) => println!("RELEASED ok"),
                        Err(e) => println!("RELEASED error {e}"),
                    },
                    (other, _) => println!("UNKNOWN {other}"),
                }
                std::io::stdout().flush().unwrap();
            }
        }
        // One try, reported.
        "try" => {
            let ttl = Duration::from_secs(60);
            match RecordLease::acquire_on_host(&lock, ttl, &Budget::no_wait(), &host) {
                Ok(lease) => println!("TRY held {}", lease.fencing_token()),
                Err(e) if e.is_contended() => println!("TRY busy"),
                Err(e) => println!("TRY error {e}"),
            }
        }
        other => panic!("unknown role {other}"),
    }
    // The role is done: exit before the harness writes its summary to a pipe the parent may
    // have closed already (it would print an EPIPE error into the parent's log).
    let _ = std::io::stdout().flush();
    std::process::exit(0);
}

#[test]
fn baton_names_read_back_as_written() {
    let live = Baton::Live {
        token: 7,
        seq: 3,
        ttl: Duration::from_millis(2500),
        holder: Identity {
            host: "0123456789abcdef".into(),
            pid: 42,
            start: 99,
        },
    };
    assert_eq!(Baton::parse(&live.name()), Some(live.clone()));
    assert_eq!(live.name(), "live.7.3.2500.0123456789abcdef.42.99");
    assert_eq!(Baton::parse("free.4"), Some(Baton::Free { token: 4 }));
    for junk in [
        "free.x",
        "free.1.2",
        "live.1.2.3.nothex.1.2",
        "live.1",
        "lease",
        "",
    ] {
        assert_eq!(Baton::parse(junk), None, "{junk}");
    }
}

/// Four processes, two through each mount as two hosts, take the lease 25 times each: never
/// two inside at once (an exclusive creation on the backing directory would fail), and
/// the fencing tokens, logged inside, strictly increase.
#[test]
fn processes_on_two_mounts_as_two_hosts_exclude_each_other_with_growing_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = TwoMounts::make(tmp.path(), "record lease across two mounts") else {
        return;
    };
    let witness = tmp.path().join("witness");
    std::fs::create_dir(&witness).unwrap();
    let rounds = 25;
    let mut children: Vec<Kid> = (0..4)
        .map(|i| {
            let (mount, host) = (&bed.mounts[i % 2], ["host-a", "host-b"][i % 2]);
            child("rounds", &mount.join("x.lock"), host)
                .env("RECORD_ROUNDS", rounds.to_string())
                .env("RECORD_WITNESS", &witness)
                .spawn()
                .map(Kid)
                .unwrap()
        })
        .collect();
    for Kid(c) in &mut children {
        assert_eq!(await_line(c, "DONE"), "");
        assert!(c.wait().unwrap().success());
    }
    let tokens: Vec<u64> = std::fs::read_to_string(witness.join("tokens"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(tokens.len(), 4 * rounds, "{tokens:?}");
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

/// A holder SIGKILLed is taken over at once by a process of the same host, long before its
/// TTL (60 s; the budget is 20 s); a process of the other host cannot tell it is gone and
/// waits for the TTL.
#[test]
fn a_sigkilled_holder_is_taken_over_at_once_on_its_host_only() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = TwoMounts::make(tmp.path(), "same-host takeover") else {
        return;
    };
    let lock = bed.mounts[0].join("x.lock");
    let mut holder = Kid(child("hold", &lock, "host-a").spawn().unwrap());
    assert_eq!(await_line(&mut holder.0, "HELD"), tok(1, 0).to_string());
    let ttl = Duration::from_secs(60);
    let other = bed.mounts[1].join("x.lock");
    let busy = RecordLease::acquire_on_host(&other, ttl, &Budget::no_wait(), "host-b").unwrap_err();
    assert!(busy.is_contended(), "{busy}");
    holder.0.kill().unwrap();
    holder.0.wait().unwrap();
    let busy = RecordLease::acquire_on_host(
        &other,
        ttl,
        &Budget::timeout(Duration::from_millis(300)),
        "host-b",
    )
    .unwrap_err();
    assert!(
        busy.is_contended(),
        "another host waits for the TTL: {busy}"
    );
    let lease = RecordLease::acquire_on_host(
        &lock,
        ttl,
        &Budget::timeout(Duration::from_secs(20)),
        "host-a",
    )
    .unwrap();
    // Its host's next process takes over at once.
    assert!(taken_over_at_once(lease.fencing_token()));
}

/// A baton written by anyone — a TTL of u64::MAX milliseconds, names that are no batons — is
/// waited on or skipped, never a panic.
#[test]
fn any_name_in_the_lease_directory_is_survived() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = tmp.path().join("x.lock");
    let dir = lease_dir_of(&lock);
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("live.1.0.18446744073709551615.0123456789abcdef.1.1"),
        b"",
    )
    .unwrap();
    std::fs::write(dir.join("live.x"), b"").unwrap();
    std::fs::write(dir.join("free.99999999999999999999999"), b"").unwrap();
    for budget in [
        Budget::no_wait(),
        Budget::timeout(Duration::from_millis(50)),
    ] {
        let e = RecordLease::acquire(&lock, Duration::MAX, &budget).unwrap_err();
        assert!(e.is_contended(), "{e}");
    }
    // The last token there is: no next grant, and no overflow.
    let last = tmp.path().join("last.lock");
    std::fs::create_dir(lease_dir_of(&last)).unwrap();
    std::fs::write(lease_dir_of(&last).join(format!("free.{}", u64::MAX)), b"").unwrap();
    let e = RecordLease::acquire(&last, Duration::from_secs(1), &Budget::no_wait()).unwrap_err();
    assert!(e.is_contended(), "{e}");
}

/// A holder SIGSTOPped past its TTL is taken over by the other host once its baton stood
/// still for a whole TTL; continued, it checks before writing and finds the lease lost (no
/// panic, no write), while the new holder keeps it.
#[test]
fn a_holder_paused_past_its_ttl_is_taken_over_and_finds_out_before_writing() {
    use rustix::process::{Pid, Signal, kill_process};
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = TwoMounts::make(tmp.path(), "paused holder") else {
        return;
    };
    let mut holder = Kid(
        child("hold-then-verify", &bed.mounts[0].join("x.lock"), "host-a")
            .spawn()
            .unwrap(),
    );
    assert_eq!(await_line(&mut holder.0, "HELD"), tok(1, 0).to_string());
    let pid = Pid::from_raw(holder.0.id() as i32).unwrap();
    kill_process(pid, Signal::STOP).unwrap();
    let lease = RecordLease::acquire_on_host(
        &bed.mounts[1].join("x.lock"),
        Duration::from_secs(60),
        &Budget::timeout(Duration::from_secs(30)),
        "host-b",
    )
    .unwrap();
    assert_eq!(lease.fencing_token(), tok(2, 0));
    kill_process(pid, Signal::CONT).unwrap();
    writeln!(holder.0.stdin.as_mut().unwrap(), "go").unwrap();
    assert_eq!(await_line(&mut holder.0, "VERIFY"), "lost");
    assert!(holder.0.wait().unwrap().success());
    lease.renew().unwrap();
}

/// On one host the record lease and the kernel lease on the same path exclude each other,
/// both ways (a record lease holds the kernel's lock on the lock path while it holds).
#[test]
fn a_record_lease_and_a_kernel_lease_on_one_path_exclude_each_other() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = TwoMounts::make(tmp.path(), "record and kernel lease") else {
        return;
    };
    let lock = bed.mounts[0].join("x.lock");
    let kernel = LeaseOptions::new().allow_network_filesystem(true);
    let mut holder = Kid(child("hold", &lock, "host-a").spawn().unwrap());
    assert_eq!(await_line(&mut holder.0, "HELD"), tok(1, 0).to_string());
    let busy = kernel.try_acquire(&lock).unwrap_err();
    assert!(busy.is_contended(), "{busy}");
    drop(holder);
    let held = kernel.try_acquire(&lock).unwrap();
    let mut other = Kid(child("try", &lock, "host-a").spawn().unwrap());
    assert_eq!(await_line(&mut other.0, "TRY"), "busy");
    drop(held);
    // Released, the kernel lease lets a record lease in; the killed holder's grant is taken
    // over at once (same domain, process gone).
    let mut other = Kid(child("try", &lock, "host-a").spawn().unwrap());
    let held = await_line(&mut other.0, "TRY");
    let token = held.strip_prefix("held ").unwrap().parse().unwrap();
    assert!(taken_over_at_once(token), "{held}");
}

/// The names of this process's threads (`/proc/self/task/*/comm`).
#[cfg(target_os = "linux")]
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_owned())
        .collect()
}

/// The renewing thread is started before the wait, so that a waiter woken by the kernel
/// goes straight to the baton; an acquisition that ends without a grant (contended, timed
/// out) leaves no such thread behind, and a released lease's thread is gone too.
#[test]
#[cfg(target_os = "linux")]
fn an_acquisition_without_a_grant_leaves_no_renewing_thread_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = TwoMounts::make(tmp.path(), "renewing threads") else {
        return;
    };
    let lock = bed.mounts[0].join("t.lock");
    // A joined thread can stand in `/proc` a moment longer: the count is awaited.
    let renewing = |want: usize| {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let n = thread_names()
                .iter()
                // `comm` keeps 15 bytes of "leasehold-record".
                .filter(|n| *n == "leasehold-recor")
                .count();
            if n == want || Instant::now() > until {
                return n;
            }
            std::thread::yield_now();
        }
    };
    let before = renewing(0);
    let mut holder = Kid(child("hold", &lock, "host-a").spawn().unwrap());
    assert_eq!(await_line(&mut holder.0, "HELD"), tok(1, 0).to_string());
    let ttl = Duration::from_secs(5);
    for budget in [
        Budget::no_wait(),
        Budget::timeout(Duration::from_millis(30)),
    ] {
        let err = RecordLease::acquire_on_host(&lock, ttl, &budget, "host-a").unwrap_err();
        assert!(err.is_contended(), "{err}");
        assert_eq!(
            renewing(before),
            before,
            "a failed acquisition left its thread"
        );
    }
    // Killed on this host: taken over at once.
    drop(holder);
    let lease = RecordLease::acquire_on_host(&lock, ttl, &Budget::timeout(ttl), "host-a").unwrap();
    assert_eq!(renewing(before + 1), before + 1);
    lease.release().unwrap();
    assert_eq!(renewing(before), before, "a released lease left its thread");
}

/// A first record lease (host "host-a", TTL 5 s) on a fresh lock file under `tmp`, and the
/// path of its hint file; `None` (after printing `SKIP:`) where this machine has no
/// host-local directory for hints.
#[cfg(target_os = "linux")]
fn hinted(tmp: &Path, what: &str) -> Option<(PathBuf, RecordLease, PathBuf)> {
    let lock = tmp.join("h.lock");
    let first =
        RecordLease::acquire_on_host(&lock, HINTED_TTL, &Budget::timeout(HINTED_TTL), "host-a")
            .unwrap();
    let Some(dir) = super::hint::directory() else {
        eprintln!("SKIP: {what}: no /dev/shm directory of this user's for hints");
        return None;
    };
    let id = first.kernel().file_id().expect("a held lease's file");
    let hint = super::hint::Hint::new(dir, id).file();
    Some((lock, first, hint))
}

#[cfg(target_os = "linux")]
const HINTED_TTL: Duration = Duration::from_secs(5);

/// A clean release leaves the baton's new name for this host's next waiter, which renames
/// that very name to its grant instead of listing the lease directory first; a grant
/// clears it, so a holder that dies leaves no guess behind.
#[test]
#[cfg(target_os = "linux")]
fn a_clean_release_leaves_its_name_for_this_hosts_next_waiter() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((lock, first, hint)) = hinted(tmp.path(), "the release's hint") else {
        return;
    };
    let (ttl, budget) = (HINTED_TTL, Budget::timeout(HINTED_TTL));
    assert!(!hint.exists(), "a grant clears the hint");
    first.release().unwrap();
    assert_eq!(std::fs::read_to_string(&hint).unwrap(), "free.1");
    let second = RecordLease::acquire_on_host(&lock, ttl, &budget, "host-a").unwrap();
    assert_eq!(second.fencing_token(), tok(2, 0));
    assert!(!hint.exists(), "the grant cleared the hint it used");
    // A holder killed on this host leaves no hint (its grant cleared the last one): its
    // successor lists, and takes the dead holder's baton over at once. (The child asks for
    // another TTL than the parent's, so neither adopts the other's grant through the pass:
    // each takes the baton over, under rule (a'') or (a).)
    let mut dead = Kid(child("hold", &lock, "host-a").spawn().unwrap());
    drop(second);
    assert_eq!(await_line(&mut dead.0, "HELD"), tok(3, 0).to_string());
    assert!(!hint.exists());
    drop(dead);
    let third = RecordLease::acquire_on_host(&lock, ttl, &budget, "host-a").unwrap();
    assert_eq!(
        third.fencing_token(),
        tok(4, 0),
        "a holder killed on this host is taken over"
    );
    drop(third);
    assert_eq!(std::fs::read_to_string(&hint).unwrap(), "free.4");
}

/// The hint is a guess, never trusted: a stale, torn or planted one (another token, not a
/// free baton, a symlink) costs one failed rename, then the waiter lists as before and is
/// granted the right token.
#[test]
#[cfg(target_os = "linux")]
fn a_wrong_hint_is_only_a_guess() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((lock, lease, hint)) = hinted(tmp.path(), "wrong hints") else {
        return;
    };
    let (ttl, budget) = (HINTED_TTL, Budget::timeout(HINTED_TTL));
    lease.release().unwrap();
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, "free.1").unwrap();
    let plants: [&dyn Fn(&Path); 5] = [
        &|h| std::fs::write(h, "free.7").unwrap(),
        &|h| std::fs::write(h, "free.").unwrap(),
        &|h| std::fs::write(h, "live.1.0.5000.0123456789abcdef.1.1").unwrap(),
        &|h| std::fs::write(h, vec![b'x'; 1000]).unwrap(),
        &|h| std::os::unix::fs::symlink(&victim, h).unwrap(),
    ];
    for (n, plant) in plants.iter().enumerate() {
        let _ = std::fs::remove_file(&hint);
        plant(&hint);
        let lease = RecordLease::acquire_on_host(&lock, ttl, &budget, "host-a").unwrap();
        assert_eq!(lease.fencing_token(), tok(n as u64 + 2, 0), "plant {n}");
        lease.release().unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "free.1",
        "the symlink was followed"
    );
    assert!(
        !hint.is_symlink(),
        "a release replaces what stands at the hint"
    );
}

/// A holder in a PID namespace of its own (a container: `unshare --pid --fork --mount-proc`,
/// as root) is another host, with no identity override: a process outside, on the same
/// machine, cannot read its PID in its own `/proc` — PID 1 there is the machine's init,
/// started at another time — and must not call it gone; it waits for the TTL.
#[test]
fn a_holder_in_another_pid_namespace_is_another_host() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = TwoMounts::make(tmp.path(), "holder in another PID namespace") else {
        return;
    };
    let probe = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        eprintln!(
            "SKIP: holder in another PID namespace: unshare --pid --fork --mount-proc failed here (needs root): {probe:?}"
        );
        return;
    }
    let inner = child("hold-own-identity", &bed.mounts[0].join("x.lock"), "");
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount-proc"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .envs(inner.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut holder = Kid(cmd.spawn().unwrap());
    assert_eq!(await_line(&mut holder.0, "HELD"), tok(1, 0).to_string());
    let e = RecordLease::acquire(
        bed.mounts[1].join("x.lock"),
        Duration::from_secs(60),
        &Budget::timeout(Duration::from_millis(500)),
    )
    .unwrap_err();
    assert!(
        e.is_contended(),
        "a live holder in a container was taken over: {e}"
    );
}

/// The holder's own thread renews the lease: a holder with a TTL of 2 s that does nothing
/// keeps it through a waiter's budget of 5 s on the other host.
#[test]
fn a_holder_that_does_nothing_keeps_its_lease_through_many_ttls() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = TwoMounts::make(tmp.path(), "renewing thread") else {
        return;
    };
    let mut holder = Kid(child("hold", &bed.mounts[0].join("x.lock"), "host-a")
        .env("RECORD_TTL_MS", "2000")
        .spawn()
        .unwrap());
    assert_eq!(await_line(&mut holder.0, "HELD"), tok(1, 0).to_string());
    let e = RecordLease::acquire_on_host(
        &bed.mounts[1].join("x.lock"),
        Duration::from_secs(60),
        &Budget::timeout(Duration::from_secs(5)),
        "host-b",
    )
    .unwrap_err();
    assert!(e.is_contended(), "{e}");
}

/// Torture on the two-mount bed: four processes (two per mount, as two hosts) take the lease
/// over and over, each logging the validity it believes it has whenever it checks; the test
/// SIGKILLs holders while they hold (and starts them again), six times, and SIGSTOPs them
/// while they hold until the other host has taken the lease twice, six times. No two believed validities of different tokens overlap on the machine's
/// boot clock (a killed process's ends when it was killed), and grants' tokens are unique.
#[test]
fn torture_with_sigkill_and_sigstop_on_both_hosts_never_overlaps_believed_validity() {
    use rustix::process::{Pid, Signal, kill_process};
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = TwoMounts::make(tmp.path(), "record lease torture") else {
        return;
    };
    // Each child's grants arrive on one channel, from a reader thread per child: (child,
    // incarnation, token). A child that reported a grant holds the lease and waits for a line.
    let (tx, rx) = std::sync::mpsc::channel::<(usize, usize, u64)>();
    let spawn = |i: usize, round: usize| {
        let log = tmp.path().join(format!("log.{i}.{round}"));
        let mut kid = child(
            "torture",
            &bed.mounts[i % 2].join("x.lock"),
            ["host-a", "host-b"][i % 2],
        )
        .env("RECORD_LOG", &log)
        .spawn()
        .map(Kid)
        .unwrap();
        let out = kid.0.stdout.take().unwrap();
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if let Some(at) = line.find("ROUND ") {
                    let token = line[at + 6..].trim().parse().unwrap();
                    if tx.send((i, round, token)).is_err() {
                        return;
                    }
                }
            }
        });
        (kid, log, round)
    };
    let go = |kid: &mut Kid| {
        writeln!(kid.0.stdin.as_mut().unwrap(), "go").unwrap();
    };
    let mut kids: Vec<(Kid, PathBuf, usize)> = (0..4).map(|i| spawn(i, 0)).collect();
    // Every log, with when its process was killed (None: never).
    let mut logs: Vec<(PathBuf, Option<Duration>)> = Vec::new();
    let mut grants = Vec::new();
    let (mut kills, mut stops) = (0, 0);
    let mut step = 0;
    while kills < 6 || stops < 6 {
        let (i, round, token) = rx.recv().unwrap();
        if round != kids[i].2 {
            continue; // from a killed incarnation
        }
        grants.push(token);
        step += 1;
        let pid = Pid::from_raw(kids[i].0.0.id() as i32).unwrap();
        match step % 3 {
            0 => {
                // Killed while holding. Its belief is counted to the moment the signal is
                // sent: it dies after that, but no one of its host may take over before it
                // is gone, and no one elsewhere before a whole TTL.
                let killed = sys::boot_clock();
                kill_process(pid, Signal::KILL).unwrap();
                let _ = kids[i].0.0.wait();
                let new = spawn(i, step);
                let (old, old_log, _) = std::mem::replace(&mut kids[i], new);
                drop(old);
                logs.push((old_log, Some(killed)));
                kills += 1;
            }
            1 => {
                // Stopped while holding, until the other host has been granted the lease
                // twice (which takes the stopped holder's TTL); this host's other process
                // queues behind the stopped one's kernel lock meanwhile.
                kill_process(pid, Signal::STOP).unwrap();
                let mut others = 0;
                while others < 2 {
                    let (j, round, t) = rx.recv().unwrap();
                    if round != kids[j].2 {
                        continue;
                    }
                    assert_ne!(
                        j % 2,
                        i % 2,
                        "a process of the stopped holder's host got in"
                    );
                    grants.push(t);
                    others += 1;
                    go(&mut kids[j].0);
                }
                kill_process(pid, Signal::CONT).unwrap();
                go(&mut kids[i].0);
                stops += 1;
            }
            _ => go(&mut kids[i].0),
        }
    }
    for (kid, log, _) in kids {
        drop(kid);
        logs.push((log, Some(sys::boot_clock())));
    }
    let mut beliefs: Vec<(u64, u128, u128)> = Vec::new();
    for (log, killed) in &logs {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        // When each token's holder stopped believing: its release, else its death.
        let mut ends: HashMap<u64, u128> = HashMap::new();
        for line in text.lines() {
            if let [t, "end", at] = line.split(' ').collect::<Vec<_>>().as_slice() {
                ends.insert(t.parse().unwrap(), at.parse().unwrap());
            }
        }
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if let [t, a, b] = f.as_slice()
                && *a != "end"
                && let (Ok(t), Ok(a), Ok(b)) =
                    (t.parse::<u64>(), a.parse::<u128>(), b.parse::<u128>())
            {
                let mut b = b;
                if let Some(k) = killed {
                    b = b.min(k.as_nanos());
                }
                if let Some(e) = ends.get(&t) {
                    b = b.min(*e);
                }
                beliefs.push((t, a, b));
            }
        }
    }
    assert!(beliefs.len() > 24, "{beliefs:?}");
    for x in &beliefs {
        for y in &beliefs {
            if x.0 != y.0 {
                assert!(
                    x.2 <= y.1 || y.2 <= x.1,
                    "token {} believed [{}, {}] and token {} [{}, {}]",
                    x.0,
                    x.1,
                    x.2,
                    y.0,
                    y.1,
                    y.2
                );
            }
        }
    }
    let mut sorted = grants.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        grants.len(),
        "a token granted twice: {grants:?}"
    );
}

/// A holder whose clock jumps past its TTL (the machine slept) knows its validity ran out:
/// `remaining` says none, and `verify` checks the baton — renews it, here, since nobody took
/// it — before answering, rather than answering from memory.
#[test]
fn a_holder_whose_clock_jumped_past_its_ttl_checks_the_baton_before_answering() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = tmp.path().join("x.lock");
    let ttl = Duration::from_secs(60);
    let lease = RecordLease::acquire(&lock, ttl, &Budget::no_wait()).unwrap();
    let baton = || {
        let names = std::fs::read_dir(lease_dir_of(&lock)).unwrap();
        let names: Vec<String> = names
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        names[0].split('.').nth(2).unwrap().parse::<u64>().unwrap()
    };
    assert_eq!(baton(), 0);
    lease.verify().unwrap();
    assert_eq!(baton(), 0, "with validity left, verify answers without I/O");
    CLOCK_JUMP.with(|j| j.set(ttl + Duration::from_secs(1)));
    assert_eq!(lease.remaining(), None);
    lease.verify().unwrap();
    assert_eq!(baton(), 1, "past its validity, verify renewed first");
    assert!(lease.remaining().is_some());
    CLOCK_JUMP.with(|j| j.set(Duration::ZERO));
}

/// The margin rule before a write: with less than a tenth of the TTL of validity left (the
/// clock jumped), `validity_for_write` refuses — lease lost, naming the lock path — without
/// touching the baton, and `verify_for_write` renews first and then allows the write.
#[test]
fn a_write_with_less_than_the_margin_of_validity_left_is_refused_until_renewed() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = tmp.path().join("x.lock");
    let ttl = Duration::from_secs(60);
    let lease = RecordLease::acquire(&lock, ttl, &Budget::no_wait()).unwrap();
    let seq = || {
        let names = std::fs::read_dir(lease_dir_of(&lock)).unwrap();
        let names: Vec<String> = names
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names[0].split('.').nth(2).unwrap().parse::<u64>().unwrap()
    };
    lease.validity_for_write().unwrap();
    // Validity is TTL less the margin (54 s); 50 s on, 4 s are left: under the 6 s margin.
    CLOCK_JUMP.with(|j| j.set(Duration::from_secs(50)));
    assert!(lease.remaining().is_some(), "validity is left");
    let refused = lease.validity_for_write().unwrap_err();
    assert!(
        matches!(&refused, Error::LeaseLost { path } if *path == lock),
        "{refused:?}"
    );
    assert_eq!(seq(), 0, "the margin rule alone does no I/O");
    assert!(lease.is_held(), "too little validity is not a lost lease");
    lease.verify_for_write().unwrap();
    assert_eq!(seq(), 1, "verify_for_write renewed first");
    lease.validity_for_write().unwrap();
    CLOCK_JUMP.with(|j| j.set(Duration::ZERO));
}

/// `LeaseOptions::acquire_mount_lease` takes a record lease on a mount whose locks stay on
/// each host only when one is chosen: by default the mount is refused with an error naming
/// the option; chosen, a holder through one mount excludes a try through the other, is
/// named by `RecordLease::holder`, and once SIGKILLed is taken over at once (same host) with
/// the next token; a local path and a shared lease get the kernel's lease or its refusal.
#[test]
fn the_options_take_a_record_lease_on_a_host_only_mount_when_chosen() {
    use crate::{LockMode, MountLease, SharedMount};
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = TwoMounts::make(tmp.path(), "record lease through LeaseOptions") else {
        return;
    };
    let (lock, other) = (bed.mounts[0].join("x.lock"), bed.mounts[1].join("x.lock"));
    let refused = LeaseOptions::new()
        .try_acquire_mount_lease(&lock, LockMode::Exclusive)
        .unwrap_err();
    assert!(
        matches!(refused, Error::NetworkFilesystem { .. }),
        "{refused:?}"
    );
    assert!(
        refused
            .to_string()
            .contains("LeaseOptions::on_shared_mount"),
        "{refused}"
    );
    let ttl = Duration::from_secs(60);
    let options = LeaseOptions::new().on_shared_mount(SharedMount::Record { ttl });
    let mut holder = Kid(child("hold-mount", &lock, "").spawn().unwrap());
    assert_eq!(
        await_line(&mut holder.0, "HELD"),
        format!("Some({})", tok(1, 0))
    );
    let busy = options
        .try_acquire_mount_lease(&other, LockMode::Exclusive)
        .unwrap_err();
    assert!(busy.is_contended(), "{busy}");
    // Through the other mount, the holder is of another host: its identity is its lock
    // file's domain's, and the other mount's lock file is another device's.
    let named = RecordLease::holder(&other).unwrap().expect("a holder");
    assert_eq!(
        (named.pid, named.token, named.this_host),
        (holder.0.id(), tok(1, 0), false)
    );
    let here = RecordLease::holder(&lock).unwrap().expect("a holder");
    assert!(here.this_host, "{here:?}");
    let shared = options
        .try_acquire_mount_lease(&other, LockMode::Shared)
        .unwrap_err();
    assert!(
        matches!(shared, Error::NetworkFilesystem { .. }),
        "{shared:?}"
    );
    // Killed, its holder is followed at once through the same mount (its domain: the
    // successor adopts its grant from the pass record); through the other mount, another
    // host to the protocol, only after its TTL.
    drop(holder);
    let lease = options
        .acquire_mount_lease(
            &lock,
            LockMode::Exclusive,
            &Budget::timeout(Duration::from_secs(20)),
        )
        .unwrap();
    assert!(matches!(lease, MountLease::Record(_)), "{lease:?}");
    assert!(taken_over_at_once(lease.fencing_token().unwrap()));
    lease.verify().unwrap();
    drop(lease);
    assert_eq!(RecordLease::holder(&other).unwrap(), None);
    let local = options
        .try_acquire_mount_lease(tmp.path().join("local.lock"), LockMode::Exclusive)
        .unwrap();
    assert!(matches!(local, MountLease::Kernel(_)), "{local:?}");
    assert_eq!(local.fencing_token(), None);
}

/// A child forked without `exec` (Python's `os.fork`, `multiprocessing`) inherits a copy of
/// its parent's record lease. There the copy is not held — `verify` and `renew` answer
/// [`Error::Released`], as an inherited kernel lease's `verify` does — and its `release` or
/// drop leaves the baton the parent's, waiting for no renewing thread (the parent's, which
/// does not exist in the child): a process of another host still finds the lease busy, and
/// the parent renews and releases it as its own.
#[cfg(target_os = "linux")]
#[test]
fn a_forked_childs_copy_is_not_held_and_leaves_the_parents_baton_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = TwoMounts::make(tmp.path(), "record lease in a forked child") else {
        return;
    };
    let lock = bed.mounts[0].join("x.lock");
    let ttl = Duration::from_secs(60);
    let mut lease = RecordLease::acquire_on_host(&lock, ttl, &Budget::no_wait(), "host-a").unwrap();
    for let_go in ["release", "drop"] {
        // The child's copy, taken out of the parent's binding in the child only.
        let mut copy = Some(lease);
        crate::before_fork();
        let status = crate::sys::test_fork::in_child_status(&mut || {
            crate::after_fork_in_child();
            let Some(copy) = copy.take() else {
                return 100;
            };
            // One bit for each wrong answer.
            let answers = [
                !copy.is_held(),
                matches!(copy.verify(), Err(Error::Released { .. })),
                matches!(copy.renew(), Err(Error::Released { .. })),
                matches!(copy.validity_for_write(), Err(Error::Released { .. })),
                copy.remaining().is_none(),
            ];
            let wrong = answers
                .iter()
                .enumerate()
                .filter(|(_, right)| !**right)
                .map(|(i, _)| 1 << i)
                .sum();
            match let_go {
                "release" => match copy.release() {
                    Ok(()) => wrong,
                    Err(_) => 64,
                },
                _ => {
                    drop(copy);
                    wrong
                }
            }
        });
        crate::after_fork_in_parent();
        lease = copy.take().unwrap();
        assert_eq!(
            status,
            Some(0),
            "the child's copy ({let_go}): not held, Released, let go without waiting (None: it hung and was ended)"
        );
        assert!(lease.is_held(), "the parent still holds ({let_go})");
        let holder = RecordLease::holder(&lock).unwrap().expect("a live baton");
        assert_eq!(
            (holder.pid, holder.token),
            (std::process::id(), tok(1, 0)),
            "the baton still names the parent ({let_go})"
        );
        let mut other = Kid(child("try", &bed.mounts[1].join("x.lock"), "host-b")
            .spawn()
            .unwrap());
        assert_eq!(
            await_line(&mut other.0, "TRY"),
            "busy",
            "another host cannot take it ({let_go})"
        );
        lease.renew().unwrap();
    }
    lease.release().unwrap();
    let mut other = Kid(child("try", &bed.mounts[1].join("x.lock"), "host-b")
        .spawn()
        .unwrap());
    assert_eq!(
        await_line(&mut other.0, "TRY"),
        format!("held {}", tok(2, 0))
    );
}

/// Test hook, called once a waiter has said it waits (the pass's `.wait` flag): a child run
/// with `RECORD_SAY_QUEUED` prints `QUEUED`.
pub(super) fn queued() {
    if std::env::var_os("RECORD_SAY_QUEUED").is_some() {
        println!("QUEUED");
        let _ = std::io::stdout().flush();
    }
}

/// Test hook, called after a renewal's rename and before its pass record is written: a child
/// run with `RECORD_HANG_AFTER_RENEW` prints `RENAMED <name>` and stops there for good (to
/// be SIGKILLed between the two).
pub(super) fn renamed_for_renewal(name: &str) {
    if std::env::var_os("RECORD_HANG_AFTER_RENEW").is_some() {
        println!("RENAMED {name}");
        let _ = std::io::stdout().flush();
        loop {
            std::thread::park();
        }
    }
}

/// The baton's name in the lease directory of `lock`.
#[cfg(target_os = "linux")]
fn baton_name(lock: &Path) -> String {
    let names: Vec<String> = std::fs::read_dir(lease_dir_of(lock))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| Baton::parse(n).is_some())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    names[0].clone()
}

/// The pass files of `lock` (`.pass`, `.wait`), or `None` (after printing `SKIP`) where there
/// is no host-local directory for them.
#[cfg(target_os = "linux")]
fn pass_files(lock: &Path, what: &str) -> Option<(PathBuf, PathBuf)> {
    if super::hint::directory().is_none() {
        eprintln!("SKIP: {what}: no /dev/shm directory of this user's for the pass");
        return None;
    }
    let id = lock_file_id(lock).expect("the lock file");
    let euid = rustix::process::geteuid().as_raw();
    let dir = Path::new("/dev/shm").join(format!("leasehold-{euid}"));
    let stem = format!("{:x}-{:x}", id.dev, id.ino);
    Some((
        dir.join(format!("{stem}.pass")),
        dir.join(format!("{stem}.wait")),
    ))
}

/// A child on `lock` as "host-a" that holds until told (`hold-then-release`), saying when it
/// queued.
#[cfg(target_os = "linux")]
fn holder_on(lock: &Path) -> Command {
    let mut cmd = child("hold-then-release", lock, "host-a");
    cmd.env("RECORD_SAY_QUEUED", "1");
    cmd
}

/// Tells a `hold-then-release` child `what` and returns its answer.
#[cfg(target_os = "linux")]
fn tell(kid: &mut Kid, what: &str, answer: &str) -> String {
    writeln!(kid.0.stdin.as_mut().unwrap(), "{what}").unwrap();
    await_line(&mut kid.0, answer)
}

/// The first lease on a fresh lock path, in a child, and its token: the baton is then that
/// child's, and the lock file exists.
#[cfg(target_os = "linux")]
fn first_holder(tmp: &Path) -> (PathBuf, Kid, u64) {
    let lock = tmp.join("p.lock");
    let mut a = Kid(holder_on(&lock).spawn().unwrap());
    let token: u64 = await_line(&mut a.0, "HELD").parse().unwrap();
    (lock, a, token)
}

/// A hand-over between two processes of one host (one kernel lock) passes: the waiter,
/// queued, adopts the holder's grant without a rename — the baton keeps its name — with the
/// next local count as its token; released with nobody waiting, the baton goes back to the
/// server as `free.T` and no pass record is left.
#[test]
#[cfg(target_os = "linux")]
fn a_same_host_hand_over_passes_with_no_rename_of_the_baton() {
    let tmp = tempfile::tempdir().unwrap();
    let (lock, mut a, ta) = first_holder(tmp.path());
    let Some((record, _)) = pass_files(&lock, "the host-local pass") else {
        return;
    };
    assert_eq!(ta, tok(1, 0));
    let name = baton_name(&lock);
    let mut b = Kid(holder_on(&lock).spawn().unwrap());
    await_line(&mut b.0, "QUEUED");
    assert_eq!(tell(&mut a, "release", "RELEASED"), "ok");
    let tb: u64 = await_line(&mut b.0, "HELD").parse().unwrap();
    assert_eq!(tb, ta + 1, "the next local count, same server token");
    assert_eq!(baton_name(&lock), name, "the baton was renamed");
    let rec = PassRecord::parse(&std::fs::read_to_string(&record).unwrap()).unwrap();
    assert_eq!((rec.name.as_str(), rec.k), (name.as_str(), 1));
    // The adopter's renewal makes the name its own, keeping its token.
    assert_eq!(tell(&mut b, "renew", "RENEWED"), format!("ok {tb}"));
    let renewed = baton_name(&lock);
    assert!(
        renewed.starts_with("live.1.1.") && renewed.contains(&format!(".{}.", b.0.id())),
        "{renewed}"
    );
    let rec = PassRecord::parse(&std::fs::read_to_string(&record).unwrap()).unwrap();
    assert_eq!((rec.name.as_str(), rec.k), (renewed.as_str(), 1));
    assert_eq!(tell(&mut b, "release", "RELEASED"), "ok");
    assert_eq!(baton_name(&lock), "free.1");
    assert!(!record.exists(), "a release to free leaves no pass record");
    drop(a);
    // The next grant is the server's.
    let c =
        RecordLease::acquire_on_host(&lock, Duration::from_secs(60), &Budget::no_wait(), "host-a")
            .unwrap();
    assert_eq!(c.fencing_token(), tok(2, 0));
}

/// A pass record is never trusted blindly: one expired, torn, of another host or lease
/// directory, of another TTL, at the last local count, or behind a symlink, is not adopted
/// (the waiter is granted by the server, local count 0); one right in every field is (the
/// control: the plants differ from it in one thing each).
#[test]
#[cfg(target_os = "linux")]
fn a_planted_torn_expired_or_symlinked_pass_record_is_not_adopted() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = tmp.path().join("p.lock");
    let ttl = Duration::from_secs(5);
    let budget = Budget::timeout(ttl);
    let first = RecordLease::acquire_on_host(&lock, ttl, &budget, "host-a").unwrap();
    let Some((record, _)) = pass_files(&lock, "planted pass records") else {
        return;
    };
    let me = Identity::with_host(b"host-a", first.kernel().file_id());
    let lease_dir = first
        .held
        .lease_dir
        .expect("the lease directory's identity");
    let lock_file = first.held.lock_file.expect("the lock file's time");
    first.release().unwrap();
    let good = |base: Duration| PassRecord {
        name: format!("live.9.0.5000.{}.1.1", me.host),
        base,
        token: 9,
        k: 0,
        ttl,
        host: me.host.clone(),
        lease_dir,
        lock_file,
    };
    let victim = tmp.path().join("victim");
    let now = sys::boot_clock;
    type Plant<'a> = Box<dyn Fn(&Path) + 'a>;
    let plants: Vec<(&str, Plant<'_>)> = vec![
        (
            "expired",
            Box::new(|r| std::fs::write(r, good(now() - ttl).text()).unwrap()),
        ),
        (
            "torn",
            Box::new(|r| {
                let text = good(now()).text();
                std::fs::write(r, &text[..text.len() - 3]).unwrap()
            }),
        ),
        (
            "of another host",
            Box::new(|r| {
                let other = Identity::with_host(b"host-b", first_id(&lock)).host;
                let rec = PassRecord {
                    host: other,
                    ..good(now())
                };
                std::fs::write(r, rec.text()).unwrap()
            }),
        ),
        (
            "of another lease directory",
            Box::new(|r| {
                let rec = PassRecord {
                    lease_dir: FileId {
                        dev: lease_dir.dev,
                        ino: lease_dir.ino + 1,
                    },
                    ..good(now())
                };
                std::fs::write(r, rec.text()).unwrap()
            }),
        ),
        (
            "of an earlier lock file of the same inode",
            Box::new(|r| {
                let rec = PassRecord {
                    lock_file: lock_file - 1,
                    ..good(now())
                };
                std::fs::write(r, rec.text()).unwrap()
            }),
        ),
        (
            "of another TTL",
            Box::new(|r| {
                let rec = PassRecord {
                    name: format!("live.9.0.6000.{}.1.1", me.host),
                    ttl: Duration::from_secs(6),
                    ..good(now())
                };
                std::fs::write(r, rec.text()).unwrap()
            }),
        ),
        (
            "at the last local count",
            Box::new(|r| {
                let rec = PassRecord {
                    k: K_LIMIT - 1,
                    ..good(now())
                };
                std::fs::write(r, rec.text()).unwrap()
            }),
        ),
        (
            "behind a symlink",
            Box::new(|r| {
                std::fs::write(&victim, good(now()).text()).unwrap();
                std::os::unix::fs::symlink(&victim, r).unwrap()
            }),
        ),
    ];
    let mut server = 1;
    for (what, plant) in &plants {
        let _ = std::fs::remove_file(&record);
        plant(&record);
        let lease = RecordLease::acquire_on_host(&lock, ttl, &budget, "host-a").unwrap();
        server += 1;
        assert_eq!(lease.fencing_token(), tok(server, 0), "a record {what}");
        lease.release().unwrap();
        assert!(
            !record.exists(),
            "a record {what} outlived a release to free"
        );
    }
    assert!(
        std::fs::read_to_string(&victim)
            .unwrap()
            .contains("live.9.0.")
    );
    // The control: right in every field, it is adopted (and believed: it names no baton, so
    // the release finds nothing to give back).
    std::fs::write(&record, good(now()).text()).unwrap();
    let lease = RecordLease::acquire_on_host(&lock, ttl, &budget, "host-a").unwrap();
    assert_eq!(lease.fencing_token(), tok(9, 1));
    lease.release().unwrap();
    assert!(!record.exists());
}

/// The lock file's identity, for a plant of another host's identity in its domain.
#[cfg(target_os = "linux")]
fn first_id(lock: &Path) -> Option<FileId> {
    lock_file_id(lock)
}

/// An adopter SIGKILLed between its renewal's rename and its pass record's write leaves a
/// record naming the baton's previous name, with the earlier validity base: its successor
/// adopts that (the next local count: never a token used before), its renewal finds the name
/// gone, lists, finds the baton of its own server token and domain whose holder is gone, and
/// makes it its own — the lease kept, no overlap (the successor got the kernel lock only
/// once the adopter had died).
#[test]
#[cfg(target_os = "linux")]
fn an_adopter_killed_between_its_renewal_and_its_record_leaves_the_lease_to_its_successor() {
    let tmp = tempfile::tempdir().unwrap();
    let (lock, mut a, ta) = first_holder(tmp.path());
    let Some((record, _)) = pass_files(&lock, "an adopter killed mid-renewal") else {
        return;
    };
    let name_a = baton_name(&lock);
    let mut b = Kid(holder_on(&lock)
        .env("RECORD_HANG_AFTER_RENEW", "1")
        .spawn()
        .unwrap());
    await_line(&mut b.0, "QUEUED");
    assert_eq!(tell(&mut a, "release", "RELEASED"), "ok");
    assert_eq!(await_line(&mut b.0, "HELD"), (ta + 1).to_string());
    let mut c = Kid(holder_on(&lock).spawn().unwrap());
    await_line(&mut c.0, "QUEUED");
    let name_b = tell(&mut b, "renew", "RENAMED");
    assert_eq!(baton_name(&lock), name_b);
    assert_ne!(name_b, name_a);
    let rec = PassRecord::parse(&std::fs::read_to_string(&record).unwrap()).unwrap();
    assert_eq!(rec.name, name_a, "the record was written after the rename");
    b.0.kill().unwrap();
    b.0.wait().unwrap();
    assert_eq!(await_line(&mut c.0, "HELD"), (ta + 2).to_string());
    assert_eq!(
        tell(&mut c, "renew", "RENEWED"),
        format!("ok {}", ta + 2),
        "the successor's renewal recovers the baton"
    );
    let name_c = baton_name(&lock);
    assert!(
        name_c.starts_with("live.1.2.") && name_c.contains(&format!(".{}.", c.0.id())),
        "{name_c}"
    );
    assert_eq!(tell(&mut c, "release", "RELEASED"), "ok");
    assert_eq!(baton_name(&lock), "free.1");
}

/// A waiter that gives up after the holder passed to it leaves a live baton that nobody
/// believes; the next process of the domain finds exactly the name the pass record gives and
/// takes it over at once (rule (a'')), though its holder lives — with a single try, so any
/// wait would have failed. (It asks for another TTL, so it does not adopt the record.)
#[test]
#[cfg(target_os = "linux")]
fn a_waiter_giving_up_after_the_pass_leaves_the_baton_to_an_immediate_takeover() {
    let tmp = tempfile::tempdir().unwrap();
    let (lock, mut a, ta) = first_holder(tmp.path());
    let Some((record, wait)) = pass_files(&lock, "rule (a'')") else {
        return;
    };
    let name = baton_name(&lock);
    // This process says it waits, as a waiter does, then gives up once passed to.
    let flag = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&wait)
        .unwrap();
    rustix::fs::flock(&flag, rustix::fs::FlockOperation::NonBlockingLockShared).unwrap();
    assert_eq!(tell(&mut a, "release", "RELEASED"), "ok");
    assert_eq!(baton_name(&lock), name, "passed: the baton stays");
    assert!(record.exists());
    drop(flag);
    let lease =
        RecordLease::acquire_on_host(&lock, Duration::from_secs(30), &Budget::no_wait(), "host-a")
            .unwrap();
    assert_eq!(lease.fencing_token(), tok((ta >> pass::TOKEN_SHIFT) + 1, 0));
    assert!(a.0.try_wait().unwrap().is_none(), "its holder still lives");
}

/// A record is adopted only if its name is a live baton of the record's own token and TTL.
#[test]
fn a_record_naming_another_token_ttl_or_a_free_baton_is_not_adoptable() {
    let rec = PassRecord {
        name: "live.7.3.1000.0123456789abcdef.42.99".into(),
        base: Duration::from_nanos(1),
        token: 7,
        k: 5,
        ttl: Duration::from_millis(1000),
        host: "0123456789abcdef".into(),
        lease_dir: FileId { dev: 12, ino: 34 },
        lock_file: 1,
    };
    assert!(names_its_baton(&rec));
    for name in [
        "live.8.3.1000.0123456789abcdef.42.99",
        "live.7.3.999.0123456789abcdef.42.99",
        "free.7",
        "live.7.3.1000.0123.42.99",
    ] {
        let other = PassRecord {
            name: name.into(),
            ..rec.clone()
        };
        assert!(!names_its_baton(&other), "{name}");
    }
}
