//! All four faces of `Document` on one file at once: a Rust process (this test binary re-run
//! as a worker, using `leasehold_stores::document::Document`), a Node process
//! (`bindings/node/test/doc-child.js` on the Node package), a Python process (the Python
//! package's `Document`) and a shell loop of `leasehold doc update` (with `jq` where it is
//! installed, a small `sh` script elsewhere), each incrementing `{"n": N}` 200 times: exactly
//! 800, every time. The same harness with each face doing a plain read–modify–write (atomic
//! renames, no lease) is the negative control, which must lose updates.
//!
//! The Node addon and the Python extension are the ones cargo built in this target
//! directory (`cargo test --workspace --all-features`, the README's test command, builds
//! both before any test runs); each is copied, with its package's sources, into a temporary
//! package. Where one is missing, or `node` (20 or later) or `python3` (3.9 or later) is,
//! the test prints `SKIP: doc faces: <why>` and passes. Processes synchronise through lines
//! on pipes (`ready`, `go`, `done`), never sleeps.
#![cfg(unix)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::bin;
use leasehold::Budget;
use leasehold_stores::document::{Document, DocumentOptions};
use testkit::Proc;

const INCREMENTS: u32 = 200;
/// One process per face.
const FACES: u64 = 4;
/// How many times the negative control is run before a run that lost nothing fails it (an
/// unlocked race loses updates in practice every time; a rare lucky run is retried).
const CONTROL_TRIES: usize = 3;

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Counter {
    n: u64,
}

/// The Rust face: one role per run, named by `DOC_FACES_WORKER` (`lease` or `plain`).
/// Lines starting with `@ ` are handshakes (libtest prints its own lines around them).
#[test]
fn worker() {
    let Ok(role) = std::env::var("DOC_FACES_WORKER") else {
        return;
    };
    let path = PathBuf::from(std::env::var("DOC_FACES_PATH").expect("DOC_FACES_PATH"));
    let doc = Document::open(&path, DocumentOptions::new().json(true));
    println!("@ ready");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).expect("go");
    for _ in 0..INCREMENTS {
        if role == "lease" {
            doc.update_json(
                &Budget::timeout(Duration::from_secs(60)),
                |c: &mut Counter| {
                    c.n += 1;
                },
            )
            .expect("update");
        } else {
            // The negative control: atomic and durable (the library's rewrite), no lease.
            let cur: Counter = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default();
            let next = serde_json::to_vec(&Counter { n: cur.n + 1 }).expect("encode");
            leasehold::patterns::durable::replace_file(&path, &next).expect("replace");
        }
    }
    println!("@ done");
}

/// Python's increment: `python3 -c INCREMENT PATH MODE N` (`lease` or `plain`).
const PY_INCREMENT: &str = r#"
import json, os, sys
from leasehold_lock import Document
path, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
doc = Document(path)
print("ready", flush=True)
sys.stdin.readline()
def bump(d):
    d = d or {}
    d["n"] = d.get("n", 0) + 1
    return d
for _ in range(n):
    if mode == "lease":
        doc.update(bump, timeout=60)
    else:
        with open(path) as f:
            d = json.load(f)
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(bump(d), f)
        os.replace(tmp, path)
print("done", flush=True)
"#;

/// The shell face's loop: `$STEP` once per increment (`$F` the file, `$L` the CLI).
const SH_LOOP: &str = r#"echo ready; read _go; i=0; while [ $i -lt "$N" ]; do eval "$STEP" || exit 1; i=$((i+1)); done; echo done"#;

