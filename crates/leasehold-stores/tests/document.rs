//! `Document` across real processes: this test binary re-runs itself as the worker (its
//! `worker` test, which does nothing unless `DOCUMENT_WORKER` names a role), and workers
//! synchronise with the test through lines on their stdin and stdout — never sleeps.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use leasehold::patterns::durable::Step;
use leasehold::{Budget, Classify, ErrorClass};
use leasehold_stores::document::{Document, DocumentError, DocumentOptions, Version};
use testkit::{FlockHolder, Proc};

const WORKERS: usize = 4;
const INCREMENTS: u32 = 200;

fn wait() -> Budget {
    Budget::timeout(Duration::from_secs(60))
}

fn counter(content: Option<&[u8]>) -> u64 {
    content.map_or(0, |c| {
        std::str::from_utf8(c)
            .expect("utf-8")
            .trim()
            .parse()
            .expect("a counter")
    })
}

/// The worker side: one role per run, named by `DOCUMENT_WORKER`. Lines starting with `@ ` on
/// stdout are handshakes (libtest prints its own lines around them).
#[test]
fn worker() {
    let Ok(role) = std::env::var("DOCUMENT_WORKER") else {
        return;
    };
    let path = PathBuf::from(std::env::var("DOCUMENT_PATH").expect("DOCUMENT_PATH"));
    let n: u32 = std::env::var("DOCUMENT_N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let doc = Document::open(&path, DocumentOptions::new());
    let stdin = std::io::stdin();
    let mut go = String::new();
    match role.as_str() {
        // `n` increments under the document's lease, after a `go` line.
        "increment" => {
            println!("@ ready");
            stdin.read_line(&mut go).expect("go");
            for _ in 0..n {
                doc.update(&wait(), |cur| (counter(cur) + 1).to_string().into_bytes())
                    .expect("update");
            }
        }
        // The negative control: the same increments as a plain read–modify–write, each
        // write durable and atomic (the library's rewrite), but without the lease.
        "plain" => {
            println!("@ ready");
            stdin.read_line(&mut go).expect("go");
            for _ in 0..n {
                let cur = std::fs::read(&path).ok();
                let next = (counter(cur.as_deref()) + 1).to_string();
                leasehold::patterns::durable::replace_file(&path, next.as_bytes())
                    .expect("replace");
            }
        }
        // `n` increments, each announced with its version and acknowledged before the next.
        "paced" => {
            for _ in 0..n {
                let snap = doc
                    .update(&wait(), |cur| (counter(cur) + 1).to_string().into_bytes())
                    .expect("update");
                println!("@ {}", snap.version);
                stdin.read_line(&mut go).expect("next");
                go.clear();
            }
        }
        // An update whose closure announces itself and then waits forever (until killed).
        "hang" => {
            let _ = doc.update(&wait(), |cur| {
                println!("@ in update");
                let mut line = String::new();
                let _ = std::io::stdin().read_line(&mut line);
                let _ = std::io::stdin().read_line(&mut line);
                (counter(cur) + 1000).to_string().into_bytes()
            });
        }
        // An increment whose durable write stops after step `DOCUMENT_AT` (`synced`: the
        // temporary is fsynced, not renamed; `renamed`: the new version is in place, the
        // directory not yet fsynced), announced, until killed.
        "stall" => {
            let at = match std::env::var("DOCUMENT_AT").as_deref() {
                Ok("synced") => Step::Synced,
                Ok("renamed") => Step::Renamed,
                other => panic!("DOCUMENT_AT {other:?}"),
            };
            let doc = Document::open(
                &path,
                DocumentOptions::new().observe(move |step| {
                    if step == at {
                        println!("@ stalled");
                        let mut line = String::new();
                        let _ = std::io::stdin().read_line(&mut line);
                        let _ = std::io::stdin().read_line(&mut line);
                    }
                    Ok(())
                }),
            );
            let _ = doc.update(&wait(), |cur| {
                (counter(cur) + 1000).to_string().into_bytes()
            });
        }
        // One try-once increment: says whether it was contended.
        "try" => {
            match doc.update(&Budget::no_wait(), |cur| {
                (counter(cur) + 1).to_string().into_bytes()
            }) {
                Ok(_) => println!("@ updated"),
                Err(e) if e.class() == ErrorClass::Contended => println!("@ contended"),
                Err(e) => println!("@ error {e}"),
            }
            return;
        }
        other => panic!("unknown worker role {other}"),
    }
    println!("@ done");
}

fn spawn(role: &str, path: &Path, n: u32) -> Proc {
    spawn_with(role, path, n, "")
}

fn spawn_with(role: &str, path: &Path, n: u32, at: &str) -> Proc {
    Proc::spawn(
        Command::new(std::env::current_exe().expect("test binary"))
            .env("DOCUMENT_AT", at)
            .args(["worker", "--exact", "--nocapture", "--test-threads=1", "-q"])
            .env("DOCUMENT_WORKER", role)
            .env("DOCUMENT_PATH", path)
            .env("DOCUMENT_N", n.to_string())
            .stderr(Stdio::inherit()),
    )
}

/// The worker's next handshake line (without its `@ ` mark).
fn handshake(p: &mut Proc) -> String {
    p.marked_line()
}

/// Runs `WORKERS` workers of `role`, `INCREMENTS` each, started together; the final count.
fn race(role: &str, path: &Path) -> u64 {
    let mut workers: Vec<Proc> = (0..WORKERS)
        .map(|_| spawn(role, path, INCREMENTS))
        .collect();
    for w in &mut workers {
        assert_eq!(handshake(w), "ready");
    }
    for w in &mut workers {
        w.send("go");
    }
    for w in &mut workers {
        assert_eq!(handshake(w), "done");
        assert!(w.wait().success());
    }
    counter(Some(&std::fs::read(path).expect("the document")))
}

#[test]
fn four_processes_of_200_increments_lose_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("count");
    assert_eq!(
        race("increment", &path),
        u64::from(INCREMENTS) * WORKERS as u64
    );
    assert_no_temporaries(dir.path());
}

