//! The stores (`Document`, the registry, the session log, the result store) with a record
//! lease on the two-mount bed: two bindfs (FUSE) mounts of one
//! directory that a kernel lock does not cross (checked first), as two NFS clients with
//! `local_lock=all`. Writers through the two mounts are real processes — this test binary
//! re-run as the worker (its `worker` test, which does nothing unless `SHARED_WORKER` names
//! a role); a pause is a SIGSTOP, synchronisation is lines on pipes, never sleeps.
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use leasehold::patterns::durable::Step;
use leasehold::{Budget, LeaseOptions, SharedMount};
use leasehold_stores::document::{Document, DocumentError, DocumentOptions};
use leasehold_stores::registry::{Registry, RegistryError, RegistryPaths};
use leasehold_stores::results::{ResultError, ResultStore};
use leasehold_stores::session::{SessionError, SessionId, SessionStore};
use rustix::process::Signal;
use testkit::{Bindfs, Proc, stopped, until};

/// The record lease's TTL: what a successor waits past a paused holder.
const TTL: Duration = Duration::from_millis(500);

fn wait() -> Budget {
    Budget::timeout(Duration::from_secs(60))
}

fn record() -> DocumentOptions {
    DocumentOptions::new().on_shared_mount(SharedMount::Record { ttl: TTL })
}

/// The registry whose home is `home`, under a record lease.
fn registry(home: &Path) -> Registry {
    Registry::with_options(
        RegistryPaths::in_home(home, None),
        LeaseOptions::new().on_shared_mount(SharedMount::Record { ttl: TTL }),
    )
}

/// The session store in `dir`, under a record lease.
fn sessions(dir: &Path) -> SessionStore {
    SessionStore::new(dir)
        .with_lease_options(LeaseOptions::new().on_shared_mount(SharedMount::Record { ttl: TTL }))
}

/// The result store in `root`, under a record lease.
fn results(root: &Path) -> ResultStore {
    ResultStore::new(root)
        .with_lease_options(LeaseOptions::new().on_shared_mount(SharedMount::Record { ttl: TTL }))
}

/// A source directory under `dir` holding `who.txt` = `who`, for a result's stage.
fn source(dir: &Path, who: &str) -> PathBuf {
    let src = dir.join(format!("src-{who}"));
    std::fs::create_dir_all(&src).expect("a source");
    std::fs::write(src.join("who.txt"), who).expect("a source file");
    src
}

fn session_id() -> SessionId {
    SessionId::new("s1").expect("a session ID")
}

fn read_line() {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("a line");
}

/// What a worker's write came to, as one handshake line.
fn outcome<E: std::fmt::Display>(r: Result<impl Sized, E>) {
    match r {
        Ok(_) => println!("@ written"),
        Err(e) => println!("@ refused {e}"),
    }
}

