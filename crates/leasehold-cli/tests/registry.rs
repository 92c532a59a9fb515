//! Black-box tests of `leasehold registry`: real processes, synchronised through the serve
//! protocol's request/answer lines (an answer is the handshake), never through sleeps.
#![cfg(unix)] // POSIX processes, signals and lock files; Windows: crates/leasehold/tests/windows.rs

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{gave_up_after, hold, leasehold, pid_note, release, with_pid};
use serde_json::{Value, json};
use testkit::{Proc, assert_one_line_error, run};

struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        Home {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }
    /// A fresh directory, canonicalized (as the registry stores it).
    fn dir(&self, name: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::create_dir_all(&p).unwrap();
        p.canonicalize().unwrap().to_str().unwrap().to_string()
    }
    fn document(&self) -> PathBuf {
        self.home().join("storages/multi_root_workspace.json")
    }
    /// `leasehold registry --home HOME ARGS...`
    fn reg(&self, args: &[&str]) -> Command {
        let mut c = leasehold();
        c.arg("registry").arg("--home").arg(self.home()).args(args);
        c
    }
    fn serve(&self) -> Server {
        Server(Proc::spawn(&mut self.reg(&["serve"])))
    }
    fn list_json(&self) -> Value {
        let out = run(&mut self.reg(&["list", "--json"]));
        assert_eq!(out.code, 0, "{out:?}");
        serde_json::from_str(out.stdout.trim()).unwrap()
    }
}

/// A running `leasehold registry serve`.
struct Server(Proc);

/// A serving authority on a fresh home that has been sent `n` add requests at once (one
/// primary, the `n` roots returned in order), none of whose answers has been read yet.
fn serve_with_queued_adds(n: usize) -> (Home, String, Vec<String>, Server) {
    let h = Home::new();
    let p = h.dir("p");
    let roots: Vec<String> = (0..n).map(|i| h.dir(&format!("r{i}"))).collect();
    let mut a = h.serve();
    assert_eq!(a.list()["ok"], true);
    let batch: String = roots
        .iter()
        .map(|r| format!("{}\n", json!({"op": "add", "primary": &p, "root": r})))
        .collect();
    a.0.send(batch.trim_end());
    (h, p, roots, a)
}

impl Server {
    /// Sends one request and reads its one-line answer.
    fn ask(&mut self, request: Value) -> Value {
        self.0.send(&request.to_string());
        let line = self.0.line();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
    }
    fn list(&mut self) -> Value {
        self.ask(json!({"op": "list"}))
    }
    fn add(&mut self, p: &str, r: &str) -> Value {
        self.ask(json!({"op": "add", "primary": p, "root": r}))
    }
    fn refresh(&mut self) -> Value {
        self.ask(json!({"op": "refresh"}))
    }
    /// EOF on stdin: the server must tear down and exit 0 promptly.
    fn finish(mut self) {
        self.0.close_stdin();
        let st = self.0.wait_timeout(Duration::from_secs(5)).expect("exits");
        assert_eq!(st.code(), Some(0));
    }
}

fn assert_refused(answer: &Value, state: &str, error: &str) {
    assert_eq!(answer["ok"], false, "{answer}");
    assert_eq!(answer["state"], state, "{answer}");
    assert_eq!(answer["error"], error, "{answer}");
    assert_eq!(answer["scope"], json!({}), "fail closed: {answer}");
    assert!(answer["message"].is_string(), "{answer}");
}

#[test]
fn one_shot_add_list_remove() {
    let h = Home::new();
    let (p, r) = (h.dir("p"), h.dir("r"));
    let out = run(&mut h.reg(&["add", &p, &r]));
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    assert_eq!(
        run(&mut h.reg(&["add", &p, &r])).code,
        0,
        "re-adding is fine"
    );
    assert_eq!(
        h.list_json(),
        json!({"state": "active", "scope": {&p: [&r]}})
    );
    let text = run(&mut h.reg(&["list"]));
    assert_eq!(text.code, 0);
    assert!(
        text.stdout.contains(&p) && text.stdout.contains(&r),
        "{text:?}"
    );
    assert_eq!(run(&mut h.reg(&["remove", &p, &r])).code, 0);
    assert_eq!(h.list_json(), json!({"state": "active", "scope": {}}));
}

#[test]
fn options_may_follow_the_verb_and_home_defaults_to_leasehold_home() {
    let h = Home::new();
    let (p, r) = (h.dir("p"), h.dir("r"));
    let out = run(leasehold()
        .env("LEASEHOLD_HOME", h.home())
        .args(["registry", "add", &p, &r]));
    assert_eq!(out.code, 0, "{out:?}");
    assert!(h.document().is_file());
    let out = run(leasehold()
        .args(["registry", "list", "--json", "--home"])
        .arg(h.home()));
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains(&r));
}