#[test]
fn the_same_increments_without_the_lease_lose_updates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("count");
    let total = race("plain", &path);
    assert!(
        total < u64::from(INCREMENTS) * WORKERS as u64,
        "a plain read-modify-write lost nothing ({total}): the harness does not race"
    );
}

fn assert_no_temporaries(dir: &Path) {
    let names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp."))
        .collect();
    assert!(names.is_empty(), "temporaries left: {names:?}");
}

#[test]
fn sigkill_inside_an_update_leaves_the_old_version_whole_and_the_lease_free() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("count");
    let doc = Document::open(&path, DocumentOptions::new());
    let before = doc
        .update(&wait(), |_| b"41".to_vec())
        .expect("first version");
    let mut w = spawn("hang", &path, 1);
    assert_eq!(handshake(&mut w), "in update");
    w.kill_group();
    let seen = doc.read().expect("read").expect("a document");
    assert_eq!(seen, before);
    assert_no_temporaries(dir.path());
    // The dead writer's lease went with it: a try-once update succeeds.
    let after = doc
        .update(&Budget::no_wait(), |cur| {
            (counter(cur) + 1).to_string().into_bytes()
        })
        .expect("the lease is free");
    assert_eq!(after.content, b"42");
}

#[test]
fn a_leftover_temporary_is_removed_by_the_next_update() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("count");
    // What a writer killed between the temporary's creation and the rename leaves.
    let leftover = dir.path().join(".count.tmp.999999.7");
    std::fs::write(&leftover, "half").expect("leftover");
    let doc = Document::open(&path, DocumentOptions::new());
    doc.update(&wait(), |_| b"1".to_vec()).expect("update");
    assert!(!leftover.exists());
    assert_no_temporaries(dir.path());
}

