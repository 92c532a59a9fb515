//! `leasehold run` and the store verbs (`doc update`, `registry`, `session`) with a record
//! lease (`--ttl SECS` or `LEASEHOLD_SHARED_MOUNT=record:SECS`) on the two-mount bed: two bindfs mounts of one directory, on which a kernel lock through one does not
//! exclude one through the other (checked first) — as two NFS clients with
//! `local_lock=all`. Real processes throughout; handshakes by lines on pipes.
#![cfg(target_os = "linux")]

mod common;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::leasehold;
use rustix::process::Signal;
use testkit::Bindfs;
use testkit::{Proc, assert_one_line_error, run};

/// What a refusal on a `host-only` mount says to do, in this tool's terms: the record
/// lease's variable and flag, and the opt-in that takes the kernel's lock anyway.
const RECORD_ADVICE: &str = "take a record lease there, which excludes across hosts (exclusive leases; LEASEHOLD_SHARED_MOUNT=record:SECS in the environment, or --ttl SECS with run, doc update, registry, session or results), or opt in with LEASEHOLD_ALLOW_NETWORK_FS=1 in the environment to take the kernel's lock anyway";

/// Two mounts of one directory that the kernel's lock does not cross, or `None` after a
/// `SKIP:` line ([`Bindfs::two_mounts`]).
fn two_mounts(dir: &Path) -> Option<(Bindfs, Bindfs)> {
    Bindfs::two_mounts(dir)
}

/// A `run` holding the record lease (TTL `ttl`) on `lock`: COMMAND prints `locked TOKEN`
/// and waits for a line, then prints `done`.
fn holder(lock: &Path, ttl: &str, stderr: Stdio) -> Proc {
    Proc::spawn(
        leasehold()
            .stderr(stderr)
            .env("LEASEHOLD_SHARED_MOUNT", format!("record:{ttl}"))
            .arg("run")
            .arg(lock)
            .args([
                "--",
                "sh",
                "-c",
                "echo locked $LEASEHOLD_FENCING_TOKEN; read _ignored; echo done",
            ]),
    )
}