#[test]
fn add_of_what_is_not_an_existing_directory_is_invalid_root() {
    let h = Home::new();
    let p = h.dir("p");
    let file = h.dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let missing = h.dir.path().join("missing");
    for (a, b) in [
        (p.as_str(), missing.to_str().unwrap()),
        (missing.to_str().unwrap(), p.as_str()),
        (p.as_str(), file.to_str().unwrap()),
    ] {
        let out = run(&mut h.reg(&["add", a, b]));
        assert_eq!(out.code, 2, "{out:?}");
        assert_one_line_error(&out, "invalid-root");
    }
    assert!(!h.document().exists(), "nothing written");
}

#[test]
fn remove_takes_deleted_directories_lexically_and_is_idempotent() {
    let h = Home::new();
    let (p, r1, r2) = (h.dir("p"), h.dir("r1"), h.dir("r2"));
    assert_eq!(run(&mut h.reg(&["add", &p, &r1])).code, 0);
    assert_eq!(run(&mut h.reg(&["add", &p, &r2])).code, 0);
    std::fs::remove_dir(&r1).unwrap();
    let odd = format!("{r2}/../r1/.");
    let out = run(&mut h.reg(&["remove", &p, &odd]));
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(h.list_json()["scope"], json!({&p: [&r2]}));
    assert_eq!(run(&mut h.reg(&["remove", &p, &r1])).code, 0, "idempotent");
    std::fs::remove_dir(&r2).unwrap();
    std::fs::remove_dir(&p).unwrap();
    assert_eq!(run(&mut h.reg(&["remove", &p, &r2])).code, 0);
    assert_eq!(h.list_json()["scope"], json!({}), "empty primary dropped");
}

#[test]
fn one_shot_while_held_exits_75_naming_the_holder_pid() {
    let h = Home::new();
    let (p, r) = (h.dir("p"), h.dir("r"));
    let mut a = h.serve();
    assert_eq!(a.list()["state"], "active");
    let pid = with_pid(a.0.pid());

    let out = run(&mut h.reg(&["add", &p, &r]));
    assert_eq!(out.code, 75, "{out:?}");
    assert_one_line_error(&out, &format!("registry is held by another process{pid}"));
    assert_one_line_error(&out, "did not wait (wait for it with --timeout SECS)");

    let out = run(&mut h.reg(&["list", "--json"]));
    assert_eq!(out.code, 75, "{out:?}");
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v, json!({"state": "contended", "scope": {}}));
    assert_one_line_error(&out, &pid);

    let out = run(&mut h.reg(&["--timeout", "0.2", "remove", &p, &r]));
    assert_eq!(out.code, 75, "a bounded wait gives up: {out:?}");
    assert_one_line_error(
        &out,
        &format!("registry is held by another process{pid}; gave up after "),
    );
    let waited = gave_up_after(out.stderr.trim_end());
    assert!(waited.is_some_and(|s| (0.2..1.0).contains(&s)), "{out:?}");
    a.finish();
    assert_eq!(run(&mut h.reg(&["--timeout", "5", "add", &p, &r])).code, 0);
}

#[test]
fn a_configured_lease_path_is_the_lease() {
    let h = Home::new();
    let (p, r) = (h.dir("p"), h.dir("r"));
    let lock = h.dir.path().join("elsewhere.lock");
    let holder = hold(&lock);
    let mut cmd = h.reg(&["add", &p, &r]);
    cmd.arg("--lease-path").arg(&lock);
    let out = run(&mut cmd);
    assert_eq!(out.code, 75, "{out:?}");
    assert!(!h.home().join("storages/multi_root_workspace.lock").exists());
    release(holder);
    let out = run(&mut cmd);
    assert_eq!(out.code, 0, "{out:?}");
}

#[test]
fn a_contended_server_fails_closed_and_refresh_takes_over_after_a_clean_exit() {
    let h = Home::new();
    let (p, r1, r2) = (h.dir("p"), h.dir("r1"), h.dir("r2"));
    let mut a = h.serve();
    assert_eq!(a.add(&p, &r1)["ok"], true);

    let mut b = h.serve();
    for answer in [b.list(), b.add(&p, &r2), b.refresh()] {
        assert_refused(&answer, "contended", "registry-contended");
        let msg = answer["message"].as_str().unwrap();
        assert!(msg.contains(&pid_note(a.0.pid())), "{msg}");
    }
    let removed = b.ask(json!({"op": "remove", "primary": &p, "root": &r1}));
    assert_refused(&removed, "contended", "registry-contended");

    let last = a.add(&p, &r2);
    assert_eq!(last["scope"], json!({&p: [&r1, &r2]}), "{last}");
    a.finish();
    let took = b.refresh();
    assert_eq!(took["ok"], true, "{took}");
    assert_eq!(took["state"], "active");
    assert_eq!(
        took["scope"],
        json!({&p: [&r1, &r2]}),
        "the last durable write"
    );
    assert_eq!(b.list()["ok"], true);
    b.finish();
}