/// Clones of one handle in four threads exclude each other as four processes do: the lock
/// file a handle keeps open between updates is taken by one update at a time, and the
/// others open their own.
#[test]
fn four_threads_sharing_one_handle_lose_no_increment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let doc = Document::open(dir.path().join("count"), DocumentOptions::new());
    let threads: Vec<_> = (0..WORKERS)
        .map(|_| {
            let doc = doc.clone();
            std::thread::spawn(move || {
                for _ in 0..INCREMENTS / 2 {
                    doc.update(&wait(), |cur| (counter(cur) + 1).to_string().into_bytes())
                        .expect("update");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a thread");
    }
    let last = doc.read().expect("read").expect("a version");
    assert_eq!(
        counter(Some(&last.content)),
        WORKERS as u64 * u64::from(INCREMENTS / 2)
    );
    assert_no_temporaries(dir.path());
}

/// A handle keeps the document's directory open between updates, but never writes through
/// it once the path names another directory: an update after the directory was moved away
/// and replaced reads and writes the new one, and the moved one is left as it was.
#[test]
fn an_update_after_the_directory_was_replaced_writes_the_new_one() {
    let top = tempfile::tempdir().expect("tempdir");
    let dir = top.path().join("settings");
    std::fs::create_dir(&dir).expect("mkdir");
    let doc = Document::open(dir.join("count"), DocumentOptions::new());
    doc.update(&wait(), |_| b"1".to_vec()).expect("first");
    std::fs::rename(&dir, top.path().join("moved")).expect("move the directory away");
    std::fs::create_dir(&dir).expect("a new directory at the path");
    std::fs::write(dir.join("count"), "10").expect("its document");
    let next = doc
        .update(&wait(), |cur| (counter(cur) + 1).to_string().into_bytes())
        .expect("update");
    assert_eq!(next.content, b"11", "read from the new directory");
    assert_eq!(std::fs::read(dir.join("count")).unwrap(), b"11");
    assert_eq!(std::fs::read(top.path().join("moved/count")).unwrap(), b"1");
    assert_eq!(doc.read().expect("read").expect("a version").content, b"11");
}

/// Under the kernel's lease a killed writer's temporary has the one fixed name, which the
/// next update's rewrite replaces; an update that writes nothing — declined, or dropped
/// unfinished — removes it before it lets the lease go, even through a long-lived handle
/// (which lists the directory only at its first update).
#[test]
fn an_update_that_writes_nothing_removes_the_one_temporary_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let doc = Document::open(dir.path().join("count"), DocumentOptions::new());
    doc.update(&wait(), |_| b"1".to_vec()).expect("first");
    let leftover = dir.path().join(".count.tmp.0.0");
    std::fs::write(&leftover, "half").expect("what a killed writer leaves");
    let declined = doc
        .try_update(&wait(), |_| Ok::<_, std::io::Error>(None))
        .expect("declined");
    assert_eq!(declined.expect("the current version").content, b"1");
    assert!(!leftover.exists(), "a declined update removed it");
    std::fs::write(&leftover, "half").expect("what a killed writer leaves");
    drop(doc.begin(&wait()).expect("begin"));
    assert!(!leftover.exists(), "a dropped edit removed it");
    assert_eq!(doc.read().expect("read").expect("a version").content, b"1");
}

#[test]
fn update_if_loses_to_a_concurrent_update_and_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("count");
    let doc = Document::open(&path, DocumentOptions::new());
    let seen = doc
        .update(&wait(), |_| b"1".to_vec())
        .expect("first version");
    // Another process updates after we read.
    let mut w = spawn("paced", &path, 1);
    let theirs: Version = handshake(&mut w).parse().expect("a version");
    w.send("next");
    assert_eq!(handshake(&mut w), "done");
    let err = doc
        .update_if(&wait(), seen.version, |_| b"100".to_vec())
        .expect_err("the version moved on");
    match &err {
        DocumentError::Conflict {
            expected, current, ..
        } => {
            assert_eq!(*expected, seen.version);
            assert_eq!(*current, Some(theirs));
        }
        other => panic!("not a conflict: {other}"),
    }
    assert_eq!(err.class(), ErrorClass::Contended);
    assert!(err.to_string().contains(&theirs.to_string()), "{err}");
    assert_eq!(std::fs::read(&path).expect("doc"), b"2");
    // With the current version it wins.
    let won = doc
        .update_if(&wait(), theirs, |c| {
            (counter(Some(c)) + 1).to_string().into_bytes()
        })
        .expect("current version");
    assert_eq!(won.content, b"3");
}

/// 1,000 updates by another process, each waiting until the watch has yielded it: the watch
/// yields every one of them, in order, and nothing else (no coalescing when the writer is no
/// faster than the watcher; the `Watch` docs say when versions may be skipped).
#[test]
fn watch_sees_every_version_another_process_writes() {
    const UPDATES: u64 = 1000;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("count");
    let doc = Document::open(&path, DocumentOptions::new());
    let mut watch = doc.watch().expect("watch");
    let mut w = spawn("paced", &path, UPDATES as u32);
    let mut seen_count = 0u64;
    for i in 1..=UPDATES {
        let version: Version = handshake(&mut w).parse().expect("a version");
        let seen = watch.next().expect("a version").expect("read");
        assert_eq!(seen.version, version);
        assert_eq!(counter(Some(&seen.content)), i);
        seen_count += 1;
        w.send("next");
    }
    assert_eq!(handshake(&mut w), "done");
    assert!(w.wait().success());
    assert_eq!(seen_count, UPDATES);
    // Nothing more was written, so nothing more is yielded.
    assert!(
        watch
            .next_timeout(Duration::from_millis(0))
            .expect("read")
            .is_none()
    );
}

#[test]
fn watch_of_free_running_updates_coalesces_but_never_goes_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("count");
    let doc = Document::open(&path, DocumentOptions::new());
    let mut watch = doc.watch().expect("watch");
    let mut w = spawn("increment", &path, 1000);
    assert_eq!(handshake(&mut w), "ready");
    w.send("go");
    let (mut last, mut yielded) = (0, 0u64);
    while last < 1000 {
        let seen = counter(Some(
            &watch.next().expect("a version").expect("read").content,
        ));
        assert!(seen > last, "went from {last} to {seen}");
        last = seen;
        yielded += 1;
    }
    assert_eq!(handshake(&mut w), "done");
    // Coalesced (the documented case: a writer faster than the watcher), never invented.
    assert!((1..=1000).contains(&yielded), "{yielded} versions yielded");
    println!("free-running: 1000 updates, {yielded} versions yielded");
}