/// Without the option a lock path on the mount is refused, naming it; with it `run` holds a
/// record lease through one mount that a `run` through the other cannot take (its refusal
/// and `status`, text and JSON, name the holder's pid, host and token); once released, the
/// next `run` gets the next token.
#[test]
fn run_holds_a_record_lease_that_excludes_across_two_mounts_and_status_names_it() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((a, b)) = two_mounts(tmp.path()) else {
        return;
    };
    let (lock_a, lock_b) = (a.mnt.join("job.lock"), b.mnt.join("job.lock"));
    let refused = run(leasehold().arg("run").arg(&lock_a).args(["--", "true"]));
    assert_eq!(refused.code, 2, "{refused:?}");
    assert_one_line_error(&refused, RECORD_ADVICE);
    let bad = run(leasehold()
        .env("LEASEHOLD_SHARED_MOUNT", "record:soon")
        .arg("run")
        .arg(&lock_a)
        .args(["--", "true"]));
    assert_eq!(bad.code, 2, "{bad:?}");
    assert_one_line_error(
        &bad,
        "LEASEHOLD_SHARED_MOUNT=record:soon: expected record:SECS",
    );

    let mut first = holder(&lock_a, "60", Stdio::inherit());
    assert_eq!(first.line(), format!("locked {}", token(1)));
    // Through the other mount, the holder is of another host: the record lease's host
    // identity names the lock file's mount (a domain of its own).
    let json = run(leasehold().args(["status", "--json"]).arg(&lock_b));
    assert_eq!(json.code, 0, "{json:?}");
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let who = format!(
        "pid {} on host {} (record lease, fencing token {})",
        first.pid(),
        doc["record"]["host"].as_str().unwrap(),
        token(1)
    );
    let busy = run(leasehold()
        .env("LEASEHOLD_SHARED_MOUNT", "record:60")
        .args(["run", "--no-wait"])
        .arg(&lock_b)
        .args(["--", "echo", "ran"]));
    assert_eq!((busy.code, busy.stdout.as_str()), (75, ""), "{busy:?}");
    assert_one_line_error(&busy, &format!("lock is held by {who}"));
    let status = run(leasehold().arg("status").arg(&lock_b));
    assert_eq!(
        (status.code, status.stdout.as_str()),
        (0, format!("held by {who}\n").as_str()),
        "{status:?}"
    );
    assert_eq!(doc["held"], true, "{doc}");
    assert_eq!(doc["mount"]["locks"], "host-only", "{doc}");
    assert_eq!(doc["record"]["pid"], first.pid(), "{doc}");
    assert_eq!(doc["record"]["token"], token(1), "{doc}");
    assert_eq!(doc["record"]["this_host"], false, "{doc}");
    assert_eq!(doc["record"]["ttl_ms"], 60_000, "{doc}");
    assert_eq!(doc["record"]["host"].as_str().unwrap().len(), 16, "{doc}");

    // A waiter through the other mount says once, after a second, whom it waits for; then
    // it gets the lease the holder gives back, with the next token.
    let mut waiter = Proc::spawn(
        leasehold()
            .stderr(Stdio::piped())
            .env("LEASEHOLD_SHARED_MOUNT", "record:60")
            .args(["run", "--timeout", "60"])
            .arg(&lock_b)
            .args(["--", "sh", "-c", "echo ran $LEASEHOLD_FENCING_TOKEN"]),
    );
    let mut notice = String::new();
    BufReader::new(waiter.child.stderr.as_mut().unwrap())
        .read_line(&mut notice)
        .unwrap();
    assert_eq!(
        notice,
        format!(
            "leasehold: waiting for {} held by {who}\n",
            lock_b.display()
        )
    );
    first.send("go");
    assert_eq!(first.line(), "done");
    assert!(first.wait().success());
    assert_eq!(waiter.line(), format!("ran {}", token(2)));
    assert!(waiter.wait().success());
    // Free: no record holder, and the kernel's lock free (which only a system that reveals
    // lock holders can say; the portable build's `status` says it cannot tell).
    if testkit::reveals_holders() {
        let status = run(leasehold().arg("status").arg(&lock_b));
        assert_eq!(status.stdout, "free\n", "{status:?}");
        let json = run(leasehold().args(["status", "--json"]).arg(&lock_b));
        let doc: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
        assert_eq!(doc["record"], serde_json::Value::Null, "{doc}");
    }
    let next = run(leasehold()
        .env("LEASEHOLD_SHARED_MOUNT", "record:60")
        .args(["run", "--no-wait"])
        .arg(&lock_a)
        .args(["--", "sh", "-c", "echo ran $LEASEHOLD_FENCING_TOKEN"]));
    assert_eq!(
        (next.code, next.stdout.as_str()),
        (0, format!("ran {}\n", token(3)).as_str()),
        "{next:?}"
    );
}