/// The worker side: one role per run, named by `SHARED_WORKER`, on the document
/// `SHARED_PATH`. Lines starting with `@ ` on stdout are handshakes.
#[test]
fn worker() {
    let Ok(role) = std::env::var("SHARED_WORKER") else {
        return;
    };
    let path = PathBuf::from(std::env::var("SHARED_PATH").expect("SHARED_PATH"));
    let content = std::env::var("SHARED_CONTENT").unwrap_or_default();
    match role.as_str() {
        // Holds the lease in an edit begun, until a line; then commits.
        "begin" => {
            let doc = Document::open(&path, record());
            let edit = doc.begin(&wait()).expect("begin");
            println!("@ begun");
            read_line();
            outcome::<DocumentError>(edit.commit(content.into_bytes()));
        }
        // An update that stops after its lease was verified, its new version staged, and
        // before the rename, until a line.
        "at-rename" => {
            let doc = Document::open(
                &path,
                record().observe(|step| {
                    if step == Step::Synced {
                        println!("@ staged");
                        read_line();
                    }
                    Ok(())
                }),
            );
            outcome::<DocumentError>(doc.update(&wait(), |_| content.clone().into_bytes()));
        }
        // One update.
        "write" => {
            let doc = Document::open(&path, record());
            outcome::<DocumentError>(doc.update(&wait(), |_| content.clone().into_bytes()));
        }
        // The registry (home `SHARED_PATH`) made active; after a line, adds the directory
        // `SHARED_CONTENT` as a root of itself.
        "registry" => {
            let reg = registry(&path);
            reg.acquire(&wait()).expect("acquire the registry");
            println!("@ active");
            read_line();
            let dir = Path::new(&content);
            outcome::<RegistryError>(reg.add(dir, dir));
        }
        // The registry made active (waiting as long as it takes), then one add.
        "registry-add" => {
            let reg = registry(&path);
            reg.acquire(&wait()).expect("acquire the registry");
            let dir = Path::new(&content);
            outcome::<RegistryError>(reg.add(dir, dir));
            reg.teardown();
        }
        // The session's writer: one record, then after a line another.
        "session" => {
            let mut w = sessions(&path).open_writer(&session_id()).expect("open");
            w.append_json(r#"{"by":"first"}"#).expect("append");
            println!("@ open");
            read_line();
            outcome::<SessionError>(w.append_json(r#"{"by":"late"}"#));
        }
        // Opens the session's writer (waiting out a stale claim) and appends one record.
        "session-append" => {
            let mut w = sessions(&path).open_writer(&session_id()).expect("open");
            outcome::<SessionError>(w.append_json(r#"{"by":"successor"}"#));
        }
        // Stages the result `SHARED_CONTENT` from `SHARED_SOURCE` in the root `SHARED_PATH`;
        // once admitted and the ID found free, before writing, a handshake and a line.
        "stage-held" => {
            let src = PathBuf::from(std::env::var("SHARED_SOURCE").expect("SHARED_SOURCE"));
            let store = results(&path).observe(|_| {
                println!("@ staging");
                read_line();
            });
            outcome::<ResultError>(store.stage(&content, &src, &wait()));
        }
        // Stages the result `SHARED_CONTENT` (waiting as long as it takes).
        "stage" => {
            let src = PathBuf::from(std::env::var("SHARED_SOURCE").expect("SHARED_SOURCE"));
            outcome::<ResultError>(results(&path).stage(&content, &src, &wait()));
        }
        // Stages the result `SHARED_CONTENT` only if its ID is free right now.
        "stage-now" => {
            let src = PathBuf::from(std::env::var("SHARED_SOURCE").expect("SHARED_SOURCE"));
            outcome::<ResultError>(results(&path).stage(&content, &src, &Budget::no_wait()));
        }
        other => panic!("unknown role {other}"),
    }
}

fn spawn(role: &str, path: &Path, content: &str) -> Proc {
    spawn_with(role, path, content, Path::new(""))
}

/// [`spawn`], with a result's source directory.
fn spawn_with(role: &str, path: &Path, content: &str, source: &Path) -> Proc {
    Proc::spawn(
        Command::new(std::env::current_exe().expect("test binary"))
            .args(["worker", "--exact", "--nocapture", "--test-threads=1", "-q"])
            .env("SHARED_WORKER", role)
            .env("SHARED_PATH", path)
            .env("SHARED_CONTENT", content)
            .env("SHARED_SOURCE", source)
            .stderr(Stdio::inherit()),
    )
}

/// `first`, holding through one mount, is SIGSTOPped; the successor `second()` starts,
/// waits out the TTL on its own clock, takes the lease over and writes (`written`); `first`
/// is continued and told to go on: what it says then.
fn paused_while_a_successor_writes(first: &mut Proc, second: impl FnOnce() -> Proc) -> String {
    first.signal(Signal::STOP);
    until("the holder is stopped", || stopped(first.pid()));
    let mut second = second();
    assert_eq!(handshake(&mut second), "written");
    assert!(second.wait().success());
    first.signal(Signal::CONT);
    first.send("go");
    handshake(first)
}

/// The worker's next handshake line (without its `@ ` mark).
fn handshake(p: &mut Proc) -> String {
    p.marked_line()
}

/// The paused holder `first` (through mount A) is SIGSTOPped past the TTL; a successor
/// through mount B updates the document; `first` is let go with `go` and must be refused,
/// naming the lock path, with the successor's version left in place.
fn paused_holder_is_refused(a: &Bindfs, b: &Bindfs, role: &str, ready: &str) {
    let mut first = spawn(role, &a.mnt.join("doc"), "late");
    assert_eq!(handshake(&mut first), ready);
    let said = paused_while_a_successor_writes(&mut first, || {
        spawn("write", &b.mnt.join("doc"), "successor")
    });
    assert!(
        said.starts_with("refused") && said.contains("lease lost"),
        "the paused holder's late write was not refused: {said}"
    );
    assert!(
        said.contains(&a.mnt.join("doc.lock").display().to_string()),
        "the refusal does not name the lock path: {said}"
    );
    assert!(first.wait().success());
    let content = std::fs::read_to_string(a.backing.join("doc")).expect("the document");
    assert_eq!(
        content, "successor",
        "the successor's version did not survive"
    );
}

#[test]
fn a_holder_paused_past_its_ttl_before_its_write_is_refused_and_the_successor_survives() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Some((a, b)) = Bindfs::two_mounts(tmp.path()) else {
        return;
    };
    paused_holder_is_refused(&a, &b, "begin", "begun");
}

/// A holder paused after its lease was verified, with its version staged for the rename:
/// only the fencing token (the successor's, claimed in the fence before it read) stops it.
#[test]
fn a_holder_paused_between_its_verification_and_its_rename_is_fenced_out() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Some((a, b)) = Bindfs::two_mounts(tmp.path()) else {
        return;
    };
    paused_holder_is_refused(&a, &b, "at-rename", "staged");
    let fence = std::fs::read_to_string(a.backing.join("doc.lock.fence")).expect("the fence");
    assert!(fence.trim().parse::<u64>().is_ok(), "{fence:?}");
}

#[test]
fn default_options_on_a_host_only_mount_refuse_naming_the_option() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Some((a, _b)) = Bindfs::two_mounts(tmp.path()) else {
        return;
    };
    let doc = Document::open(a.mnt.join("doc"), DocumentOptions::new());
    let err = doc
        .update(&wait(), |_| b"x".to_vec())
        .expect_err("a host-only mount is refused by default");
    refused_naming_the_option(&err.to_string(), &a.mnt);
    assert!(!a.backing.join("doc").exists());
}

/// The registry's authority through mount A is SIGSTOPped past the TTL while active; an
/// authority through mount B takes over and adds a root; A's add once resumed is refused and
/// the document holds B's root, not A's.
#[test]
fn a_registry_paused_past_its_ttl_is_refused_and_its_successors_write_survives() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Some((a, b)) = Bindfs::two_mounts(tmp.path()) else {
        return;
    };
    let (late, kept) = (tmp.path().join("late"), tmp.path().join("kept"));
    for d in [&late, &kept] {
        std::fs::create_dir(d).expect("a root");
    }
    let (late, kept) = (late.canonicalize().unwrap(), kept.canonicalize().unwrap());
    let mut first = spawn("registry", &a.mnt.join("home"), late.to_str().unwrap());
    assert_eq!(handshake(&mut first), "active");
    let said = paused_while_a_successor_writes(&mut first, || {
        spawn("registry-add", &b.mnt.join("home"), kept.to_str().unwrap())
    });
    assert!(
        said.starts_with("refused"),
        "the paused authority wrote: {said}"
    );
    assert!(first.wait().success());
    let paths = RegistryPaths::in_home(&a.backing.join("home"), None);
    let doc = std::fs::read_to_string(&paths.document).expect("the registry document");
    assert!(doc.contains(kept.to_str().unwrap()), "{doc}");
    assert!(!doc.contains(late.to_str().unwrap()), "{doc}");
    assert!(doc.contains("fencing_token"), "{doc}");
}

/// A session's writer through mount A is SIGSTOPped past the TTL; a writer through mount B
/// takes the session over and appends; A's append once resumed is refused, and the log holds
/// A's first record and B's, never A's late one.
#[test]
fn a_session_writer_paused_past_its_ttl_is_refused_and_its_successor_appends() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Some((a, b)) = Bindfs::two_mounts(tmp.path()) else {
        return;
    };
    let mut first = spawn("session", &a.mnt.join("sessions"), "");
    assert_eq!(handshake(&mut first), "open");
    let said = paused_while_a_successor_writes(&mut first, || {
        spawn("session-append", &b.mnt.join("sessions"), "")
    });
    assert!(
        said.starts_with("refused") && said.contains("lease lost"),
        "the paused writer appended: {said}"
    );
    assert!(first.wait().success());
    let log = std::fs::read_to_string(a.backing.join("sessions/s1/session.jsonl")).expect("log");
    assert_eq!(log, "{\"by\":\"first\"}\n{\"by\":\"successor\"}\n");
}