#[test]
fn a_symlink_fifo_or_directory_at_the_path_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("elsewhere");
    std::fs::write(&target, "theirs").expect("target");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let fifo = dir.path().join("fifo");
    // mkfifo(1): rustix has no mknodat on every platform this test builds for.
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success(), "mkfifo: {made}");
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).expect("dir");
    for (path, kind) in [
        (&link, "symbolic link"),
        (&fifo, "FIFO"),
        (&sub, "directory"),
    ] {
        let doc = Document::open(path, DocumentOptions::new());
        for err in [
            doc.read().expect_err("read refuses"),
            doc.update(&wait(), |_| b"x".to_vec())
                .expect_err("update refuses"),
        ] {
            let msg = err.to_string();
            assert!(msg.contains(&path.display().to_string()), "{msg}");
            assert!(msg.to_lowercase().contains(&kind.to_lowercase()), "{msg}");
            assert_eq!(err.class(), ErrorClass::Usage, "{msg}");
        }
    }
    assert_eq!(std::fs::read(&target).expect("target"), b"theirs");
    assert!(sub.is_dir());
}

#[test]
fn a_document_that_does_not_parse_is_never_overwritten_by_an_update() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("settings.json");
    std::fs::write(&path, "{ torn").expect("write");
    let doc = Document::open(&path, DocumentOptions::new().json(true));
    let err = doc
        .update(&wait(), |_| b"{}".to_vec())
        .expect_err("not parsable");
    assert!(matches!(err, DocumentError::NotParsable { .. }), "{err}");
    assert!(err.to_string().contains("settings.json"), "{err}");
    let err = doc
        .update_json(&wait(), |v: &mut serde_json::Value| *v = 1.into())
        .expect_err("not parsable");
    assert!(matches!(err, DocumentError::NotParsable { .. }), "{err}");
    assert_eq!(std::fs::read(&path).expect("read"), b"{ torn");
    // Content that is not JSON is never written to a JSON document.
    let err = doc.replace(&wait(), b"nope".to_vec()).expect_err("invalid");
    assert!(matches!(err, DocumentError::InvalidContent { .. }), "{err}");
    assert_eq!(std::fs::read(&path).expect("read"), b"{ torn");
    // The explicit replacement does overwrite it.
    doc.replace(&wait(), b"{\"a\":1}".to_vec())
        .expect("replaced");
    let (value, _) = doc
        .read_json::<serde_json::Value>()
        .expect("read")
        .expect("some");
    assert_eq!(value, serde_json::json!({"a": 1}));
}

