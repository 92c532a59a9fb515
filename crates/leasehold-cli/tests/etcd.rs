//! `--etcd` (docs/cli.md, "etcd") through the real binary, against a real single-node
//! etcd that each test starts on loopback (free ports, temporary data directory) and stops.
//!
//! Every scenario uses real processes: holders and waiters are `leasehold run` / `registry
//! serve` children; crashes are SIGKILL, pauses SIGSTOP (of a holder, or of etcd itself).
//! Synchronisation is by handshakes: a COMMAND's line on stdout, a `serve` answer, a waiter's
//! key appearing in etcd. TTL is 2 s throughout, so the suite stays short.
#![cfg(unix)]

mod common;

use common::leasehold;
use testkit::{assert_one_line_error, run};

/// A loopback URL on which nothing listens.
fn dead_endpoint() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}")
}

#[cfg(not(feature = "etcd"))]
#[test]
fn without_the_feature_etcd_says_how_to_build_it() {
    for args in [
        vec!["run", "--etcd", "http://127.0.0.1:1", "n", "--", "true"],
        vec!["status", "--etcd", "http://127.0.0.1:1", "n"],
        vec!["registry", "--etcd", "http://127.0.0.1:1", "list"],
    ] {
        let out = run(leasehold().args(&args));
        assert_eq!(out.code, 1, "{args:?}: {out:?}");
        assert_one_line_error(&out, "--features etcd");
    }
}

#[test]
fn usage_errors_are_exit_2() {
    let e = dead_endpoint();
    let out = run(leasehold().args(["run", "--etcd", &e, "--ttl", "1", "n", "--", "true"]));
    assert_eq!(out.code, 2, "ttl below 2: {out:?}");
    // Without --etcd, --ttl is a record lease's (at least 0.03 s).
    let out = run(leasehold().args(["run", "--ttl", "0.01", "/tmp/x.lock", "--", "true"]));
    assert_eq!(out.code, 2, "--ttl below 0.03 without --etcd: {out:?}");
    if cfg!(feature = "etcd") {
        let out = run(leasehold().args(["run", "--etcd", &e, "a/b", "--", "true"]));
        assert_eq!(out.code, 2, "a name with a slash: {out:?}");
        assert_one_line_error(&out, "a/b");
        // A list mixing TLS and plain text would send some requests in the clear.
        let mixed = format!("{},{}", e.replace("http://", "https://"), e);
        for args in [
            vec!["run", "--etcd", &mixed, "n", "--", "true"],
            vec!["status", "--etcd", &mixed, "n"],
            vec!["registry", "--etcd", &mixed, "list"],
        ] {
            let out = run(leasehold().args(&args));
            assert_eq!(out.code, 2, "mixed http and https: {args:?}: {out:?}");
            assert_one_line_error(&out, "mixes https:// and http://");
            assert_one_line_error(&out, &mixed);
        }
        let out = run(leasehold().args(["status", "--etcd", " , ", "n"]));
        assert_eq!(out.code, 2, "no endpoint: {out:?}");
        assert_one_line_error(&out, "no endpoint given");
        let out = run(leasehold().args([
            "run", "--etcd", &e, "--ttl", "4", "--grace", "2.5", "n", "--", "true",
        ]));
        assert_eq!(out.code, 2, "a grace over half the TTL: {out:?}");
        assert_one_line_error(&out, "at most half the TTL");
    }
    let out = run(leasehold().args(["run", "--grace", "1", "/tmp/x.lock", "--", "true"]));
    assert_eq!(out.code, 2, "--grace without --etcd: {out:?}");
}

#[cfg(feature = "etcd")]
use testkit::etcd as support;

#[cfg(feature = "etcd")]
mod with_etcd {
    use std::time::{Duration, Instant};

    use rustix::process::Signal;
    use serde_json::{Value, json};

    use super::common::leasehold;
    use super::dead_endpoint;
    use super::support::EtcdServer;
    use testkit::{Proc, assert_one_line_error, run};

    const TTL: Duration = Duration::from_secs(2);

    /// `run --etcd E --ttl 2 NAME -- sh -c SCRIPT` as a child with pipes.
    fn holder(e: &str, name: &str, script: &str, wait: &[&str]) -> Proc {
        holder_of(leasehold(), e, name, script, wait)
    }

    /// [`holder`] from a given `leasehold` command (one that trusts a CA, say).
    fn holder_of(
        mut leasehold: std::process::Command,
        e: &str,
        name: &str,
        script: &str,
        wait: &[&str],
    ) -> Proc {
        Proc::spawn(
            leasehold
                .args(["run", "--etcd", e, "--ttl", "2"])
                .args(wait)
                .args([name, "--", "sh", "-c", script]),
        )
    }

    /// Sets `$me` to the shell's process ID as this test sees it: COMMAND runs in a PID
    /// namespace of its own, where `$$` is its own numbering (2); /proc is the machine's, so
    /// `/proc/self` — opened by the shell itself for a builtin's redirection — is the shell.
    macro_rules! me {
        ($($rest:literal),*) => {
            concat!("read -r me _ </proc/self/stat; ", $($rest),*)
        };
    }

    /// A COMMAND that says `locked TOKEN PID`, waits for a line, says `done` and exits.
    const HOLD: &str = me!("echo locked $LEASEHOLD_FENCING_TOKEN $me; read _x; echo done");