/// The record lease chosen on a local disk changes nothing but the wait: the registry and
/// the session log take the kernel's lease there (no fence, no token stamped), and a second
/// session writer is still refused as owned.
#[test]
fn the_record_option_on_a_local_disk_takes_the_kernel_lease() {
    let tmp = tempfile::tempdir().expect("tmp");
    let home = tmp.path().join("home");
    let root = tmp.path().join("root");
    std::fs::create_dir(&root).expect("a root");
    let root = root.canonicalize().unwrap();
    let reg = registry(&home);
    reg.acquire(&Budget::no_wait())
        .expect("acquire on a local disk");
    reg.add(&root, &root).expect("add");
    reg.teardown();
    let paths = RegistryPaths::in_home(&home, None);
    let doc = std::fs::read_to_string(&paths.document).expect("the registry document");
    assert!(doc.contains(root.to_str().unwrap()), "{doc}");
    assert!(!doc.contains("fencing_token"), "{doc}");
    let mut fence = paths.lease.as_os_str().to_owned();
    fence.push(".fence");
    assert!(
        !Path::new(&fence).exists(),
        "no fence without a record lease"
    );

    let store = sessions(&tmp.path().join("sessions"));
    let mut first = store.open_writer(&session_id()).expect("open");
    first.append_json(r#"{"n":1}"#).expect("append");
    match store.open_writer(&session_id()) {
        Err(SessionError::SessionAlreadyOwned { .. }) => {}
        other => panic!("a second writer was not refused as owned: {other:?}"),
    }
    first.append_json(r#"{"n":2}"#).expect("append");
}

/// Two processes through the two mounts: one holds the result ID `k1` in its stage; the
/// other, through the other mount, finds `k1` busy (nothing staged) and stages `k2` meanwhile;
/// the first then stages `k1`.
#[test]
fn result_operations_through_two_mounts_exclude_each_other_per_id() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Some((a, b)) = Bindfs::two_mounts(tmp.path()) else {
        return;
    };
    let (src_a, src_b) = (source(tmp.path(), "a"), source(tmp.path(), "b"));
    let mut first = spawn_with("stage-held", &a.mnt.join("root"), "k1", &src_a);
    assert_eq!(handshake(&mut first), "staging");
    let mut busy = spawn_with("stage-now", &b.mnt.join("root"), "k1", &src_b);
    let said = handshake(&mut busy);
    assert!(
        said.starts_with("refused") && said.contains("busy"),
        "a stage through the other mount was not kept out of the held ID: {said}"
    );
    assert!(busy.wait().success());
    let mut other = spawn_with("stage-now", &b.mnt.join("root"), "k2", &src_b);
    assert_eq!(handshake(&mut other), "written", "another ID was held up");
    assert!(other.wait().success());
    first.send("go");
    assert_eq!(handshake(&mut first), "written");
    assert!(first.wait().success());
    let who = |id: &str| {
        std::fs::read_to_string(
            a.backing
                .join("root/results")
                .join(id)
                .join("files/who.txt"),
        )
    };
    assert_eq!(who("k1").expect("k1"), "a");
    assert_eq!(who("k2").expect("k2"), "b");
}

/// A stage holding the ID through mount A is SIGSTOPped past the TTL after it found the ID
/// free; a stage through mount B takes the ID over and stages it; A's write once resumed is
/// refused (lease lost, naming the record lease's lock path) and B's result stays.
#[test]
fn a_result_stage_paused_past_its_ttl_is_refused_and_its_successors_result_survives() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Some((a, b)) = Bindfs::two_mounts(tmp.path()) else {
        return;
    };
    let (src_a, src_b) = (source(tmp.path(), "a"), source(tmp.path(), "b"));
    let mut first = spawn_with("stage-held", &a.mnt.join("root"), "r1", &src_a);
    assert_eq!(handshake(&mut first), "staging");
    let said = paused_while_a_successor_writes(&mut first, || {
        spawn_with("stage", &b.mnt.join("root"), "r1", &src_b)
    });
    assert!(
        said.starts_with("refused") && said.contains("lease lost"),
        "the paused stage wrote: {said}"
    );
    let record_lock = results(&a.mnt.join("root"))
        .lock_path("r1")
        .to_string_lossy()
        .replace(".result-locks-v1", ".result-records-v1");
    assert!(
        said.contains(&record_lock),
        "the refusal does not name the lock path: {said}"
    );
    assert!(first.wait().success());
    let root = a.backing.join("root/results");
    let who = std::fs::read_to_string(root.join("r1/files/who.txt")).expect("r1");
    assert_eq!(who, "b", "the successor's result did not survive");
    let names: Vec<_> = std::fs::read_dir(&root)
        .expect("results")
        .map(|e| e.expect("an entry").file_name())
        .collect();
    assert_eq!(names, ["r1"], "the paused stage left something behind");
}