/// `run --ttl SECS` is the flag form of `LEASEHOLD_SHARED_MOUNT=record:SECS`: through one
/// mount it holds a record lease (COMMAND gets a fencing token) that a `run --ttl` through the
/// other mount cannot take, naming the holder; once released, that one gets the next token.
/// On a local directory the same flag takes the kernel's lease (no token), and a TTL under
/// 0.03 s is a usage error naming the flag.
#[test]
fn run_ttl_holds_a_record_lease_that_excludes_a_run_ttl_through_the_other_mount() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((a, b)) = two_mounts(tmp.path()) else {
        return;
    };
    let (lock_a, lock_b) = (a.mnt.join("job.lock"), b.mnt.join("job.lock"));
    let mut first = Proc::spawn(
        leasehold()
            .env_remove("LEASEHOLD_SHARED_MOUNT")
            .args(["run", "--ttl", "60"])
            .arg(&lock_a)
            .args([
                "--",
                "sh",
                "-c",
                "echo locked $LEASEHOLD_FENCING_TOKEN; read _ignored; echo done",
            ]),
    );
    assert_eq!(first.line(), format!("locked {}", token(1)));
    let try_b = || {
        run(leasehold()
            .env_remove("LEASEHOLD_SHARED_MOUNT")
            .args(["run", "--ttl", "60", "--no-wait"])
            .arg(&lock_b)
            .args(["--", "sh", "-c", "echo ran $LEASEHOLD_FENCING_TOKEN"]))
    };
    let busy = try_b();
    assert_eq!((busy.code, busy.stdout.as_str()), (75, ""), "{busy:?}");
    assert_one_line_error(
        &busy,
        &format!("lock is held by pid {} on host ", first.pid()),
    );
    assert!(
        busy.stderr
            .contains(&format!("(record lease, fencing token {})", token(1))),
        "{busy:?}"
    );
    first.send("go");
    assert_eq!(first.line(), "done");
    assert!(first.wait().success());
    let next = try_b();
    assert_eq!(
        (next.code, next.stdout.as_str()),
        (0, format!("ran {}\n", token(2)).as_str()),
        "{next:?}"
    );

    let local = tmp.path().join("local.lock");
    let kernel = run(leasehold()
        .env_remove("LEASEHOLD_SHARED_MOUNT")
        .args(["run", "--ttl", "60"])
        .arg(&local)
        .args(["--", "sh", "-c", "echo ran ${LEASEHOLD_FENCING_TOKEN-none}"]));
    assert_eq!(
        (kernel.code, kernel.stdout.as_str()),
        (0, "ran none\n"),
        "{kernel:?}"
    );
    let short = run(leasehold()
        .args(["run", "--ttl", "0.01"])
        .arg(&lock_a)
        .args(["--", "true"]));
    assert_eq!(short.code, 2, "{short:?}");
    assert_one_line_error(
        &short,
        "--ttl 0.01: expected a record lease's TTL in seconds",
    );
}

/// A `run` SIGSTOPped past its record lease's TTL (1 s) is taken over through the other
/// mount (token 2); resumed, it finds the lease lost before anything else, stops COMMAND
/// (which never printed `done`) and exits 74 saying so.
#[test]
fn a_run_paused_past_its_ttl_loses_the_lease_and_stops_command() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((a, b)) = two_mounts(tmp.path()) else {
        return;
    };
    let (lock_a, lock_b) = (a.mnt.join("job.lock"), b.mnt.join("job.lock"));
    let mut first = holder(&lock_a, "1", Stdio::piped());
    assert_eq!(first.line(), format!("locked {}", token(1)));
    first.signal(Signal::STOP);
    testkit::until("the holding run stopped", || testkit::stopped(first.pid()));
    let second = run(leasehold()
        .env("LEASEHOLD_SHARED_MOUNT", "record:1")
        .args(["run", "--timeout", "30"])
        .arg(&lock_b)
        .args(["--", "sh", "-c", "echo ran $LEASEHOLD_FENCING_TOKEN"]));
    assert_eq!(
        (second.code, second.stdout.as_str()),
        (0, format!("ran {}\n", token(2)).as_str()),
        "{second:?}"
    );
    first.signal(Signal::CONT);
    let status = first
        .wait_timeout(Duration::from_secs(30))
        .expect("the resumed run ends");
    assert_eq!(status.code(), Some(74), "{status:?}");
    // COMMAND was stopped while it waited for its line: it never said `done`.
    assert_eq!(first.line(), "");
    let mut said = String::new();
    first
        .child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut said)
        .unwrap();
    let said = testkit::Out {
        code: 74,
        stdout: String::new(),
        stderr: said,
    };
    assert_one_line_error(&said, "lease lost");
    assert_one_line_error(
        &said,
        "COMMAND was stopped (status 143), since another holder may be running beside it",
    );
}

