//! `--etcd` (cli-contract v1.3, "etcd") through the real binary, against a real single-node
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
    let out = run(leasehold().args(["run", "--ttl", "5", "/tmp/x.lock", "--", "true"]));
    assert_eq!(out.code, 2, "--ttl without --etcd: {out:?}");
    if cfg!(feature = "etcd") {
        let out = run(leasehold().args(["run", "--etcd", &e, "a/b", "--", "true"]));
        assert_eq!(out.code, 2, "a name with a slash: {out:?}");
        assert_one_line_error(&out, "a/b");
    }
}

#[cfg(feature = "etcd")]
#[path = "../../leasehold/tests/support/etcd.rs"]
mod support;

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
        Proc::spawn(
            leasehold()
                .args(["run", "--etcd", e, "--ttl", "2"])
                .args(wait)
                .args([name, "--", "sh", "-c", script]),
        )
    }

    /// A COMMAND that says `locked TOKEN PID`, waits for a line, says `done` and exits.
    const HOLD: &str = "echo locked $LEASEHOLD_FENCING_TOKEN $$; read _x; echo done";

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

    #[test]
    fn sigkill_of_the_holder_kills_its_command_and_a_successor_follows_within_ttl() {
        let Some(server) = EtcdServer::start("etcd run sigkill") else {
            return;
        };
        let e = server.endpoint.as_str();
        let mut a = holder(
            e,
            "k",
            "echo locked $LEASEHOLD_FENCING_TOKEN $$; exec sleep 600",
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
        let script = "trap 'echo term; exit 3' TERM; echo locked $LEASEHOLD_FENCING_TOKEN $$; \
                      while :; do sleep 0.05; done";
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
        let mut err = String::new();
        std::io::Read::read_to_string(a.child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert_eq!(err.lines().count(), 1, "{err:?}");
        assert!(err.starts_with("leasehold: x: lease lost"), "{err:?}");
    }

    #[test]
    fn a_command_that_ignores_sigterm_is_killed_five_seconds_later() {
        let Some(server) = EtcdServer::start("etcd run sigkill after sigterm") else {
            return;
        };
        let e = server.endpoint.as_str();
        let script = "trap '' TERM; echo locked $LEASEHOLD_FENCING_TOKEN $$; \
                      while :; do sleep 0.05; done";
        let mut a = holder(e, "i", script, &[]);
        let (_, command) = locked(&mut a);
        server.pause();
        let paused = Instant::now();
        let status = a
            .wait_timeout(TTL + Duration::from_secs(9))
            .expect("run exits");
        let took = paused.elapsed();
        server.resume();
        assert_eq!(status.code(), Some(1));
        assert!(!alive(command), "COMMAND survived");
        assert!(
            took >= Duration::from_secs(5),
            "SIGKILL came only {took:?} after the pause"
        );
        assert!(took < TTL + Duration::from_secs(6), "{took:?}");
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
            "echo locked $LEASEHOLD_FENCING_TOKEN $$; exec sleep 600",
            &[],
        );
        let (t1, command) = locked(&mut a);
        server.restart();
        let check =
            format!("if kill -0 {command} 2>/dev/null; then echo overlap; else echo alone; fi");
        let out = run(leasehold().args([
            "run",
            "--etcd",
            &e,
            "--ttl",
            "2",
            "--timeout",
            "8",
            "r",
            "--",
            "sh",
            "-c",
            &check,
        ]));
        match out.code {
            // The first holder failed closed (its COMMAND was stopped) and the lock moved on.
            0 => assert_eq!(out.stdout, "alone\n", "{out:?}"),
            // The first holder reconnected in time and still holds: its COMMAND must live.
            75 => assert!(alive(command), "lock held by nobody alive: {out:?}"),
            _ => panic!("{out:?}"),
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
}