#[test]
fn the_result_store_with_default_options_on_a_host_only_mount_refuses_naming_the_option() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Some((a, _b)) = Bindfs::two_mounts(tmp.path()) else {
        return;
    };
    let src = source(tmp.path(), "a");
    let err = ResultStore::new(a.mnt.join("root"))
        .stage("r1", &src, &wait())
        .expect_err("a host-only mount is refused by default");
    refused_naming_the_option(&err.to_string(), &a.mnt);
    assert!(!a.backing.join("root/results/r1").exists());
}

/// A store's refusal on a host-only mount names the option that chooses the record lease
/// and the path on `mnt`.
fn refused_naming_the_option(text: &str, mnt: &std::path::Path) {
    assert!(text.contains("on_shared_mount"), "{text}");
    assert!(text.contains(&mnt.display().to_string()), "{text}");
}

/// On a root whose IDs take record leases, gc collects nothing and says why.
#[test]
fn result_gc_under_record_leases_refuses_and_keeps_every_lock_file() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Some((a, _b)) = Bindfs::two_mounts(tmp.path()) else {
        return;
    };
    let src = source(tmp.path(), "a");
    let store = results(&a.mnt.join("root"));
    store.stage("r1", &src, &wait()).expect("stage");
    store.discard("r1", &wait()).expect("discard");
    let err = store
        .gc(Duration::ZERO)
        .expect_err("gc on a host-only mount");
    assert!(err.to_string().contains("each host"), "{err}");
    assert!(store.lock_path("r1").exists(), "gc removed a lock file");
}