#[test]
fn a_document_over_the_size_limit_is_refused_and_left_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("doc");
    let doc = Document::open(&path, DocumentOptions::new().max_bytes(8));
    doc.update(&wait(), |_| b"12345678".to_vec())
        .expect("at the limit");
    let err = doc
        .update(&wait(), |_| b"123456789".to_vec())
        .expect_err("over");
    assert!(matches!(err, DocumentError::TooLarge { .. }), "{err}");
    assert_eq!(std::fs::read(&path).expect("read"), b"12345678");
    std::fs::write(&path, "123456789").expect("write");
    let err = doc.read().expect_err("too large to read");
    assert!(matches!(err, DocumentError::TooLarge { .. }), "{err}");
    assert_eq!(err.class(), ErrorClass::Usage);
}

#[test]
fn an_update_while_another_process_holds_the_lease_is_contended_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("doc");
    let doc = Document::open(
        &path,
        DocumentOptions::new().lock_path(dir.path().join("my.lock")),
    );
    doc.update(&wait(), |_| b"1".to_vec()).expect("first");
    let holder = FlockHolder::hold(doc.lock_path());
    let err = doc
        .update(&Budget::no_wait(), |_| b"2".to_vec())
        .expect_err("held");
    assert_eq!(err.class(), ErrorClass::Contended, "{err}");
    // Reading needs no lease.
    assert_eq!(doc.read().expect("read").expect("some").content, b"1");
    holder.release();
    assert_eq!(
        doc.update(&Budget::no_wait(), |_| b"2".to_vec())
            .expect("free")
            .content,
        b"2"
    );
}

#[test]
fn an_edit_holds_the_lease_until_it_is_committed_or_dropped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("count");
    let doc = Document::open(&path, DocumentOptions::new());
    let try_once = || {
        let mut w = spawn("try", &path, 1);
        let said = handshake(&mut w);
        assert!(w.wait().success());
        said
    };
    let edit = doc.begin(&wait()).expect("begin");
    assert!(edit.current().is_none());
    assert_eq!(try_once(), "contended");
    drop(edit); // an exception in a binding's callback: nothing written, lease released
    assert!(doc.read().expect("read").is_none());
    assert_eq!(try_once(), "updated");
    let edit = doc.begin(&wait()).expect("begin");
    assert_eq!(
        edit.current().map(|s| s.content.clone()),
        Some(b"1".to_vec())
    );
    assert_eq!(try_once(), "contended");
    let written = edit.commit(b"10".to_vec()).expect("commit");
    assert_eq!(doc.read().expect("read"), Some(written));
    assert_eq!(try_once(), "updated");
    assert_eq!(std::fs::read(&path).expect("doc"), b"11");
}

fn temporaries(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .expect("read_dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().contains(".tmp."))
        })
        .count()
}

#[test]
fn sigkill_between_fsync_and_rename_leaves_the_old_version_and_the_next_update_collects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("count");
    let doc = Document::open(&path, DocumentOptions::new());
    let before = doc
        .update(&wait(), |_| b"41".to_vec())
        .expect("first version");
    let mut w = spawn_with("stall", &path, 1, "synced");
    assert_eq!(handshake(&mut w), "stalled");
    assert_eq!(temporaries(dir.path()), 1, "the fsynced temporary is there");
    // Under the kernel's lease the temporary has the one name every writer of the file
    // uses, so even this long-lived handle, which listed the directory at its first update
    // and lists no more, replaces it.
    assert!(dir.path().join(".count.tmp.0.0").is_file());
    w.kill_group();
    // Readers see the old version whole; the killed writer's temporary is never read.
    assert_eq!(doc.read().expect("read"), Some(before));
    assert_eq!(temporaries(dir.path()), 1);
    // The next update (the lease died with the writer) removes it.
    let next = doc
        .update(&Budget::no_wait(), |cur| {
            (counter(cur) + 1).to_string().into_bytes()
        })
        .expect("update");
    assert_eq!(next.content, b"42");
    assert_eq!(temporaries(dir.path()), 0);
}

#[test]
fn sigkill_after_the_rename_leaves_the_new_version_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("count");
    let doc = Document::open(&path, DocumentOptions::new());
    doc.update(&wait(), |_| b"41".to_vec())
        .expect("first version");
    let mut w = spawn_with("stall", &path, 1, "renamed");
    assert_eq!(handshake(&mut w), "stalled");
    w.kill_group();
    assert_eq!(
        doc.read().expect("read").map(|s| s.content),
        Some(b"1041".to_vec())
    );
    assert_eq!(temporaries(dir.path()), 0);
}