    fn locked(p: &mut Proc) -> (u64, u32) {
        let line = p.line();
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.first(), Some(&"locked"), "{line:?}");
        (f[1].parse().expect("token"), f[2].parse().expect("pid"))
    }

    fn alive(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat.contains(") Z "),
            Err(_) => false,
        }
    }

    /// Waits (bounded) until `pid` is gone or a zombie; used after a kill whose effect on
    /// another process (the parent-death signal) is observed, not assumed.
    fn wait_dead(pid: u32, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while alive(pid) {
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    #[test]
    fn contention_status_and_a_clean_hand_over_within_half_a_second() {
        let Some(server) = EtcdServer::start("etcd run hand-over") else {
            return;
        };
        let e = server.endpoint.as_str();
        let mut a = holder(e, "job", HOLD, &[]);
        let (t1, _) = locked(&mut a);

        let out = run(leasehold().args(["run", "--etcd", e, "--no-wait", "job", "--", "true"]));
        assert_eq!(out.code, 75, "{out:?}");
        assert_one_line_error(
            &out,
            &format!("job: lock is held by another process (pid {}", a.pid()),
        );
        // What to change, in the CLI's terms, as for a lock file.
        assert_one_line_error(&out, "; did not wait (wait for it with --timeout SECS)");
        let out =
            run(leasehold().args(["run", "--etcd", e, "--timeout", "0.2", "job", "--", "true"]));
        assert_eq!(out.code, 75, "{out:?}");
        assert_one_line_error(&out, "; gave up after ");
        assert_one_line_error(&out, "s; wait longer with --timeout SECS");
        let out = run(leasehold().args([
            "run",
            "--etcd",
            e,
            "--no-wait",
            "--conflict-exit-code",
            "9",
            "job",
            "--",
            "true",
        ]));
        assert_eq!(out.code, 9, "{out:?}");
        // A wait says once, after a quiet second, whom it waits for, and when it gives up how
        // long it waited in all and which option waits longer: the CLI's one
        // notice-then-wait, as for a lock file.
        let out =
            run(leasehold().args(["run", "--etcd", e, "--timeout", "1.5", "job", "--", "true"]));
        assert_eq!(out.code, 75, "{out:?}");
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(lines.len(), 2, "{out:?}");
        let held = format!("job held by another process (pid {}", a.pid());
        assert!(
            lines[0].starts_with(&format!("leasehold: waiting for {held}")),
            "{out:?}"
        );
        assert!(
            lines[1].starts_with(&format!(
                "leasehold: job: lock is held by another process (pid {}",
                a.pid()
            )) && lines[1].contains("; gave up after 1.")
                && lines[1].ends_with("; wait longer with --timeout SECS"),
            "{out:?}"
        );

        let out = run(leasehold().args(["status", "--etcd", e, "job"]));
        assert_eq!(out.code, 0, "{out:?}");
        assert!(
            out.stdout.starts_with(&format!("held by {}@", a.pid())),
            "{out:?}"
        );
        let out = run(leasehold().args(["status", "--etcd", e, "--json", "job"]));
        let v: Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(v["name"], json!("job"));
        assert_eq!(v["held"], json!(true));
        assert_eq!(v["holders"][0]["pid"], json!(a.pid()));
        let out = run(leasehold().args(["status", "--etcd", e, "--json", "other"]));
        let v: Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(v, json!({"name": "other", "held": false, "holders": []}));
        assert_eq!(
            run(leasehold().args(["status", "--etcd", e, "other"])).stdout,
            "free\n"
        );

        let mut b = holder(e, "job", HOLD, &["--timeout", "20"]);
        server.queued("leasehold/lock/job/", 2);
        a.send("go");
        assert_eq!(a.line(), "done");
        let done = Instant::now();
        let (t2, _) = locked(&mut b);
        let handover = done.elapsed();
        assert!(
            handover < Duration::from_millis(500),
            "hand-over took {handover:?}"
        );
        assert!(
            t2 > t1,
            "the later grant has the greater token: {t2} vs {t1}"
        );
        assert!(a.wait().success());
        b.send("go");
        assert_eq!(b.line(), "done");
        assert!(b.wait().success());
    }

    /// A waiter that has said it is waiting keeps its place in etcd's queue: one that queued
    /// after it, while it still waited quietly, is still behind it when the lock is released.
    /// (The notice once ended the first acquisition and started another, whose new key went
    /// to the back of the queue.)
    #[test]
    fn the_notice_keeps_a_waiters_place_in_the_queue() {
        let Some(server) = EtcdServer::start("etcd notice keeps the queue") else {
            return;
        };
        if super::support::etcdctl_path().is_none() {
            eprintln!("SKIP: etcd notice keeps the queue: etcdctl is not installed");
            return;
        }
        let e = server.endpoint.as_str();
        let keys = || {
            let out = server
                .etcdctl(&["get", "--prefix", "--keys-only", "leasehold/lock/q/"])
                .expect("etcdctl");
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| !l.is_empty())
                .count()
        };
        let mut a = holder(e, "q", HOLD, &[]);
        locked(&mut a);
        let waiter = |word: &str| {
            Proc::spawn(
                leasehold()
                    .args(["run", "--etcd", e, "--ttl", "2", "--timeout", "60", "q"])
                    .args(["--", "sh", "-c", &format!("echo {word}; read _x")])
                    .stderr(std::process::Stdio::piped()),
            )
        };
        let mut b = waiter("b");
        testkit::until("b queued", || keys() == 2);
        let mut c = waiter("c");
        testkit::until("c queued", || keys() == 3);
        let mut notice = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(b.child.stderr.as_mut().unwrap()),
            &mut notice,
        )
        .unwrap();
        assert!(
            notice.starts_with(&format!(
                "leasehold: waiting for q held by another process (pid {}",
                a.pid()
            )),
            "{notice:?}"
        );
        a.send("go");
        assert_eq!(a.line(), "done");
        // Whoever holds the lock next: b, which queued first.
        let mut next = String::new();
        testkit::until("the lock passed on", || {
            let out = run(leasehold().args(["status", "--etcd", e, "q"]));
            next = out.stdout;
            !next.starts_with(&format!("held by {}@", a.pid())) && next.starts_with("held by ")
        });
        assert!(
            next.starts_with(&format!("held by {}@", b.pid())),
            "c ({}) went before b ({}): {next:?}",
            c.pid(),
            b.pid()
        );
        assert_eq!(b.line(), "b");
        b.send("go");
        assert_eq!(c.line(), "c");
        c.send("go");
        assert!(b.wait().success() && c.wait().success());
    }

    #[test]
    fn sigkill_of_the_holder_kills_its_command_and_a_successor_follows_within_ttl() {
        let Some(server) = EtcdServer::start("etcd run sigkill") else {
            return;
        };
        let e = server.endpoint.as_str();
        let mut a = holder(
            e,
            "k",
            me!("echo locked $LEASEHOLD_FENCING_TOKEN $me; exec sleep 600"),
            &[],
        );
        let (_, command) = locked(&mut a);
        let mut b = holder(e, "k", HOLD, &["--timeout", "20"]);
        server.queued("leasehold/lock/k/", 2);
        let killed = Instant::now();
        a.kill(); // leasehold only: its COMMAND dies of the parent-death signal
        assert!(
            wait_dead(command, Duration::from_secs(2)),
            "COMMAND outlived leasehold"
        );
        locked(&mut b);
        let takeover = killed.elapsed();
        assert!(
            takeover < TTL + Duration::from_secs(1),
            "takeover took {takeover:?}"
        );
        b.send("go");
        assert_eq!(b.line(), "done");
    }

    #[test]
    fn lease_lost_while_etcd_is_paused_stops_command_before_the_ttl() {
        let Some(server) = EtcdServer::start("etcd run lease lost") else {
            return;
        };
        let e = server.endpoint.as_str();
        let script = me!(
            "trap 'echo term; exit 3' TERM; echo locked $LEASEHOLD_FENCING_TOKEN $me; \
                      while :; do sleep 0.05; done"
        );
        let mut a = Proc::spawn(
            leasehold()
                .args([
                    "run", "--etcd", e, "--ttl", "2", "x", "--", "sh", "-c", script,
                ])
                .stderr(std::process::Stdio::piped()),
        );
        locked(&mut a);
        server.pause();
        let paused = Instant::now();
        assert_eq!(a.line(), "term");
        let stopped = paused.elapsed();
        assert!(
            stopped < TTL,
            "COMMAND was told to stop {stopped:?} after etcd stopped"
        );
        server.resume();
        let status = a.wait_timeout(Duration::from_secs(10)).expect("run exits");
        assert_eq!(status.code(), Some(1));
        // leasehold's one line (COMMAND's shell may report its child killed by SIGTERM).
        let mut err = String::new();
        std::io::Read::read_to_string(a.child.stderr.as_mut().unwrap(), &mut err).unwrap();
        let ours: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("leasehold: "))
            .collect();
        assert_eq!(ours.len(), 1, "{err:?}");
        assert!(ours[0].starts_with("leasehold: x: lease lost"), "{err:?}");
    }

    /// A COMMAND that ignores SIGTERM, and so do its children: once the lease is lost (etcd
    /// paused), they are all SIGKILLed at the deadline, before the TTL can have run out
    /// (it used to be COMMAND alone, 5 s after SIGTERM).
    #[test]
    fn a_command_that_ignores_sigterm_is_killed_with_its_children_before_the_ttl() {
        let Some(server) = EtcdServer::start("etcd run sigkill after sigterm") else {
            return;
        };
        let e = server.endpoint.as_str();
        let script = me!("trap '' TERM; sleep 600 >/dev/null & \
             echo locked $LEASEHOLD_FENCING_TOKEN $me; \
             while :; do sleep 0.05; done");
        let mut a = holder(e, "i", script, &[]);
        let (_, command, child) = locked_with_child(&mut a);
        server.pause();
        let paused = Instant::now();
        let status = a
            .wait_timeout(TTL + Duration::from_secs(9))
            .unwrap_or_else(|| {
                let etcd = server.pid().as_raw_nonzero().get() as u32;
                let listeners = std::process::Command::new("ss")
                    .args(["-tnp"])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default();
                let port = e.rsplit(':').next().unwrap_or("?");
                panic!(
                    "run exits; its tree:\n{}\netcd (pid {etcd}): {}\nconnections on port {port}:\n{}",
                    tree(a.pid()),
                    tree(etcd),
                    listeners
                        .lines()
                        .filter(|l| l.contains(&format!(":{port} ")))
                        .collect::<Vec<_>>()
                        .join("\n")
                )
            });
        let took = paused.elapsed();
        server.resume();
        assert_eq!(status.code(), Some(1));
        assert!(!alive(command), "COMMAND survived");
        assert!(!alive(child), "COMMAND's background child survived");
        assert!(
            took < TTL,
            "the tree was gone only {took:?} after the pause"
        );
    }

    /// `locked TOKEN PID`, said by a COMMAND with a background child `sleep 600`: the token,
    /// COMMAND's process ID and its child's.
    fn locked_with_child(p: &mut Proc) -> (u64, u32, u32) {
        let (token, command) = locked(p);
        // Looked for until it has become `sleep` (it is forked before the line, and may
        // not have run `exec` yet).
        let mut child = None;
        testkit::until("COMMAND's background child runs sleep 600", || {
            child = children_of(command)
                .into_iter()
                .find(|&c| cmdline(c).starts_with("sleep 600"));
            child.is_some()
        });
        (token, command, child.unwrap())
    }

    /// A COMMAND that starts a background child (which would sleep for ten minutes) and says
    /// `locked TOKEN PID`, then waits.
    const WITH_CHILD: &str = me!("sleep 600 >/dev/null & \
         echo locked $LEASEHOLD_FENCING_TOKEN $me; exec sleep 600");

    fn parent_of(pid: u32) -> u32 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
        let (_, rest) = stat.rsplit_once(')').expect("stat");
        rest.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn a_command_that_ends_leaves_no_background_process_behind() {
        let Some(server) = EtcdServer::start("etcd run background child") else {
            return;
        };
        let e = server.endpoint.as_str();
        let script =
            me!("sleep 600 >/dev/null & echo locked $LEASEHOLD_FENCING_TOKEN $me; read _x");
        let mut a = holder(e, "bg", script, &[]);
        let (_, _, child) = locked_with_child(&mut a);
        a.send("go");
        let status = a.wait_timeout(Duration::from_secs(10)).expect("run exits");
        assert!(status.success(), "{status:?}");
        assert!(!alive(child), "the background child outlived the lease");
        let out = run(leasehold().args(["status", "--etcd", e, "bg"]));
        assert_eq!(out.stdout, "free\n", "{out:?}");
    }

    #[test]
    fn sigkill_of_leasehold_stops_the_whole_tree_before_a_successor_starts() {
        let Some(server) = EtcdServer::start("etcd run sigkill tree") else {
            return;
        };
        let e = server.endpoint.as_str();
        let mut a = holder(e, "kt", WITH_CHILD, &[]);
        let (_, command, child) = locked_with_child(&mut a);
        let mut b = holder(e, "kt", HOLD, &["--timeout", "20"]);
        server.queued("leasehold/lock/kt/", 2);
        a.kill(); // leasehold only: its supervisor stops the tree, the lease expires
        locked(&mut b);
        assert!(!alive(command), "COMMAND runs beside the next holder's");
        assert!(
            !alive(child),
            "COMMAND's child runs beside the next holder's"
        );
        b.send("go");
        assert_eq!(b.line(), "done");
        assert!(b.wait().success());
    }

    /// `leasehold run` itself SIGSTOPped past the TTL sends no keep-alive: the lease expires
    /// and the next holder starts — by then COMMAND's supervisor, which keeps the deadline by
    /// itself, has stopped COMMAND and its child. Resumed, `run` says `lease lost`.
    #[test]
    fn a_stopped_leasehold_run_has_its_tree_stopped_before_the_successor_starts() {
        let Some(server) = EtcdServer::start("etcd run sigstop of run") else {
            return;
        };
        let e = server.endpoint.as_str();
        let mut a = Proc::spawn(
            leasehold()
                .args(["run", "--etcd", e, "--ttl", "2", "st", "--", "sh", "-c"])
                .arg(WITH_CHILD)
                .stderr(std::process::Stdio::piped()),
        );
        let (_, command, child) = locked_with_child(&mut a);
        let mut b = holder(e, "st", HOLD, &["--timeout", "20"]);
        server.queued("leasehold/lock/st/", 2);
        a.signal(Signal::STOP);
        locked(&mut b);
        let overlap = (alive(command), alive(child));
        a.signal(Signal::CONT);
        assert_eq!(
            overlap,
            (false, false),
            "(COMMAND, its child) alive beside the next holder's COMMAND"
        );
        let status = a.wait_timeout(Duration::from_secs(10)).expect("run exits");
        assert_eq!(status.code(), Some(1));
        let mut err = String::new();
        std::io::Read::read_to_string(a.child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert_eq!(err.lines().count(), 1, "{err:?}");
        assert!(err.starts_with("leasehold: st: lease lost"), "{err:?}");
        b.send("go");
        assert_eq!(b.line(), "done");
        assert!(b.wait().success());
    }

    /// `--grace`: a COMMAND that shuts down on SIGTERM gets it at least GRACE before the
    /// successor can start (here `run` is stopped, so nothing renews the lease), and its
    /// shutdown is over before the successor's COMMAND begins. Times are the COMMANDs' own
    /// (`date +%s%N`, one clock for both).
    #[test]
    fn the_grace_gives_a_sigterm_handling_command_its_time_before_the_successor() {
        let Some(server) = EtcdServer::start("etcd run grace") else {
            return;
        };
        let e = server.endpoint.as_str();
        let grace = Duration::from_millis(1500);
        let script = me!(
            "trap 'echo term $(date +%s%N); sleep 1; echo cleaned $(date +%s%N); exit 0' TERM; \
             echo locked $LEASEHOLD_FENCING_TOKEN $me; \
             while :; do sleep 0.05; done"
        );
        let mut a = Proc::spawn(
            leasehold()
                .args(["run", "--etcd", e, "--ttl", "4", "--grace", "1.5", "g"])
                .args(["--", "sh", "-c", script]),
        );
        let (_, command) = locked(&mut a);
        let mut b = Proc::spawn(leasehold().args([
            "run",
            "--etcd",
            e,
            "--ttl",
            "4",
            "--timeout",
            "30",
            "g",
            "--",
            "sh",
            "-c",
            "echo locked $(date +%s%N); read _x; exit 0",
        ]));
        server.queued("leasehold/lock/g/", 2);
        a.signal(Signal::STOP);
        let started = b.line();
        assert!(!alive(command), "COMMAND runs beside the next holder's");
        a.signal(Signal::CONT);
        let time = |line: &str, what: &str| -> u64 {
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!(f.first(), Some(&what), "{line:?}");
            f[1].parse().expect("nanoseconds")
        };
        let successor = time(&started, "locked");
        let term = time(&a.line(), "term");
        let cleaned = time(&a.line(), "cleaned");
        assert!(cleaned < successor, "the shutdown overlapped the successor");
        let ahead = Duration::from_nanos(successor.saturating_sub(term));
        eprintln!("SIGTERM {ahead:?} before the successor (grace {grace:?})");
        assert!(
            ahead >= grace,
            "SIGTERM came only {ahead:?} before the successor started"
        );
        assert_eq!(
            a.wait_timeout(Duration::from_secs(10))
                .and_then(|s| s.code()),
            Some(1)
        );
        b.close_stdin();
        assert!(b.wait().success());
    }

    /// The supervisor itself SIGKILLed: the first process of COMMAND's PID namespace dies of
    /// its parent-death signal, and the kernel kills the rest (without a namespace COMMAND
    /// dies of its own, and `run`, to which the orphans fall, kills COMMAND's child); `run`
    /// exits 1 and releases.
    #[test]
    fn a_killed_supervisor_takes_command_and_its_children_with_it() {
        let Some(server) = EtcdServer::start("etcd run supervisor killed") else {
            return;
        };
        let e = server.endpoint.as_str();
        let mut a = holder(e, "sv", WITH_CHILD, &[]);
        let (_, command, child) = locked_with_child(&mut a);
        let init = parent_of(command);
        let supervisor = parent_of(init);
        assert_eq!(
            parent_of(supervisor),
            a.pid(),
            "run → supervisor → ns-init → COMMAND"
        );
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(supervisor as i32).unwrap(),
            Signal::KILL,
        )
        .unwrap();
        let status = a.wait_timeout(Duration::from_secs(10)).expect("run exits");
        assert_eq!(status.code(), Some(1), "{status:?}");
        assert!(!alive(command), "COMMAND survived its supervisor");
        assert!(!alive(child), "COMMAND's child survived the supervisor");
        let out = run(leasehold().args(["status", "--etcd", e, "sv"]));
        assert_eq!(out.stdout, "free\n", "released: {out:?}");
    }

    /// `run`'s one child: COMMAND's supervisor.
    fn supervisor_of(run: u32) -> u32 {
        let children = children_of(run);
        assert_eq!(children.len(), 1, "{children:?}");
        assert!(cmdline(children[0]).contains("etcd-supervisor"));
        children[0]
    }

    /// Sends `sig` to process `pid`.
    fn signal(pid: u32, sig: Signal) {
        rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), sig)
            .unwrap();
    }

    /// Whether every process holding `p`'s stdout (`run`, and every process of COMMAND's
    /// tree that did not close it) is gone within `limit`: EOF on a copy of the pipe, read
    /// by a thread. The limit only bounds a test that would otherwise hang.
    fn stdout_closed_within(p: &Proc, limit: Duration) -> bool {
        use std::io::Read;
        use std::os::fd::AsFd;
        let mut pipe =
            std::fs::File::from(p.stdout.get_ref().as_fd().try_clone_to_owned().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = tx.send(pipe.read_to_end(&mut sink).is_ok());
        });
        rx.recv_timeout(limit).unwrap_or(false)
    }

    /// `run` and its supervisor SIGKILLed together (`pkill -9 leasehold`): no process of
    /// ours is left to act, and the kernel ends COMMAND's tree — the first process of
    /// COMMAND's PID namespace dies of its parent-death signal, and every other process of
    /// the namespace with it. Here a descendant that left COMMAND's process group and
    /// session keeps writing to COMMAND's stdout; the pipe's EOF says every holder is gone.
    /// (Both are stopped first, so that neither can act before both are dead.)
    #[test]
    fn sigkill_of_run_and_its_supervisor_together_ends_the_whole_tree() {
        let Some(server) = EtcdServer::start("etcd run sigkill of run and supervisor") else {
            return;
        };
        let e = server.endpoint.as_str();
        let script = me!("echo locked $LEASEHOLD_FENCING_TOKEN $me; \
             setsid sh -c 'while :; do echo tick; sleep 0.05; done' & exec sleep 600");
        let mut a = holder(e, "kk", script, &[]);
        let (_, command) = locked(&mut a);
        let supervisor = supervisor_of(a.pid());
        for pid in [supervisor, a.pid()] {
            signal(pid, Signal::STOP);
        }
        for pid in [supervisor, a.pid()] {
            signal(pid, Signal::KILL);
        }
        assert!(
            stdout_closed_within(&a, Duration::from_secs(20)),
            "COMMAND's descendants outlived run and its supervisor"
        );
        // (Its descriptors close before it is a zombie: give its exit that moment.)
        assert!(
            wait_dead(command, Duration::from_secs(5)),
            "COMMAND outlived run and its supervisor"
        );
    }

    /// The supervisor SIGSTOPped, then the lease lost (etcd paused: a partition): the
    /// supervisor cannot act, so `run`, which watches it as it watches `run`, kills it and
    /// COMMAND's whole tree — before the TTL, so before a successor could start — and
    /// exits 1 saying so. (TTL 4 s: `run` acts half the margin after the deadline, and the
    /// test has the other half, 0.2 s, to see it done.)
    #[test]
    fn a_stopped_supervisor_has_its_tree_stopped_by_run_when_the_lease_is_lost() {
        let Some(server) = EtcdServer::start("etcd run stopped supervisor") else {
            return;
        };
        let e = server.endpoint.as_str();
        let mut a = Proc::spawn(
            leasehold()
                .args(["run", "--etcd", e, "--ttl", "4", "ss", "--", "sh", "-c"])
                .arg(WITH_CHILD)
                .stderr(std::process::Stdio::piped()),
        );
        let (_, command, child) = locked_with_child(&mut a);
        let supervisor = supervisor_of(a.pid());
        signal(supervisor, Signal::STOP);
        server.pause();
        let paused = Instant::now();
        let status = a.wait_timeout(Duration::from_secs(15));
        let took = paused.elapsed();
        server.resume();
        let status = status.expect("run exits though its supervisor is stopped");
        assert_eq!(status.code(), Some(1), "{status:?}");
        assert!(!alive(command), "COMMAND survived");
        assert!(!alive(child), "COMMAND's background child survived");
        assert!(!alive(supervisor), "the stopped supervisor was left");
        // The lease cannot expire before the TTL (4 s) after the pause; run acts at most
        // TTL − margin/2 = 3.8 s after it.
        let ttl = Duration::from_secs(4);
        assert!(
            took < ttl,
            "the tree was gone only {took:?} after the pause"
        );
        let mut err = String::new();
        std::io::Read::read_to_string(a.child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert_eq!(err.lines().count(), 1, "{err:?}");
        assert!(err.starts_with("leasehold: ss: lease lost"), "{err:?}");
        assert!(err.contains("supervisor did not answer"), "{err:?}");
    }

    /// `pid` and its descendants, one line each: pid, state, process group, kernel wait
    /// channel and command line — what a test that timed out waiting for `pid` prints.
    fn tree(pid: u32) -> String {
        let mut lines = Vec::new();
        let mut todo = vec![pid];
        while let Some(p) = todo.pop() {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
            let wchan = std::fs::read_to_string(format!("/proc/{p}/wchan")).unwrap_or_default();
            let threads: Vec<String> = std::fs::read_dir(format!("/proc/{p}/task"))
                .map(|d| {
                    d.filter_map(|t| {
                        let t = t.ok()?.path();
                        let w = std::fs::read_to_string(t.join("wchan")).ok()?;
                        let comm = std::fs::read_to_string(t.join("comm")).ok()?;
                        Some(format!("{}:{w}", comm.trim()))
                    })
                    .collect()
                })
                .unwrap_or_default();
            // An armed timer (the supervisor's wake-up): its clock, ticks and expiry.
            let timers: Vec<String> = std::fs::read_dir(format!("/proc/{p}/fd"))
                .map(|d| {
                    d.filter_map(|fd| {
                        let fd = fd.ok()?;
                        let link = std::fs::read_link(fd.path()).ok()?;
                        if !link.to_string_lossy().contains("timerfd") {
                            return None;
                        }
                        let info = std::fs::read_to_string(format!(
                            "/proc/{p}/fdinfo/{}",
                            fd.file_name().to_string_lossy()
                        ))
                        .ok()?;
                        Some(info.split_whitespace().collect::<Vec<_>>().join(" "))
                    })
                    .collect()
                })
                .unwrap_or_default();
            lines.push(format!(
                "{p} state {} group {} wchan {wchan} threads [{}] timers [{}] {}",
                fields.first().unwrap_or(&"?"),
                fields.get(2).unwrap_or(&"?"),
                threads.join(" "),
                timers.join("; "),
                cmdline(p)
            ));
            todo.extend(children_of(p));
        }
        let boot = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        lines.push(format!("boot time now {}.{:09}", boot.tv_sec, boot.tv_nsec));
        lines.join("\n")
    }

    /// The pids of `pid`'s children (Linux: from every `/proc/PID/stat`).
    fn children_of(pid: u32) -> Vec<u32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .ok()
                    .and_then(|st| {
                        let (_, rest) = st.rsplit_once(')')?;
                        rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                    })
                    == Some(pid)
            })
            .collect()
    }

    fn cmdline(pid: u32) -> String {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default()
    }

    /// A waiting `run`'s supervisor, the first process of COMMAND's PID namespace (ns-init)
    /// and COMMAND's process (the exec helper, not yet COMMAND), once all are up: looked
    /// for in /proc until they are.
    fn standby_of(run: u32) -> (u32, u32, u32) {
        let mut found = None;
        testkit::until(
            "the waiting run's supervisor has started COMMAND's process",
            || {
                // Each once it has run `exec` (a child just forked shows its parent's command).
                let Some(&supervisor) = children_of(run)
                    .first()
                    .filter(|&&p| cmdline(p).contains("etcd-supervisor"))
                else {
                    return false;
                };
                let Some(&init) = children_of(supervisor)
                    .first()
                    .filter(|&&p| cmdline(p).contains("etcd-ns-init"))
                else {
                    return false;
                };
                found = children_of(init)
                    .first()
                    .filter(|&&helper| cmdline(helper) != cmdline(init))
                    .map(|&helper| (supervisor, init, helper));
                found.is_some()
            },
        );
        let (supervisor, init, helper) = found.unwrap();
        assert!(cmdline(init).contains("etcd-ns-init"), "{}", cmdline(init));
        assert!(
            cmdline(supervisor).contains("etcd-supervisor"),
            "{}",
            cmdline(supervisor)
        );
        (supervisor, init, helper)
    }

    /// The supervisor and COMMAND's process start before the wait, so the
    /// grant costs messages rather than process starts — and a wait that ends without a
    /// grant dismisses both, COMMAND never running: when `run` is SIGKILLed while waiting,
    /// when its `--timeout` runs out, and on SIGINT.
    #[test]
    fn a_waiting_run_has_command_ready_and_never_runs_it_without_the_grant() {
        let Some(server) = EtcdServer::start("etcd run standby") else {
            return;
        };
        let e = server.endpoint.as_str();
        let mut a = holder(e, "sb", HOLD, &[]);
        locked(&mut a);
        let mut b = holder(e, "sb", "echo ran", &["--timeout", "30"]);
        server.queued("leasehold/lock/sb/", 2);
        let (supervisor, init, helper) = standby_of(b.pid());
        assert!(
            cmdline(helper).contains("_exec-with-parent-death-signal"),
            "COMMAND's process became COMMAND without the grant: {}",
            cmdline(helper)
        );
        assert_eq!(
            std::fs::read_to_string(format!("/proc/{helper}/stat"))
                .unwrap()
                .rsplit_once(')')
                .unwrap()
                .1
                .split_whitespace()
                .nth(2),
            Some(init.to_string().as_str()),
            "COMMAND's process is in the process group ns-init leads"
        );
        b.kill(); // run alone: its supervisor sees the socket close
        testkit::until(
            "the killed run's supervisor and COMMAND's process exit",
            || !alive(supervisor) && !alive(init) && !alive(helper),
        );
        assert_eq!(b.line(), "", "COMMAND ran without the grant");

        // A timed-out wait: exit 75, and both are gone when run exits (its stdout, which
        // they share, reaches EOF: `run` returns).
        let out = run(leasehold().args([
            "run",
            "--etcd",
            e,
            "--ttl",
            "2",
            "--timeout",
            "0.3",
            "sb",
            "--",
            "echo",
            "ran",
        ]));
        assert_eq!(out.code, 75, "{out:?}");
        assert_eq!(out.stdout, "", "{out:?}");

        // SIGINT while waiting: 130, COMMAND never runs.
        let mut c = holder(e, "sb", "echo ran", &["--timeout", "30"]);
        let (supervisor, init, helper) = standby_of(c.pid());
        c.signal(Signal::INT);
        let status = c.wait_timeout(Duration::from_secs(10)).expect("run exits");
        assert_eq!(status.code(), Some(130), "{status:?}");
        assert!(
            !alive(supervisor) && !alive(init) && !alive(helper),
            "left behind"
        );
        assert_eq!(c.line(), "", "COMMAND ran without the grant");
        a.send("go");
        assert_eq!(a.line(), "done");
        assert!(a.wait().success());
    }

    /// A pseudo-terminal whose far side is the controlling terminal of a new session
    /// (`setsid --ctty`), running `argv` as that session's leader: what a user's terminal
    /// is to `leasehold run` typed at a prompt. The test types into the master side and
    /// reads what the session writes (echo included).
    struct Pty {
        master: std::fs::File,
        child: std::process::Child,
        seen: String,
    }

    impl Pty {
        /// `None` (after a SKIP line) where there is no pty or no util-linux `setsid`.
        fn spawn(test: &str, argv: &[&str]) -> Option<Pty> {
            use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
            use std::os::unix::fs::OpenOptionsExt;
            // Close-on-exec: the session (and every other test's child) must not hold the
            // master side, or closing it here would not hang the terminal up.
            #[cfg(target_os = "linux")]
            let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
            #[cfg(not(target_os = "linux"))]
            let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY;
            let master = match openpt(flags) {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("SKIP: {test}: no pseudo-terminal: {e}");
                    return None;
                }
            };
            #[cfg(not(target_os = "linux"))]
            rustix::io::fcntl_setfd(&master, rustix::io::FdFlags::CLOEXEC).expect("FD_CLOEXEC");
            grantpt(&master).expect("grantpt");
            unlockpt(&master).expect("unlockpt");
            let name = ptsname(&master, Vec::new()).expect("ptsname");
            let slave = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(rustix::fs::OFlags::NOCTTY.bits() as i32)
                .open(name.to_str().unwrap())
                .expect("open the pty's terminal side");
            let io = |f: &std::fs::File| std::process::Stdio::from(f.try_clone().unwrap());
            // --fork: a new session even if the child would lead a group; --wait: its
            // status is the session leader's; --ctty: stdin becomes the controlling terminal.
            let child = std::process::Command::new("setsid")
                .args(["--fork", "--wait", "--ctty"])
                .args(argv)
                .stdin(io(&slave))
                .stdout(io(&slave))
                .stderr(io(&slave))
                .spawn();
            let child = match child {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("SKIP: {test}: util-linux setsid: {e}");
                    return None;
                }
            };
            drop(slave);
            Some(Pty {
                master: std::fs::File::from(master),
                child,
                seen: String::new(),
            })
        }

        /// Reads what the session writes until `needle` has appeared (after what earlier
        /// calls consumed); panics after 20 s (a stopped COMMAND never writes).
        fn expect(&mut self, needle: &str) {
            while !self.seen.contains(needle) {
                assert!(
                    self.read_some(),
                    "the session ended before {needle:?} appeared; it showed {:?}",
                    self.seen
                );
            }
            let at = self.seen.find(needle).unwrap();
            self.seen.drain(..at + needle.len());
        }

        /// Reads what is there (waiting at most 20 s for it); `false` at the end (EIO: every
        /// process that had the terminal open is gone).
        fn read_some(&mut self) -> bool {
            use std::io::Read;
            let mut fds = [rustix::event::PollFd::new(
                &self.master,
                rustix::event::PollFlags::IN,
            )];
            let spec = rustix::time::Timespec {
                tv_sec: 20,
                tv_nsec: 0,
            };
            let _ = rustix::event::poll(&mut fds, Some(&spec));
            assert!(
                !fds[0].revents().is_empty(),
                "the terminal stayed silent for 20 s; it showed {:?}",
                self.seen
            );
            let mut buf = [0u8; 1024];
            match self.master.read(&mut buf) {
                Ok(n) if n > 0 => {
                    self.seen.push_str(&String::from_utf8_lossy(&buf[..n]));
                    true
                }
                _ => false,
            }
        }

        /// Types `text` (the line discipline turns ^C into SIGINT for the foreground group).
        fn type_in(&mut self, text: &str) {
            use std::io::Write;
            self.master
                .write_all(text.as_bytes())
                .expect("type into the pty");
        }

        /// Reads until the session has closed the terminal (the handshake that everything in
        /// it ended), then reaps `setsid`.
        fn wait(&mut self) -> std::process::ExitStatus {
            while self.read_some() {}
            self.child.wait().expect("wait for setsid")
        }
    }

    impl Drop for Pty {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// COMMAND runs in a process group of its own; with the terminal `run` has, it is the
    /// terminal's foreground group while it runs: a COMMAND that reads the terminal gets the
    /// line typed (it used to be stopped by SIGTTIN), and the terminal is given back when it
    /// ends — the shell that started `run` reads the next line (it used to get EIO).
    #[test]
    fn a_command_reads_the_terminal_and_the_shell_gets_it_back() {
        let Some(server) = EtcdServer::start("etcd run terminal") else {
            return;
        };
        let exe = super::common::bin();
        let script = format!(
            "'{}' run --etcd {} --ttl 2 tty -- sh -c 'echo ready; read line; echo got $line'; \
             echo status $?; read again; echo after $again",
            exe.display(),
            server.endpoint
        );
        let Some(mut tty) = Pty::spawn("etcd run terminal", &["sh", "-c", &script]) else {
            return;
        };
        tty.expect("ready");
        tty.type_in("hello\n");
        tty.expect("got hello");
        tty.expect("status 0");
        tty.type_in("second\n");
        tty.expect("after second");
        assert!(tty.wait().success());
    }

    /// Ctrl-C at the terminal reaches COMMAND's group: a COMMAND waiting for a line ends by
    /// SIGINT, and `run` exits 130 (a reading COMMAND in the background was stopped by
    /// SIGTTIN, where a forwarded SIGINT only waits).
    #[test]
    fn ctrl_c_at_the_terminal_ends_a_reading_command() {
        let Some(server) = EtcdServer::start("etcd run ctrl-c") else {
            return;
        };
        let exe = super::common::bin();
        let exe = exe.to_str().unwrap();
        let argv = [
            exe,
            "run",
            "--etcd",
            &server.endpoint,
            "--ttl",
            "2",
            "cc",
            "--",
            "sh",
            "-c",
            "echo ready; read line; echo never",
        ];
        let Some(mut tty) = Pty::spawn("etcd run ctrl-c", &argv) else {
            return;
        };
        tty.expect("ready");
        tty.type_in("\x03");
        let status = tty.wait();
        assert_eq!(
            status.code(),
            Some(130),
            "{status:?}; it showed {:?}",
            tty.seen
        );
        assert!(!tty.seen.contains("never"), "{:?}", tty.seen);
        let out = run(leasehold().args(["status", "--etcd", &server.endpoint, "cc"]));
        assert_eq!(out.stdout, "free\n", "released: {out:?}");
    }

    /// An interactive bash (no startup files) in a new [`Pty`], at a prompt `p2> ` (typed as
    /// `p$((1+1))> `, so that the terminal's echo of what is typed never matches what the
    /// shell prints), notifying job state changes at once (`set -b`).
    fn interactive_bash(test: &str) -> Option<Pty> {
        let mut tty = Pty::spawn(test, &["bash", "--norc", "--noprofile", "-i"])?;
        tty.type_in("PS1='p$((1+1))> '; set -b\n");
        tty.expect("p2> ");
        Some(tty)
    }

    /// Ctrl-Z, `fg` and Ctrl-C at an interactive shell, for `leasehold run RUN_ARGS -- sh
    /// -c …` (the kernel arbiter's `run` and `run --etcd` alike): the shell says the job is
    /// stopped and runs what is typed next; `fg` gives COMMAND the terminal again (it reads
    /// the line typed); Ctrl-C ends it with status 130.
    fn ctrl_z_then_fg_then_ctrl_c(tty: &mut Pty, run_args: &str) {
        let exe = super::common::bin();
        tty.type_in(&format!(
            "'{}' run {run_args} -- sh -c 'echo up$((1+1)); read x; echo got$x; exec sleep 1000'\n",
            exe.display()
        ));
        tty.expect("up2");
        tty.type_in("\x1a");
        tty.expect("Stopped");
        tty.expect("p2> ");
        tty.type_in("echo back$((1+1))\n");
        tty.expect("back2");
        tty.expect("p2> ");
        tty.type_in("fg\n");
        tty.type_in("more\n");
        tty.expect("gotmore");
        tty.type_in("\x03");
        tty.expect("p2> ");
        tty.type_in("echo st=$?\n");
        tty.expect("st=130");
        tty.expect("p2> ");
    }

    /// Job control at a shell's prompt: Ctrl-Z stops `run --etcd` as a job — the shell says
    /// "Stopped" and has the terminal back (COMMAND's group had it) — and `fg` continues it
    /// with the terminal, as for `leasehold run` on the kernel arbiter. (Ctrl-Z used to stop
    /// COMMAND alone: the shell, waiting for `run`, never got the terminal back.)
    #[test]
    fn ctrl_z_stops_the_job_and_fg_continues_it_with_the_terminal() {
        let Some(server) = EtcdServer::start("etcd run ctrl-z") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let Some(mut tty) = interactive_bash("etcd run ctrl-z") else {
            return;
        };
        let lock = dir.path().join("jc.lock");
        ctrl_z_then_fg_then_ctrl_c(&mut tty, &format!("'{}'", lock.display()));
        // A TTL the stop cannot outlast (while `run` is stopped, no keep-alive is sent).
        ctrl_z_then_fg_then_ctrl_c(&mut tty, &format!("--etcd {} --ttl 30 jc", server.endpoint));
        tty.type_in("exit\n");
        assert!(tty.wait().success(), "{:?}", tty.seen);
        let out = run(leasehold().args(["status", "--etcd", &server.endpoint, "jc"]));
        assert_eq!(out.stdout, "free\n", "released: {out:?}");
    }

    /// A background job whose COMMAND touches the terminal (`stty` from the background:
    /// SIGTTOU) is stopped as a job, and `fg` resumes it to completion, for `run --etcd` as
    /// for `leasehold run`. (COMMAND used to stay stopped, and `fg` continued `run` only.)
    #[test]
    fn a_background_job_stopped_by_sigttou_is_resumed_by_fg() {
        let Some(server) = EtcdServer::start("etcd run sigttou") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let Some(mut tty) = interactive_bash("etcd run sigttou") else {
            return;
        };
        let exe = super::common::bin();
        let lock = dir.path().join("bg.lock");
        for run_args in [
            format!("'{}'", lock.display()),
            format!("--etcd {} --ttl 30 bg", server.endpoint),
        ] {
            tty.type_in(&format!(
                "'{}' run {run_args} -- sh -c 'stty tostop; echo out$((1+1))' &\n",
                exe.display()
            ));
            tty.expect("Stopped");
            tty.type_in("fg\n");
            tty.expect("out2");
            tty.expect("p2> ");
            tty.type_in("echo st=$?\n");
            tty.expect("st=0");
            tty.expect("p2> ");
        }
        tty.type_in("exit\n");
        assert!(tty.wait().success(), "{:?}", tty.seen);
    }

    /// `run` continues its job's process group at the end only if it stopped it (following
    /// a stopped COMMAND). In an orphaned group — here a script's, in a session of its own,
    /// with no job control — a process stopped for reasons of its own stays stopped after a
    /// `run --etcd` in that script has come and gone. (It used to be continued: a test's
    /// paused etcd in the test runner's group came back to life when another test's `run`
    /// ended.)
    #[test]
    fn a_run_leaves_a_stopped_process_of_its_group_stopped() {
        let Some(server) = EtcdServer::start("etcd run leaves its group's stops alone") else {
            return;
        };
        let script = "sleep 600 & echo $!; read _x; \"$0\" run --etcd \"$1\" --ttl 2 og -- true; \
             echo ran $?; read _x";
        let mut p = Proc::spawn(
            std::process::Command::new("setsid")
                .args(["-w", "sh", "-c", script])
                .arg(super::common::bin())
                .arg(&server.endpoint),
        );
        let sleeper: u32 = p.line().parse().expect("the background sleep's pid");
        signal(sleeper, Signal::STOP);
        testkit::until("the background sleep is stopped", || {
            testkit::stopped(sleeper)
        });
        p.send("go");
        assert_eq!(p.line(), "ran 0");
        assert!(
            testkit::stopped(sleeper),
            "a process of run's group, stopped by someone else, was continued"
        );
        signal(sleeper, Signal::KILL);
        p.send("end");
        assert!(p.wait().success());
    }

    /// The terminal goes (its master side closed) while COMMAND is stopped — by Ctrl-Z at
    /// the prompt, or by SIGTTOU in a background job: `run`, its supervisor, ns-init and
    /// COMMAND all end, and the lock is free again. (The background job's stayed, keeping
    /// the lock for good: the shell's hang-up reached `run`, running, and was passed on to
    /// COMMAND's group, stopped, without a SIGCONT.)
    #[test]
    fn a_hang_up_ends_a_stopped_job_and_frees_the_lock() {
        let Some(server) = EtcdServer::start("etcd run hang-up") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let exe = super::common::bin();
        let pid_file = dir.path().join("pid");
        // (How COMMAND is stopped, how the job starts.)
        for (stop, start) in [("read _x", ""), ("stty tostop", "&")] {
            let Some(mut tty) = interactive_bash("etcd run hang-up") else {
                return;
            };
            let _ = std::fs::remove_file(&pid_file);
            let script = format!("{}; {stop}; exec sleep 1000", me!("echo $me >\"$1\""));
            tty.type_in(&format!(
                "'{}' run --etcd {} --ttl 30 hup -- sh -c '{script}' sh '{}' {start}\n",
                exe.display(),
                server.endpoint,
                pid_file.display()
            ));
            // COMMAND stopped (whether or not the shell has seen its job stop); Ctrl-Z once
            // it runs (it wrote its pid), with the terminal.
            let end = Instant::now() + Duration::from_secs(20);
            let mut typed = !start.is_empty();
            let command = loop {
                let pid = std::fs::read_to_string(&pid_file)
                    .ok()
                    .and_then(|p| p.trim().parse::<u32>().ok());
                if let Some(pid) = pid {
                    if !typed {
                        tty.type_in("\x1a");
                        typed = true;
                    }
                    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
                    if stat
                        .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, r)| r.starts_with(" T")))
                    {
                        break pid;
                    }
                }
                assert!(
                    Instant::now() < end,
                    "COMMAND was not stopped ({stop} {start})"
                );
                std::thread::sleep(Duration::from_millis(5));
            };
            // The shell has seen its job stop: a job hung up as it stops may stay stopped
            // until its lease's deadline (docs/cli.md).
            tty.expect("Stopped");
            let init = parent_of(command);
            let supervisor = parent_of(init);
            let leasehold_run = parent_of(supervisor);
            assert!(cmdline(supervisor).contains("etcd-supervisor"));
            assert!(cmdline(leasehold_run).contains("hup"));
            // The hang-up: the only descriptor of the master side closes.
            drop(std::mem::replace(
                &mut tty.master,
                std::fs::File::open("/dev/null").unwrap(),
            ));
            for (what, pid) in [
                ("COMMAND", command),
                ("ns-init", init),
                ("the supervisor", supervisor),
                ("run", leasehold_run),
            ] {
                assert!(
                    wait_dead(pid, Duration::from_secs(20)),
                    "{what} (pid {pid}) outlived the hang-up ({stop} {start})"
                );
            }
            let out = run(leasehold().args([
                "run",
                "--etcd",
                &server.endpoint,
                "--no-wait",
                "hup",
                "--",
                "true",
            ]));
            assert_eq!(out.code, 0, "the lock after the hang-up: {out:?}");
        }
    }

    /// A job stopped whole — COMMAND's group and `run`, as Ctrl-Z stops them — has no
    /// keep-alive sent, and at the deadline its tree gets SIGTERM with SIGCONT: a COMMAND
    /// that shuts down on SIGTERM does so within the grace (it was SIGKILLed, still
    /// stopped, at the deadline), and `run`, continued, says `lease lost`.
    #[test]
    fn a_stopped_job_past_its_deadline_gets_sigterm_with_sigcont() {
        let Some(server) = EtcdServer::start("etcd run stopped job") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let said = dir.path().join("term");
        // (COMMAND waits in a builtin: a shell stopped while it starts a child, by vfork,
        // waits for it unstoppably.)
        let script = me!(
            "trap 'echo term >\"$1\"; exit 3' TERM; ",
            "echo locked $LEASEHOLD_FENCING_TOKEN $me; read _x"
        );
        let mut a = Proc::spawn(
            leasehold()
                .args(["run", "--etcd", &server.endpoint, "--ttl", "2", "sj"])
                .args(["--", "sh", "-c", script, "sh"])
                .arg(&said)
                .stderr(std::process::Stdio::piped()),
        );
        let (_, command) = locked(&mut a);
        // COMMAND's group (led by ns-init, its parent), then `run`.
        let group = rustix::process::Pid::from_raw(parent_of(command) as i32).unwrap();
        rustix::process::kill_process_group(group, Signal::STOP).unwrap();
        a.signal(Signal::STOP);
        let end = Instant::now() + Duration::from_secs(20);
        while std::fs::read_to_string(&said).unwrap_or_default() != "term\n" {
            assert!(
                Instant::now() < end,
                "the stopped COMMAND never ran its SIGTERM handler"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        a.signal(Signal::CONT);
        let status = a.wait_timeout(Duration::from_secs(20)).expect("run exits");
        assert_eq!(status.code(), Some(1));
        let mut err = String::new();
        std::io::Read::read_to_string(a.child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(
            err.lines()
                .any(|l| l.starts_with("leasehold: sj: lease lost")),
            "{err:?}"
        );
    }

    /// SIGTERM or SIGHUP sent to `run` reaches a stopped COMMAND with SIGCONT (as a shell's
    /// `kill` or hang-up of a stopped job continues it), so COMMAND ends — by its handler,
    /// or of the SIGHUP — and `run` exits with its status. (The signal used to wait,
    /// pending, while the stopped COMMAND kept the lease.)
    #[test]
    fn sigterm_and_sighup_end_a_stopped_command() {
        let Some(server) = EtcdServer::start("etcd run signals to a stopped command") else {
            return;
        };
        // (COMMAND waits in a builtin: a shell stopped while it starts a child, by vfork,
        // waits for it unstoppably, never stopped.)
        let script = me!(
            "trap 'exit 3' TERM; ",
            "echo locked $LEASEHOLD_FENCING_TOKEN $me; read _x"
        );
        for (sig, code) in [(Signal::TERM, 3), (Signal::HUP, 129)] {
            let mut a = Proc::spawn(
                leasehold()
                    .args(["run", "--etcd", &server.endpoint, "--ttl", "30", "sg"])
                    .args(["--", "sh", "-c", script]),
            );
            let (_, command) = locked(&mut a);
            let group = rustix::process::Pid::from_raw(parent_of(command) as i32).unwrap();
            rustix::process::kill_process_group(group, Signal::STOP).unwrap();
            let end = Instant::now() + Duration::from_secs(20);
            while !testkit::stopped(command) {
                assert!(
                    Instant::now() < end,
                    "COMMAND was not stopped: {:?}",
                    std::fs::read_to_string(format!("/proc/{command}/stat"))
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            a.signal(sig);
            let status = a.wait_timeout(Duration::from_secs(20));
            assert_eq!(
                status.and_then(|s| s.code()),
                Some(code),
                "{sig:?} to run, COMMAND stopped"
            );
        }
    }

    /// A `run` stopped where no shell will continue it — its process group orphaned, here
    /// the leader of a session of its own — is continued by its supervisor once the tree is
    /// gone (at the deadline: no keep-alive comes from a stopped `run`), so it says `lease
    /// lost` and exits 1 instead of staying stopped for good. (A job hung up just as
    /// COMMAND's stop stops it is left so: the kernel continues an orphaned group only if
    /// its stop had completed.)
    #[cfg(target_os = "linux")]
    #[test]
    fn a_stopped_run_nobody_can_continue_is_continued_once_its_tree_is_gone() {
        let Some(server) = EtcdServer::start("etcd run orphaned") else {
            return;
        };
        let mut p = Proc::spawn(
            std::process::Command::new("setsid")
                .arg("--wait")
                .arg(super::common::bin())
                .args(["run", "--etcd", &server.endpoint, "--ttl", "2", "orph"])
                .args(["--", "sh", "-c", HOLD])
                .stderr(std::process::Stdio::piped()),
        );
        locked(&mut p);
        // `setsid` forks (it leads a process group): `run` is its child.
        let children = children_of(p.pid());
        assert_eq!(children.len(), 1, "{children:?}");
        signal(children[0], Signal::STOP);
        let status = p
            .wait_timeout(Duration::from_secs(20))
            .expect("the stopped run was continued and exited");
        assert_eq!(status.code(), Some(1));
        let mut err = String::new();
        std::io::Read::read_to_string(p.child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(err.starts_with("leasehold: orph: lease lost"), "{err:?}");
    }

    #[test]
    fn etcd_restarted_on_its_data_never_gives_two_holders() {
        let Some(mut server) = EtcdServer::start("etcd restart") else {
            return;
        };
        let e = server.endpoint.clone();
        let mut a = holder(
            &e,
            "r",
            me!("echo locked $LEASEHOLD_FENCING_TOKEN $me; exec sleep 600"),
            &[],
        );
        let (t1, command) = locked(&mut a);
        server.restart();
        // The check is this process's: COMMANDs run in PID namespaces of their own, where
        // another holder's COMMAND cannot be seen.
        let mut b = holder(&e, "r", "echo locked; read _x", &["--timeout", "8"]);
        match b.line().as_str() {
            // The first holder failed closed (its COMMAND was stopped) and the lock moved on.
            "locked" => {
                assert!(!alive(command), "two holders after the restart");
                b.send("go");
                assert!(b.wait().success());
            }
            // The first holder reconnected in time and still holds: its COMMAND must live.
            "" => {
                let status = b.wait();
                assert_eq!(status.code(), Some(75), "{status:?}");
                assert!(alive(command), "lock held by nobody alive");
            }
            other => panic!("{other:?}"),
        }
        // Either way, a grant after the restart has a greater token than the one before.
        drop(a);
        let out = run(leasehold().args([
            "run",
            "--etcd",
            &e,
            "--timeout",
            "8",
            "r",
            "--",
            "sh",
            "-c",
            "echo $LEASEHOLD_FENCING_TOKEN",
        ]));
        assert_eq!(out.code, 0, "{out:?}");
        assert!(out.stdout.trim().parse::<u64>().unwrap() > t1);
    }

    /// A TCP proxy to `upstream` on a free loopback port that delays what goes through by
    /// `delay` each way — each chunk is forwarded `delay` after it was read, a constant
    /// latency without queueing: a far etcd. It runs until the test process ends.
    fn slow_proxy(upstream: &str, delay: Duration) -> String {
        use std::net::{TcpListener, TcpStream};
        let upstream = upstream.trim_start_matches("http://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(client) = conn else { continue };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                    continue;
                };
                for s in [&client, &server] {
                    let _ = s.set_nodelay(true);
                }
                pump(client, s2, delay);
                pump(server, c2, delay);
            }
        });
        format!("http://{addr}")
    }

    /// Forwards `from` to `to`, each chunk `delay` after it was read (two threads).
    fn pump(mut from: std::net::TcpStream, mut to: std::net::TcpStream, delay: Duration) {
        use std::io::{Read, Write};
        let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0
                    || tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                {
                    break;
                }
            }
        });
        std::thread::spawn(move || {
            for (at, data) in rx {
                // The latency itself, not a synchronisation.
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                if to.write_all(&data).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(std::net::Shutdown::Write);
        });
    }

    /// Keep-alives planned from the TTL, the grace and the round trip measured at start: a
    /// combination that cannot hold at that round trip is refused (exit 2, with the
    /// arithmetic), and one that can keeps a healthy COMMAND running though a keep-alive
    /// every TTL/3 would be answered too late (here etcd is 0.3 s away: with --ttl 4
    /// --grace 2 a keep-alive has 1.6 s, and TTL/3 + 2 round trips is 1.93 s).
    #[test]
    fn keep_alives_follow_the_measured_round_trip_and_an_impossible_grace_is_refused() {
        let Some(server) = EtcdServer::start("etcd run far etcd") else {
            return;
        };
        let far = slow_proxy(&server.endpoint, Duration::from_millis(150));
        let out = run(leasehold().args([
            "run", "--etcd", &far, "--ttl", "2", "--grace", "0.8", "f", "--", "echo", "ran",
        ]));
        assert_eq!(out.code, 2, "{out:?}");
        assert_eq!(out.stdout, "", "{out:?}");
        assert_one_line_error(&out, "less than 4 × the round trip");
        assert!(
            out.stderr
                .contains("TTL 2.0 s − margin 0.2 s − grace 0.8 s = 1.000 s"),
            "{out:?}"
        );
        let out = run(leasehold().args([
            "run",
            "--etcd",
            &far,
            "--ttl",
            "4",
            "--grace",
            "2",
            "f",
            "--",
            "sh",
            "-c",
            "sleep 5; echo done",
        ]));
        assert_eq!((out.code, out.stdout.as_str()), (0, "done\n"), "{out:?}");
    }

    /// etcd restored from a backup taken while a `run` held its lock: the holder's lease is
    /// in the backup, so its keep-alives go on being answered — but by a store whose
    /// revisions went back, which hands out fencing tokens lower than ones already given.
    /// The holder counts every lease of the old data as lost and stops COMMAND.
    #[test]
    fn etcd_restored_from_a_backup_counts_as_every_lease_lost() {
        let Some(mut server) = EtcdServer::start("etcd restored from a backup") else {
            return;
        };
        let e = server.endpoint.clone();
        let mut a = Proc::spawn(
            leasehold()
                .args(["run", "--etcd", &e, "--ttl", "10", "rb", "--", "sh", "-c"])
                .arg(me!(
                    "echo locked $LEASEHOLD_FENCING_TOKEN $me; exec sleep 600"
                ))
                .stderr(std::process::Stdio::piped()),
        );
        let (_, command) = locked(&mut a);
        let snapshot = server.dir().join("backup.db");
        if !server.snapshot(&snapshot) {
            eprintln!("SKIP: etcd restored from a backup: etcdctl is not installed");
            return;
        }
        // Later writes (revisions the backup lacks), and a keep-alive answered after them:
        // the lease's remaining TTL (whole seconds) is seen to go down, then up again.
        for n in 0..5 {
            server
                .etcdctl(&["put", "leasehold-test/after", &n.to_string()])
                .expect("etcdctl");
        }
        let keys = server
            .etcdctl(&["get", "--prefix", "--keys-only", "leasehold/lock/rb/"])
            .expect("etcdctl");
        let key = String::from_utf8_lossy(&keys.stdout).trim().to_string();
        let lease = key.rsplit('/').next().unwrap().to_string();
        let remaining = || -> u64 {
            let out = server
                .etcdctl(&["lease", "timetolive", &lease])
                .expect("etcdctl");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.split("remaining(")
                .nth(1)
                .and_then(|t| t.split('s').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{text:?}"))
        };
        let mut low = remaining();
        testkit::until("a keep-alive is answered after the later writes", || {
            let now = remaining();
            low = low.min(now);
            now > low
        });
        server.restore(&snapshot);
        let status = a.wait_timeout(Duration::from_secs(8));
        let status = status.expect("run stops COMMAND once etcd answers from the backup");
        assert_eq!(status.code(), Some(1), "{status:?}");
        assert!(!alive(command), "COMMAND survived");
        let mut err = String::new();
        std::io::Read::read_to_string(a.child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(
            err.starts_with("leasehold: rb: lease lost: etcd member"),
            "{err:?}"
        );
        assert!(err.contains("etcd lost its data"), "{err:?}");
    }

    #[test]
    fn an_unreachable_endpoint_is_exit_1_within_5_s_naming_it() {
        let dead = dead_endpoint();
        for args in [
            vec!["run", "--etcd", &dead, "n", "--", "true"],
            vec!["status", "--etcd", &dead, "n"],
            vec!["registry", "--etcd", &dead, "list", "--json"],
        ] {
            let started = Instant::now();
            let out = run(leasehold().args(&args));
            assert!(started.elapsed() < Duration::from_secs(5), "{args:?}");
            assert_eq!(out.code, 1, "{args:?}: {out:?}");
            assert_one_line_error(&out, &dead);
        }
    }

    fn serve(e: &str) -> Proc {
        Proc::spawn(leasehold().args([
            "registry", "--etcd", e, "--prefix", "t/reg", "--ttl", "2", "serve",
        ]))
    }

    fn ask(p: &mut Proc, request: Value) -> Value {
        p.send(&request.to_string());
        serde_json::from_str(&p.line()).expect("one JSON answer")
    }

    fn add(p: &mut Proc, primary: &std::path::Path, root: &std::path::Path) -> Value {
        ask(p, json!({"op": "add", "primary": primary, "root": root}))
    }

    /// Sends `refresh` until it succeeds (each answer is the handshake), within `limit`.
    fn refresh_until_active(p: &mut Proc, limit: Duration) {
        let end = Instant::now() + limit;
        loop {
            let v = ask(p, json!({"op": "refresh"}));
            if v["ok"] == json!(true) {
                assert_eq!(v["state"], json!("active"));
                return;
            }
            assert!(Instant::now() < end, "never active again: {v}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn document(server: &EtcdServer) -> Value {
        let out = server
            .etcdctl(&[
                "get",
                "--print-value-only",
                "t/reg/storages/multi_root_workspace",
            ])
            .expect("etcdctl (Debian: etcd-client)");
        serde_json::from_slice(&out.stdout).expect("the document is JSON")
    }

    #[test]
    fn a_holder_paused_past_its_ttl_is_refused_after_the_successor_wrote() {
        let Some(server) = EtcdServer::start("etcd registry sigstop") else {
            return;
        };
        if super::support::etcdctl_path().is_none() {
            eprintln!("SKIP: etcd registry sigstop: etcdctl is not installed");
            return;
        }
        let e = server.endpoint.as_str();
        let dirs = tempfile::tempdir().unwrap();
        let d = |n: &str| {
            let p = dirs.path().join(n);
            std::fs::create_dir_all(&p).unwrap();
            p.canonicalize().unwrap()
        };
        let (p, r1, r2, r3) = (d("p"), d("r1"), d("r2"), d("r3"));
        let mut a = serve(e);
        assert_eq!(ask(&mut a, json!({"op": "list"}))["state"], json!("active"));
        assert_eq!(add(&mut a, &p, &r1)["ok"], json!(true));

        let mut b = serve(e);
        let v = ask(&mut b, json!({"op": "list"}));
        assert_eq!(v["error"], json!("registry-contended"), "{v}");
        a.signal(Signal::STOP);
        // The successor gets the registry only once the paused holder's lease expired.
        refresh_until_active(&mut b, TTL * 5);
        let v = add(&mut b, &p, &r2);
        assert_eq!(v["ok"], json!(true), "{v}");
        let successor_token = document(&server)["fencing_token"].clone();

        a.signal(Signal::CONT);
        let v = add(&mut a, &p, &r3);
        assert_eq!(v["ok"], json!(false), "{v}");
        assert_eq!(v["error"], json!("registry-contended"), "{v}");
        assert_eq!(v["state"], json!("contended"), "{v}");
        assert_eq!(v["scope"], json!({}), "{v}");
        let doc = document(&server);
        let roots = &doc["workspaces"][p.to_str().unwrap()]["roots"];
        assert_eq!(
            *roots,
            json!([r1, r2]),
            "no write of the stale holder: {doc}"
        );
        assert_eq!(doc["fencing_token"], successor_token);
        // B hands over cleanly; A's refresh then takes over and sees B's write.
        b.close_stdin();
        assert!(b.wait().success());
        refresh_until_active(&mut a, Duration::from_secs(5));
        let v = ask(&mut a, json!({"op": "list"}));
        assert_eq!(v["scope"][p.to_str().unwrap()], json!([r1, r2]), "{v}");
    }

    #[test]
    fn a_paused_etcd_makes_serve_fail_closed_before_the_ttl_and_refresh_recovers() {
        let Some(server) = EtcdServer::start("etcd registry etcd paused") else {
            return;
        };
        let e = server.endpoint.as_str();
        let dirs = tempfile::tempdir().unwrap();
        let p = dirs.path().canonicalize().unwrap();
        let mut a = serve(e);
        assert_eq!(add(&mut a, &p, &p)["ok"], json!(true));
        server.pause();
        let paused = Instant::now();
        loop {
            let v = ask(&mut a, json!({"op": "list"}));
            if v["state"] == json!("contended") {
                assert_eq!(v["scope"], json!({}));
                assert_eq!(v["error"], json!("registry-contended"));
                break;
            }
            assert!(
                paused.elapsed() < TTL,
                "still active {:?} after etcd stopped",
                paused.elapsed()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(paused.elapsed() < TTL, "{:?}", paused.elapsed());
        server.resume();
        refresh_until_active(&mut a, Duration::from_secs(10));
        let v = ask(&mut a, json!({"op": "list"}));
        assert_eq!(v["scope"][p.to_str().unwrap()], json!([p]), "{v}");
    }

    /// After a short etcd outage (paused past the TTL, resumed), the first `refresh` answers
    /// ok only when it made the serve active again: never `{"ok":true,"state":"contended"}`.
    #[test]
    fn refresh_after_a_short_etcd_outage_says_ok_only_when_active() {
        let Some(server) = EtcdServer::start("etcd registry refresh after outage") else {
            return;
        };
        let e = server.endpoint.as_str();
        let dirs = tempfile::tempdir().unwrap();
        let p = dirs.path().canonicalize().unwrap();
        let mut a = serve(e);
        assert_eq!(add(&mut a, &p, &p)["ok"], json!(true));
        server.pause();
        // The outage itself (not a synchronisation): longer than the TTL, with no request
        // in between, so the serve learns of it only from the refresh.
        std::thread::sleep(TTL + Duration::from_millis(500));
        server.resume();
        let v = ask(&mut a, json!({"op": "refresh"}));
        if v["ok"] == json!(true) {
            assert_eq!(v["state"], json!("active"), "{v}");
        } else {
            assert_eq!(v["error"], json!("registry-contended"), "{v}");
            assert_eq!(v["scope"], json!({}), "{v}");
        }
        refresh_until_active(&mut a, Duration::from_secs(10));
        let v = ask(&mut a, json!({"op": "list"}));
        assert_eq!(v["scope"][p.to_str().unwrap()], json!([p]), "{v}");
    }

    #[test]
    fn one_shot_registry_verbs_on_etcd() {
        let Some(server) = EtcdServer::start("etcd registry one-shot") else {
            return;
        };
        let e = server.endpoint.as_str();
        let dirs = tempfile::tempdir().unwrap();
        let p = dirs.path().canonicalize().unwrap();
        let reg = |args: &[&str]| {
            run(leasehold()
                .args(["registry", "--etcd", e, "--prefix", "t/one"])
                .args(args))
        };
        let ps = p.to_str().unwrap();
        assert_eq!(reg(&["add", ps, ps]).code, 0);
        let out = reg(&["list", "--json"]);
        let v: Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(v, json!({"state": "active", "scope": {ps: [ps]}}));
        let mut holder =
            Proc::spawn(leasehold().args(["registry", "--etcd", e, "--prefix", "t/one", "serve"]));
        assert_eq!(
            ask(&mut holder, json!({"op": "list"}))["state"],
            json!("active")
        );
        let out = reg(&["list", "--json"]);
        assert_eq!(out.code, 75, "{out:?}");
        assert_eq!(out.stdout, "{\"scope\":{},\"state\":\"contended\"}\n");
        assert_one_line_error(&out, "registry is held by another process");
        holder.close_stdin();
        assert!(holder.wait().success());
        assert_eq!(reg(&["remove", ps, ps]).code, 0);
        let out = reg(&["list", "--json"]);
        let v: Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(v["scope"], json!({}));
    }

    /// `torture --etcd-run` on `leasehold run --etcd` itself, paused (SIGSTOP past the TTL,
    /// then SIGCONT) and SIGKILLed, with COMMANDs that leave background children: no two
    /// COMMANDs' trees ever act at once, and the run cleans up after itself. On the run's own
    /// private etcd (`--etcd-server`, as CI runs it), whose server lives in the run directory
    /// until the end: the check that no process of the run is left must not count it.
    #[test]
    fn the_run_torture_pauses_and_kills_run_and_finds_no_violation() {
        if std::process::Command::new("etcd")
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("SKIP: etcd run torture: etcd is not installed (Debian: etcd-server)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let out = run(leasehold()
            .args(["torture", "--etcd-server", "--etcd-run"])
            .args([
                "--workers",
                "3",
                "--kills",
                "6",
                "--seconds",
                "90",
                "--json",
            ])
            .arg("--dir")
            .arg(dir.path()));
        assert_eq!(out.code, 0, "stdout {} stderr {}", out.stdout, out.stderr);
        let v: Value = serde_json::from_str(out.stdout.trim()).expect("one JSON object");
        assert_eq!(v["violations"], json!(0), "{v}");
        let events = v["kills"].as_u64().unwrap() + v["pauses"].as_u64().unwrap();
        assert_eq!(events, 6, "{v}");
        assert!(v["operations"].as_u64().unwrap() > 0, "{v}");
        assert!(v["holders_checked"].as_u64().unwrap() > 0, "{v}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "the run directory is removed"
        );
    }

    /// The run torture's self-check: with a lock name per worker (hidden
    /// `--break-exclusion`) the trees overlap and increments get lost; the run must fail.
    #[test]
    fn the_run_torture_detects_a_broken_exclusion() {
        let Some(server) = EtcdServer::start("etcd run torture self-check") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let out = run(leasehold()
            .args([
                "torture",
                "--etcd",
                &server.endpoint,
                "--etcd-run",
                "--break-exclusion",
            ])
            .args([
                "--workers",
                "3",
                "--kills",
                "4",
                "--seconds",
                "60",
                "--json",
            ])
            .arg("--dir")
            .arg(dir.path()));
        assert_eq!(out.code, 1, "stdout {} stderr {}", out.stdout, out.stderr);
        assert_one_line_error(&out, "violation(s) found");
        testkit::assert_broken_exclusion_found(&out.stdout);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "the evidence is kept"
        );
    }

    /// `https://` endpoints: a real etcd serving TLS with a throwaway CA, trusted the way
    /// users trust a private CA (`SSL_CERT_FILE`), or not trusted at all. (Where TLS is built:
    /// see leasehold's Cargo.toml, `leasehold_etcd_without_tls`.)
    #[cfg(not(leasehold_etcd_without_tls))]
    mod tls {
        use std::path::Path;
        use std::process::Command;
        use std::time::{Duration, Instant};

        use serde_json::{Value, json};

        use super::super::common::leasehold;
        use super::super::support::EtcdServer;
        use super::{HOLD, ask, holder_of, locked};
        use testkit::{Proc, assert_one_line_error, run};

        /// `leasehold` trusting exactly `ca` (as OpenSSL, rustls-native-certs replaces the
        /// system's store with SSL_CERT_FILE), or — `None` — only the system's store.
        fn trusting(ca: Option<&Path>) -> Command {
            let mut c = leasehold();
            c.env_remove("SSL_CERT_FILE").env_remove("SSL_CERT_DIR");
            if let Some(ca) = ca {
                c.env("SSL_CERT_FILE", ca);
            }
            c
        }

        #[test]
        fn run_over_tls_hands_over_between_two_processes_and_status_sees_the_holder() {
            let Some(server) = EtcdServer::start_tls("etcd TLS run", &["127.0.0.1", "localhost"])
            else {
                return;
            };
            let (e, ca) = (server.endpoint.as_str(), server.ca_file());
            assert!(e.starts_with("https://127.0.0.1:"), "{e}");
            let mut a = holder_of(trusting(ca), e, "tjob", HOLD, &[]);
            let (t1, _) = locked(&mut a);

            let out =
                run(trusting(ca).args(["run", "--etcd", e, "--no-wait", "tjob", "--", "true"]));
            assert_eq!(out.code, 75, "{out:?}");
            assert_one_line_error(
                &out,
                &format!("tjob: lock is held by another process (pid {}", a.pid()),
            );
            let out = run(trusting(ca).args(["status", "--etcd", e, "tjob"]));
            assert_eq!(out.code, 0, "{out:?}");
            assert!(
                out.stdout.starts_with(&format!("held by {}@", a.pid())),
                "{out:?}"
            );
            // The certificate names localhost too: a DNS name is checked as well as an IP.
            let by_name = e.replace("127.0.0.1", "localhost");
            let out = run(trusting(ca).args(["status", "--etcd", &by_name, "--json", "tjob"]));
            assert_eq!(out.code, 0, "{out:?}");
            let v: Value = serde_json::from_str(&out.stdout).unwrap();
            assert_eq!(v["held"], json!(true), "{v}");
            assert_eq!(v["holders"][0]["pid"], json!(a.pid()));

            let mut b = holder_of(trusting(ca), e, "tjob", HOLD, &["--timeout", "20"]);
            server.queued("leasehold/lock/tjob/", 2);
            a.send("go");
            assert_eq!(a.line(), "done");
            let done = Instant::now();
            let (t2, _) = locked(&mut b);
            let handover = done.elapsed();
            assert!(
                handover < Duration::from_millis(500),
                "hand-over took {handover:?}"
            );
            assert!(
                t2 > t1,
                "the later grant has the greater token: {t2} vs {t1}"
            );
            assert!(a.wait().success());
            b.send("go");
            assert_eq!(b.line(), "done");
            assert!(b.wait().success());
            let out = run(trusting(ca).args(["status", "--etcd", e, "tjob"]));
            assert_eq!(out.stdout, "free\n", "{out:?}");
        }

        #[test]
        fn an_untrusted_or_misnamed_certificate_is_exit_1_within_the_timeout_saying_what_to_do() {
            let Some(good) = EtcdServer::start_tls("etcd TLS untrusted", &["127.0.0.1"]) else {
                return;
            };
            // A second CA, and a server whose certificate names another host than the URL's.
            let Some(misnamed) =
                EtcdServer::start_tls("etcd TLS misnamed", &["etcd.leasehold.invalid"])
            else {
                return;
            };
            let e = good.endpoint.as_str();
            let cases = [
                // The system's store: it never holds the throwaway CA.
                ("system store", e, None),
                // A CA file, but not the one that signed etcd's certificate.
                ("another CA", e, misnamed.ca_file()),
                // The right CA, but the certificate does not name 127.0.0.1.
                ("wrong name", misnamed.endpoint.as_str(), misnamed.ca_file()),
            ];
            for (case, endpoint, ca) in cases {
                for args in [
                    vec!["run", "--etcd", endpoint, "n", "--", "sh", "-c", "echo ran"],
                    vec!["status", "--etcd", endpoint, "n"],
                    vec!["registry", "--etcd", endpoint, "list", "--json"],
                ] {
                    let started = Instant::now();
                    let out = run(trusting(ca).args(&args));
                    let took = started.elapsed();
                    assert_eq!(out.code, 1, "{case}: {args:?}: {out:?}");
                    assert!(
                        took < Duration::from_secs(5),
                        "{case}: {args:?} took {took:?}"
                    );
                    assert!(!out.stdout.contains("ran"), "{case}: COMMAND ran: {out:?}");
                    assert_one_line_error(&out, &format!("etcd at {endpoint}"));
                    assert_one_line_error(&out, "TLS handshake failed");
                    if case == "wrong name" {
                        assert_one_line_error(&out, "not valid for name \"127.0.0.1\"");
                        assert_one_line_error(&out, "use a URL whose host the certificate names");
                    } else {
                        assert_one_line_error(&out, "set SSL_CERT_FILE to that CA's PEM file");
                    }
                }
            }
            // The same endpoint with its CA trusted works: the failures above were the trust.
            let out = run(trusting(good.ca_file()).args(["status", "--etcd", e, "n"]));
            assert_eq!(out.code, 0, "{out:?}");
        }

        #[test]
        fn registry_verbs_over_tls() {
            let Some(server) = EtcdServer::start_tls("etcd TLS registry", &["127.0.0.1"]) else {
                return;
            };
            let (e, ca) = (server.endpoint.as_str(), server.ca_file());
            let dirs = tempfile::tempdir().unwrap();
            let p = dirs.path().canonicalize().unwrap();
            let ps = p.to_str().unwrap();
            let reg = |args: &[&str]| {
                run(trusting(ca)
                    .args(["registry", "--etcd", e, "--prefix", "t/tls"])
                    .args(args))
            };
            assert_eq!(reg(&["add", ps, ps]).code, 0);
            let out = reg(&["list", "--json"]);
            assert_eq!(out.code, 0, "{out:?}");
            let v: Value = serde_json::from_str(&out.stdout).unwrap();
            assert_eq!(v, json!({"state": "active", "scope": {ps: [ps]}}));
            // A serving holder over TLS excludes a one-shot writer over TLS.
            let mut holder = Proc::spawn(
                trusting(ca).args(["registry", "--etcd", e, "--prefix", "t/tls", "serve"]),
            );
            assert_eq!(
                ask(&mut holder, json!({"op": "list"}))["state"],
                json!("active")
            );
            let out = reg(&["remove", ps, ps]);
            assert_eq!(out.code, 75, "{out:?}");
            assert_one_line_error(&out, "registry is held by another process");
            holder.close_stdin();
            assert!(holder.wait().success());
            assert_eq!(reg(&["remove", ps, ps]).code, 0);
            // What etcd holds, read back with etcdctl over TLS (the helper passes --cacert).
            if let Some(out) = server.etcdctl(&[
                "get",
                "--print-value-only",
                "t/tls/storages/multi_root_workspace",
            ]) {
                assert!(out.status.success(), "{out:?}");
                let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON document");
                assert!(
                    doc.to_string().contains("scope") || doc.is_object(),
                    "{doc}"
                );
            }
        }
    }
}