/// The async face takes the same record lease: a stage through mount A while the ID is held
/// through mount B is busy, and once B has released, it stages under a token claimed in the
/// ID's fence.
#[cfg(feature = "tokio")]
#[tokio::test(flavor = "current_thread")]
async fn an_async_result_stage_takes_the_ids_record_lease() {
    let tmp = tempfile::tempdir().expect("tmp");
    let Some((a, b)) = Bindfs::two_mounts(tmp.path()) else {
        return;
    };
    let (src_a, src_b) = (source(tmp.path(), "a"), source(tmp.path(), "b"));
    let mut holder = spawn_with("stage-held", &b.mnt.join("root"), "r1", &src_b);
    assert_eq!(handshake(&mut holder), "staging");
    let store = results(&a.mnt.join("root"));
    match store.stage_async("r1", &src_a, Budget::no_wait()).await {
        Err(ResultError::Busy { .. }) => {}
        other => panic!("an async stage of an ID held through the other mount: {other:?}"),
    }
    holder.send("go");
    assert_eq!(handshake(&mut holder), "written");
    assert!(holder.wait().success());
    store.discard_async("r1", wait()).await.expect("discard");
    store
        .stage_async("r1", &src_a, wait())
        .await
        .expect("stage");
    let fence = results(&a.backing.join("root"))
        .lock_path("r1")
        .to_string_lossy()
        .replace(".result-locks-v1", ".result-records-v1")
        + ".fence";
    let token = std::fs::read_to_string(&fence).expect("the fence");
    assert!(
        token.trim().parse::<u64>().is_ok_and(|t| t >= 3),
        "{token:?}"
    );
}