#[test]
fn a_lease_lost_before_the_rename_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("count");
    let lock = dir.path().join("count.lock");
    let removed = lock.clone();
    // The lock file is removed under the writer (as a careless cleanup would): whoever
    // comes next locks a new file, so this writer must not rename.
    let doc = Document::open(
        &path,
        DocumentOptions::new().observe(move |step| {
            if step == Step::Written {
                std::fs::remove_file(&removed)?;
            }
            Ok(())
        }),
    );
    std::fs::write(&path, "41").expect("first version");
    let err = doc
        .update(&wait(), |_| b"42".to_vec())
        .expect_err("lease lost");
    assert!(
        matches!(
            err,
            DocumentError::Lease(leasehold::Error::LeaseLost { .. })
        ),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).expect("doc"), b"41");
    assert_eq!(temporaries(dir.path()), 0);
}

#[test]
fn a_failed_write_before_the_rename_keeps_the_old_version_and_after_it_is_outcome_unknown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("count");
    std::fs::write(&path, "41").expect("first version");
    let failing = |at: Step| {
        Document::open(
            &path,
            DocumentOptions::new().observe(move |step| match step == at {
                true => Err(std::io::Error::from(std::io::ErrorKind::StorageFull)),
                false => Ok(()),
            }),
        )
    };
    let err = failing(Step::Written)
        .update(&wait(), |_| b"42".to_vec())
        .expect_err("disk full");
    assert!(matches!(err, DocumentError::Io { .. }), "{err}");
    assert!(
        err.to_string().contains("old version is left whole"),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).expect("doc"), b"41");
    assert_eq!(temporaries(dir.path()), 0);
    let err = failing(Step::Renamed)
        .update(&wait(), |_| b"43".to_vec())
        .expect_err("outcome unknown");
    assert!(matches!(err, DocumentError::OutcomeUnknown { .. }), "{err}");
    assert_eq!(std::fs::read(&path).expect("doc"), b"43");
}

/// While another process holds the document's lease, an async update waits without blocking
/// the executor (a canary keeps ticking) and gives up as contended with nothing written; once
/// the holder lets go, it updates.
#[cfg(feature = "tokio")]
async fn async_update_waits_without_blocking_then_updates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("count");
    let doc = Document::open(&path, DocumentOptions::new());
    doc.update(&wait(), |_| b"1".to_vec()).expect("first");
    let held = FlockHolder::hold(doc.lock_path());
    let canary = testkit::Canary::start();
    let r = doc
        .update_async(&Budget::timeout(Duration::from_millis(300)), |_| {
            b"x".to_vec()
        })
        .await;
    let seen = canary.ticks();
    let err = r.expect_err("held elsewhere");
    assert_eq!(err.class(), ErrorClass::Contended, "{err}");
    assert!(
        seen >= 10,
        "canary ticked only {seen} times during a 300 ms wait"
    );
    assert_eq!(std::fs::read(&path).expect("doc"), b"1");
    held.release();
    let written = doc
        .update_async(&wait(), |cur| (counter(cur) + 1).to_string().into_bytes())
        .await
        .expect("free");
    assert_eq!(written.content, b"2");
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "current_thread")]
async fn async_update_waits_without_blocking_then_updates_current_thread() {
    async_update_waits_without_blocking_then_updates().await;
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_update_waits_without_blocking_then_updates_multi_thread() {
    async_update_waits_without_blocking_then_updates().await;
}

/// An async watch yields each version another process writes (paced), from a current-thread
/// runtime that a canary proves was never blocked.
#[cfg(feature = "tokio")]
#[tokio::test(flavor = "current_thread")]
async fn async_watch_sees_versions_another_process_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("count");
    let doc = Document::open(&path, DocumentOptions::new());
    let watch = doc.watch_async().await.expect("watch");
    let canary = testkit::Canary::start();
    let mut w = spawn("paced", &path, 5);
    for i in 1..=5u64 {
        let version: Version = handshake(&mut w).parse().expect("a version");
        let seen = watch.next().await.expect("read");
        assert_eq!((seen.version, counter(Some(&seen.content))), (version, i));
        w.send("next");
    }
    assert_eq!(handshake(&mut w), "done");
    assert!(canary.ticks() > 0);
}