/// What each face needs that a bare machine may lack.
struct Faces {
    node_pkg: tempfile::TempDir,
    python_pkg: tempfile::TempDir,
    jq: bool,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn works(cmd: &mut Command) -> Option<String> {
    let out = cmd.stdin(Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The Node package with the addon cargo built, as `npm pack` lays it out.
fn node_package() -> Result<tempfile::TempDir, String> {
    testkit::faces::node()?;
    let addon = testkit::faces::built(&["libleasehold_node.so", "libleasehold_node.dylib"]).ok_or(
        "the Node addon is not built in this target dir (cargo test --workspace --all-features builds it)",
    )?;
    let source = repo().join("bindings/node");
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    for f in ["package.json", "index.js", "index.d.ts", "platform.js"] {
        std::fs::copy(source.join(f), dir.path().join(f)).map_err(|e| format!("copy {f}: {e}"))?;
    }
    let name = works(
        Command::new("node")
            .args(["-p", "require('./platform').addonNames()[0]"])
            .current_dir(dir.path()),
    )
    .ok_or("platform.js names no addon for this platform")?;
    std::fs::copy(&addon, dir.path().join(name)).map_err(|e| format!("copy the addon: {e}"))?;
    Ok(dir)
}

/// The Python package with the extension cargo built.
fn python_package() -> Result<tempfile::TempDir, String> {
    testkit::faces::python()?;
    let ext = testkit::faces::built(&["libleasehold_python.so", "libleasehold_python.dylib"]).ok_or(
        "the Python extension is not built in this target dir (cargo test --workspace --all-features builds it)",
    )?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let pkg = dir.path().join("leasehold_lock");
    std::fs::create_dir(&pkg).map_err(|e| e.to_string())?;
    let sources = repo().join("bindings/python/python/leasehold_lock");
    for entry in std::fs::read_dir(&sources).map_err(|e| format!("{}: {e}", sources.display()))? {
        let entry = entry.map_err(|e| e.to_string())?;
        let name = entry.file_name();
        if name.to_string_lossy().ends_with(".py") {
            std::fs::copy(entry.path(), pkg.join(&name)).map_err(|e| e.to_string())?;
        }
    }
    std::fs::copy(&ext, pkg.join("_native.abi3.so")).map_err(|e| e.to_string())?;
    Ok(dir)
}

fn faces() -> Result<Faces, String> {
    Ok(Faces {
        node_pkg: node_package()?,
        python_pkg: python_package()?,
        jq: works(Command::new("jq").arg("--version")).is_some(),
    })
}

/// The line `want` (or `@ want`) from `p`, past any other output (libtest's).
fn expect(p: &mut Proc, face: &str, want: &str) {
    use std::io::BufRead;
    loop {
        let mut line = String::new();
        let n = p
            .stdout
            .read_line(&mut line)
            .expect("read a worker's stdout");
        assert!(n > 0, "the {face} worker ended before saying {want:?}");
        let line = line.trim_end();
        if line == want || line.strip_prefix("@ ") == Some(want) {
            return;
        }
    }
}

/// One process per face, `mode` `lease` or `plain`, started together on `path` (which holds
/// `{"n": 0}`); the final count.
fn race(f: &Faces, path: &Path, mode: &str) -> u64 {
    std::fs::write(path, "{\"n\": 0}\n").expect("the starting document");
    let n = INCREMENTS.to_string();
    let mut rust = Command::new(std::env::current_exe().expect("test binary"));
    rust.args(["worker", "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env("DOC_FACES_WORKER", mode)
        .env("DOC_FACES_PATH", path)
        .stderr(Stdio::inherit());
    let mut node = Command::new("node");
    node.arg(repo().join("bindings/node/test/doc-child.js"))
        .arg(if mode == "lease" {
            "increment"
        } else {
            "plain"
        })
        .arg(path)
        .arg(&n)
        .env("LEASEHOLD_NODE", f.node_pkg.path())
        .stderr(Stdio::inherit());
    let mut python = Command::new("python3");
    python
        .args(["-c", PY_INCREMENT])
        .arg(path)
        .arg(mode)
        .arg(&n)
        .env("PYTHONPATH", f.python_pkg.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stderr(Stdio::inherit());
    // COMMAND: `{"n": N}` on stdin, `{"n": N+1}` on stdout.
    let bump = if f.jq {
        "jq -c '.n += 1'"
    } else {
        r#"sh -c 'n=$(tr -dc 0-9); echo "{\"n\": $((${n:-0} + 1))}"'"#
    };
    let step = match mode {
        "lease" => format!(r#""$L" doc update --timeout 60 "$F" -- {bump} >/dev/null"#),
        _ => format!(r#"{bump} < "$F" > "$F.sh" && mv "$F.sh" "$F""#),
    };
    let mut shell = Command::new("sh");
    shell
        .args(["-c", SH_LOOP])
        .env("STEP", step)
        .env("F", path)
        .env("L", bin())
        .env("N", &n)
        .stderr(Stdio::inherit());
    let mut workers: Vec<(&str, Proc)> = [
        ("Rust", rust),
        ("Node", node),
        ("Python", python),
        ("CLI", shell),
    ]
    .into_iter()
    .map(|(face, mut cmd)| (face, Proc::spawn(&mut cmd)))
    .collect();
    for (face, w) in &mut workers {
        expect(w, face, "ready");
    }
    for (_, w) in &mut workers {
        w.send("go");
    }
    for (face, w) in &mut workers {
        expect(w, face, "done");
        assert!(w.wait().success(), "the {face} worker failed");
    }
    let doc: Counter = serde_json::from_slice(&std::fs::read(path).expect("the document"))
        .expect("the document parses: every version is whole");
    doc.n
}

#[test]
fn four_faces_of_200_increments_on_one_document_lose_none_and_unlocked_they_lose_some() {
    let f = match faces() {
        Ok(f) => f,
        Err(why) => {
            println!("SKIP: doc faces: {why}");
            return;
        }
    };
    let via = if f.jq { "jq" } else { "an sh script" };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("count.json");
    // The lease: exactly 800, and nothing left beside the document but its lock file.
    assert_eq!(
        race(&f, &path, "lease"),
        FACES * u64::from(INCREMENTS),
        "Rust, Node, Python and the CLI (COMMAND: {via}) under the document's lease"
    );
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["count.json", "count.json.lock"], "temporaries left");
    // The negative control, in the same harness: without the lease, updates are lost.
    let mut totals = Vec::new();
    for _ in 0..CONTROL_TRIES {
        let control = tempfile::tempdir().expect("tempdir");
        let total = race(&f, &control.path().join("count.json"), "plain");
        totals.push(total);
        if total < FACES * u64::from(INCREMENTS) {
            println!(
                "doc faces: under the lease 800 of 800; unlocked {total} of 800 (COMMAND: {via})"
            );
            return;
        }
    }
    panic!(
        "an unlocked read-modify-write lost nothing in {CONTROL_TRIES} runs ({totals:?}): the harness does not race"
    );
}