#[test]
fn an_acknowledged_write_survives_sigkill_and_the_successor_reads_it_back() {
    let h = Home::new();
    let (p, r) = (h.dir("p"), h.dir("r"));
    let mut a = h.serve();
    assert_eq!(a.list()["state"], "active"); // a holds the lease before b starts
    let mut b = h.serve();
    assert_eq!(b.list()["state"], "contended");
    assert_eq!(a.add(&p, &r)["ok"], true); // acknowledged
    a.0.kill_group(); // SIGKILL right after the acknowledgement
    let took = b.refresh();
    assert_eq!(took["ok"], true, "{took}");
    assert_eq!(took["scope"], json!({&p: [&r]}));
    b.finish();
}

#[test]
fn sigterm_drains_closes_and_releases_then_exits_0() {
    let h = Home::new();
    let (p, r) = (h.dir("p"), h.dir("r"));
    let mut a = h.serve();
    assert_eq!(a.add(&p, &r)["ok"], true);
    a.0.signal(rustix::process::Signal::TERM);
    let st =
        a.0.wait_timeout(Duration::from_secs(5))
            .expect("exits promptly");
    assert_eq!(st.code(), Some(0));
    assert_eq!(
        h.list_json()["scope"],
        json!({&p: [&r]}),
        "released and durable"
    );
}

#[test]
fn sigkill_in_the_middle_of_a_stream_of_writes_never_tears_the_document() {
    // Queue every request at once, read some answers, then kill while writes are running.
    let (h, p, roots, mut a) = serve_with_queued_adds(120);
    let acked = 40;
    for _ in 0..acked {
        let answer: Value = serde_json::from_str(&a.0.line()).unwrap();
        assert_eq!(answer["ok"], true, "{answer}");
    }
    a.0.kill_group();
    let v = h.list_json(); // parses, or this would be storage-failed (exit 1)
    let stored = v["scope"][&p].as_array().unwrap().clone();
    assert!(stored.len() >= acked, "{} < {acked}", stored.len());
    for (i, r) in stored.iter().enumerate() {
        assert_eq!(r, &json!(roots[i]), "a prefix of the requests, in order");
    }
}

#[test]
fn a_corrupt_document_is_storage_failed_and_left_byte_for_byte() {
    let h = Home::new();
    let (p, r) = (h.dir("p"), h.dir("r"));
    std::fs::create_dir_all(h.document().parent().unwrap()).unwrap();
    let corrupt = b"{\"workspaces\": {\"/x\": {\"roots\": []}} trailing garbage";
    std::fs::write(h.document(), corrupt).unwrap();

    let out = run(&mut h.reg(&["add", &p, &r]));
    assert_eq!(out.code, 1, "{out:?}");
    assert_one_line_error(&out, "multi_root_workspace.json");
    let out = run(&mut h.reg(&["list", "--json"]));
    assert_eq!(out.code, 1, "{out:?}");

    let mut a = h.serve();
    for answer in [a.list(), a.add(&p, &r)] {
        assert_refused(&answer, "storage-failed", "storage-failed");
        assert!(
            answer["message"]
                .as_str()
                .unwrap()
                .contains("does not parse")
        );
    }
    // storage-failed keeps the lease.
    assert_eq!(run(&mut h.reg(&["list"])).code, 75);
    assert_eq!(std::fs::read(h.document()).unwrap(), corrupt);

    std::fs::write(h.document(), b"{\"workspaces\": {}}").unwrap();
    let fixed = a.refresh();
    assert_eq!(fixed["ok"], true, "{fixed}");
    assert_eq!(fixed["state"], "active");
    assert_eq!(a.add(&p, &r)["scope"], json!({&p: [&r]}));
    a.finish();
}