/// `status` by a user who may not read a lock path's lease directory (another user's record
/// lease, mode 0700) says what the kernel's lock says instead of failing: that user could not
/// take the record lease either. Run as root, the other user being `nobody` (`setpriv`).
#[test]
fn status_by_a_user_who_cannot_read_the_lease_directory_reports_the_kernel_lock() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIP: record lease status as another user: needs root (setpriv to nobody)");
        return;
    }
    if !testkit::reveals_holders() {
        // The kernel lock's holders are what this test reads; the portable build has none.
        println!(
            "SKIP: status of an unreadable lease directory: this build does not reveal lock holders"
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let lock = tmp.path().join("job.lock");
    std::fs::write(&lock, b"").unwrap();
    let lease_dir = tmp.path().join("job.lock.lease");
    std::fs::create_dir(&lease_dir).unwrap();
    std::fs::set_permissions(&lease_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(lease_dir.join("free.3"), b"").unwrap();
    let out = run(Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(common::bin())
        .arg("status")
        .arg(&lock)
        .stdin(Stdio::null()));
    assert_eq!((out.code, out.stdout.as_str()), (0, "free\n"), "{out:?}");
}

/// A shell loop that waits for a line on stdin, then runs `leasehold doc update FILE [ARGS]
/// -- COMMAND` `n` times, COMMAND adding 1 to the number in FILE, and prints `finished`
/// (or exits 1 at the first update that failed).
fn incrementer(file: &Path, n: u32, args: &[&str]) -> Command {
    let script = format!(
        r#"read _go
i=0
while [ $i -lt {n} ]; do
  "$LH" doc update "$@" -- sh -c 'read x; echo $((x+1))' >/dev/null </dev/null || exit 1
  i=$((i+1))
done
echo finished"#
    );
    let mut c = Command::new("sh");
    c.env("LH", common::bin())
        .env_remove("LEASEHOLD_SHARED_MOUNT")
        .args(["-c", &script, "sh"])
        .args(args)
        .arg(file);
    c
}

/// Two loops of `doc update` — one through each mount, one choosing the record lease with
/// `--ttl`, the other with `LEASEHOLD_SHARED_MOUNT` — each add 1 to one counter `N` times,
/// started together: the counter ends at exactly 2N (no update lost), every write fenced
/// (the fence file holds the last token). Without the option a `doc update` on the mount is
/// refused (exit 2) naming the variable and the flag, writing nothing; a TTL under 0.03 s is
/// a usage error naming the flag.
#[test]
fn doc_update_loops_through_two_mounts_with_the_record_lease_lose_no_update() {
    const N: u32 = 20;
    let tmp = tempfile::tempdir().unwrap();
    let Some((a, b)) = two_mounts(tmp.path()) else {
        return;
    };
    let (file_a, file_b) = (a.mnt.join("count.txt"), b.mnt.join("count.txt"));
    let refused = run(leasehold()
        .env_remove("LEASEHOLD_SHARED_MOUNT")
        .args(["doc", "update"])
        .arg(&file_a)
        .args(["--", "echo", "1"]));
    assert_eq!(
        (refused.code, refused.stdout.as_str()),
        (2, ""),
        "{refused:?}"
    );
    assert_one_line_error(&refused, RECORD_ADVICE);
    assert!(!a.backing.join("count.txt").exists(), "{refused:?}");
    let short = run(leasehold()
        .args(["doc", "update", "--ttl", "0.01"])
        .arg(&file_a)
        .args(["--", "echo", "1"]));
    assert_eq!(short.code, 2, "{short:?}");
    assert_one_line_error(
        &short,
        "--ttl 0.01: expected a record lease's TTL in seconds",
    );

    let mut one = Proc::spawn(&mut incrementer(&file_a, N, &["--ttl", "30"]));
    let mut two =
        Proc::spawn(incrementer(&file_b, N, &[]).env("LEASEHOLD_SHARED_MOUNT", "record:30"));
    one.send("go");
    two.send("go");
    assert_eq!(one.line(), "finished");
    assert_eq!(two.line(), "finished");
    assert!(one.wait().success());
    assert!(two.wait().success());
    let read = run(leasehold().args(["doc", "read"]).arg(&file_b));
    assert_eq!(
        (read.code, read.stdout.as_str()),
        (0, format!("{}\n", 2 * N).as_str()),
        "{read:?}"
    );
    // Each update held a record lease of its own: 2N grants, the last one's token fenced in.
    let fence = std::fs::read_to_string(a.backing.join("count.txt.lock.fence")).unwrap();
    assert_eq!(
        fence.trim(),
        token(u64::from(2 * N)).to_string(),
        "{fence:?}"
    );
}

/// `registry add` through one mount (`--ttl`, the record lease's TTL without `--etcd`) is
/// what `registry list` through the other (`LEASEHOLD_SHARED_MOUNT`) lists; without the
/// option the registry on the mount is refused naming it; `--ttl` with `--etcd` keeps the
/// etcd lease's minimum of 2 s.
#[test]
fn registry_add_through_one_mount_is_listed_through_the_other() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((a, b)) = two_mounts(tmp.path()) else {
        return;
    };
    for d in ["home", "primary", "root"] {
        std::fs::create_dir(a.backing.join(d)).unwrap();
    }
    let (primary, root) = (a.mnt.join("primary"), a.mnt.join("root"));
    let refused = run(leasehold()
        .env_remove("LEASEHOLD_SHARED_MOUNT")
        .args(["registry", "--home"])
        .arg(a.mnt.join("home"))
        .arg("list"));
    assert_eq!(
        (refused.code, refused.stdout.as_str()),
        (2, ""),
        "{refused:?}"
    );
    assert_one_line_error(&refused, RECORD_ADVICE);

    let added = run(leasehold()
        .env_remove("LEASEHOLD_SHARED_MOUNT")
        .args(["registry", "--ttl", "30", "--home"])
        .arg(a.mnt.join("home"))
        .arg("add")
        .arg(&primary)
        .arg(&root));
    assert_eq!(added.code, 0, "{added:?}");
    let listed = run(leasehold()
        .env("LEASEHOLD_SHARED_MOUNT", "record:30")
        .args(["registry", "--home"])
        .arg(b.mnt.join("home"))
        .args(["list", "--json"]));
    assert_eq!(listed.code, 0, "{listed:?}");
    let doc: serde_json::Value = serde_json::from_str(&listed.stdout).unwrap();
    let (p, r) = (
        primary.canonicalize().unwrap(),
        root.canonicalize().unwrap(),
    );
    assert_eq!(
        doc,
        serde_json::json!({"state": "active", "scope": {p.to_str().unwrap(): [r.to_str().unwrap()]}}),
        "{listed:?}"
    );
    let etcd_ttl = run(leasehold().args([
        "registry",
        "--etcd",
        "http://127.0.0.1:1",
        "--ttl",
        "1",
        "list",
    ]));
    assert_eq!(etcd_ttl.code, 2, "{etcd_ttl:?}");
    assert_one_line_error(&etcd_ttl, "the lease TTL must be at least 2 seconds");
}

/// `session append` through one mount (`--ttl`) and then through the other
/// (`LEASEHOLD_SHARED_MOUNT`) write one log, which `session read` prints whole; without the
/// option an append on the mount is refused naming it, writing nothing.
#[test]
fn session_appends_through_both_mounts_make_one_log() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((a, b)) = two_mounts(tmp.path()) else {
        return;
    };
    let append = |dir: &Path, args: &[&str], env: Option<&str>, line: &str| {
        let mut c = leasehold();
        c.env_remove("LEASEHOLD_SHARED_MOUNT");
        if let Some(v) = env {
            c.env("LEASEHOLD_SHARED_MOUNT", v);
        }
        c.args(["session", "--dir"])
            .arg(dir)
            .args(args)
            .args(["append", "s1"]);
        let mut p = Proc::spawn(c.stderr(Stdio::piped()));
        p.send(line);
        p.close_stdin();
        let status = p.wait();
        let mut err = String::new();
        p.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        testkit::Out {
            code: status.code().unwrap_or(-1),
            stdout: String::new(),
            stderr: err,
        }
    };
    let (dir_a, dir_b) = (a.mnt.join("sessions"), b.mnt.join("sessions"));
    let refused = append(&dir_a, &[], None, r#"{"n":0}"#);
    assert_eq!(refused.code, 2, "{refused:?}");
    assert_one_line_error(&refused, RECORD_ADVICE);
    let first = append(&dir_a, &["--ttl", "30"], None, r#"{"n":1}"#);
    assert_eq!(first.code, 0, "{first:?}");
    let second = append(&dir_b, &[], Some("record:30"), r#"{"n":2}"#);
    assert_eq!(second.code, 0, "{second:?}");
    let read = run(leasehold()
        .args(["session", "--dir"])
        .arg(&dir_a)
        .args(["read", "s1"]));
    assert_eq!(
        (read.code, read.stdout.as_str()),
        (0, "{\"n\":1}\n{\"n\":2}\n"),
        "{read:?}"
    );
}

/// `results` on a root whose mount keeps kernel locks on each host: without the option a
/// stage is refused naming it and creates no candidate; with `--ttl` through one mount the
/// candidate is staged under the ID's record lease (its fence holds the token), and through
/// the other (`LEASEHOLD_SHARED_MOUNT`) it is listed and discarded; `gc` is refused there.
#[test]
fn results_through_two_mounts_take_the_ids_record_lease_and_gc_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((a, b)) = two_mounts(tmp.path()) else {
        return;
    };
    std::fs::create_dir(a.backing.join("root")).unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("out.txt"), "made\n").unwrap();
    let results = |mnt: &std::path::Path| {
        let mut c = leasehold();
        c.env_remove("LEASEHOLD_SHARED_MOUNT")
            .args(["results", "--root"])
            .arg(mnt.join("root"));
        c
    };
    let refused = run(results(&a.mnt)
        .args(["stage", "job"])
        .arg("--from")
        .arg(&src));
    assert_eq!(refused.code, 2, "{refused:?}");
    assert_one_line_error(&refused, RECORD_ADVICE);
    assert!(!a.backing.join("root/results/job").exists());

    let staged = run(results(&a.mnt)
        .args(["--ttl", "30", "stage", "job", "--from"])
        .arg(&src));
    assert_eq!(staged.code, 0, "{staged:?}");
    let records = a.backing.join("root/.result-records-v1");
    let fences: Vec<_> = std::fs::read_dir(&records)
        .expect("the ID's record lease directory")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".fence"))
        .collect();
    assert_eq!(fences.len(), 1, "{records:?}");

    let paths = run(results(&b.mnt)
        .env("LEASEHOLD_SHARED_MOUNT", "record:30")
        .args(["paths", "job"]));
    assert_eq!(
        (paths.code, paths.stdout.as_str()),
        (0, "out.txt\n"),
        "{paths:?}"
    );
    let gc = run(results(&b.mnt)
        .env("LEASEHOLD_SHARED_MOUNT", "record:30")
        .arg("gc"));
    assert_eq!(gc.code, 2, "{gc:?}");
    let discarded = run(results(&b.mnt)
        .env("LEASEHOLD_SHARED_MOUNT", "record:30")
        .args(["discard", "job"]));
    assert_eq!(discarded.code, 0, "{discarded:?}");
    assert!(!a.backing.join("root/results/job").exists());
}

/// The record lease's fencing token of the server's grant `t` (no hand-over on one host
/// since): `t·2^20`.
fn token(t: u64) -> u64 {
    t << 20
}