#[test]
fn serve_answers_every_request_with_exactly_one_line() {
    let h = Home::new();
    let (p, r) = (h.dir("p"), h.dir("r"));
    let mut a = h.serve();
    let missing = h.dir.path().join("missing");
    let bad = a.add(&p, missing.to_str().unwrap());
    assert_eq!(bad["ok"], false);
    assert_eq!(bad["error"], "invalid-root");
    assert_eq!(bad["state"], "active");
    let no_root = a.ask(json!({"op": "add", "primary": &p}));
    assert_eq!(no_root["error"], "invalid-root");
    let garbage = a.ask(json!("not an object"));
    assert_eq!(garbage["ok"], false);
    let ok = a.add(&p, &r);
    assert_eq!(
        ok,
        json!({"ok": true, "state": "active", "scope": {&p: [&r]}})
    );
    let again = a.refresh();
    assert_eq!(
        again,
        json!({"ok": true, "state": "active", "scope": {&p: [&r]}})
    );
    a.finish();
    assert!(Path::new(&h.document()).is_file());
}

#[test]
fn sigterm_in_the_middle_of_a_stream_of_writes_finishes_the_write_and_exits_0() {
    let (h, p, _roots, mut a) = serve_with_queued_adds(120);
    let first: Value = serde_json::from_str(&a.0.line()).unwrap();
    assert_eq!(first["ok"], true);
    a.0.signal(rustix::process::Signal::TERM);
    // Every answer it still gives is an acknowledgement that must be durable.
    let mut acked = 1;
    loop {
        let line = a.0.line();
        if line.is_empty() {
            break; // EOF: the server exited
        }
        let answer: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(answer["ok"], true, "{answer}");
        acked += 1;
    }
    let st =
        a.0.wait_timeout(Duration::from_secs(5))
            .expect("exits promptly");
    assert_eq!(
        st.code(),
        Some(0),
        "SIGTERM is an orderly teardown, not a kill"
    );
    let stored = h.list_json()["scope"][&p].as_array().unwrap().clone();
    assert_eq!(stored.len(), acked, "acknowledged exactly what it wrote");
}

#[test]
fn an_unusable_lease_path_is_refused_with_status_2() {
    let h = Home::new();
    let (p, r) = (h.dir("p"), h.dir("r"));
    let not_a_file = h.dir("a-directory");
    let mut cmd = h.reg(&["add", &p, &r, "--lease-path", &not_a_file]);
    let out = run(&mut cmd);
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, &not_a_file);
    assert!(!h.document().exists(), "no lease, no store");
}

/// A one-shot verb waiting longer than about a second says so once, naming the holder, and
/// takes over as soon as the holder hands over.
#[test]
fn a_waiting_one_shot_says_so_and_takes_over_after_the_holder_exits() {
    let h = Home::new();
    let (p, r) = (h.dir("p"), h.dir("r"));
    let mut a = h.serve();
    assert_eq!(a.add(&p, &r)["ok"], true);
    let mut cmd = h.reg(&["--timeout", "30", "list", "--json"]);
    cmd.stderr(std::process::Stdio::piped());
    let mut waiter = Proc::spawn(&mut cmd);
    let mut notice = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(waiter.child.stderr.take().unwrap()),
        &mut notice,
    )
    .unwrap();
    assert!(
        notice.starts_with("leasehold: waiting for the registry"),
        "{notice:?}"
    );
    assert!(notice.contains(&pid_note(a.0.pid())), "{notice:?}");
    a.finish();
    let answer: Value = serde_json::from_str(&waiter.line()).unwrap();
    assert_eq!(answer, json!({"state": "active", "scope": {&p: [&r]}}));
    assert_eq!(waiter.wait().code(), Some(0));
}

/// A request line of exactly 1 MiB is read as a request; one byte more is `invalid-request`,
/// wherever the reads split it (the newline may arrive in the chunk that passed the limit).
#[test]
fn serve_reads_a_line_of_1_mib_and_refuses_a_longer_one() {
    const MIB: usize = 1 << 20;
    let h = Home::new();
    let mut a = h.serve();
    // `{"op":"list","pad":"xx…"}` padded to `len` bytes: a valid request with an unknown key.
    let padded = |len: usize| {
        let frame = r#"{"op":"list","pad":""}"#.len();
        format!(r#"{{"op":"list","pad":"{}"}}"#, "x".repeat(len - frame))
    };
    for over in [1, 100, 65_000] {
        a.0.send(&padded(MIB + over));
        let answer: Value = serde_json::from_str(&a.0.line()).unwrap();
        assert_eq!(answer["ok"], false, "{} bytes: {answer}", MIB + over);
        assert_eq!(answer["error"], "invalid-request", "{answer}");
        assert!(
            answer["message"].as_str().unwrap().contains("at most"),
            "{answer}"
        );
    }
    let exact = padded(MIB);
    assert_eq!(exact.len(), MIB);
    a.0.send(&exact);
    let answer: Value = serde_json::from_str(&a.0.line()).unwrap();
    assert_eq!(answer["ok"], true, "exactly 1 MiB is a request: {answer}");
    a.finish();
}
