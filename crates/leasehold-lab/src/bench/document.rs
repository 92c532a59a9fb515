//! `Document` figures: updates per second of a small JSON settings document, next to the floor
//! measured in the same run (the raw durable rewrite: temp file → write → fsync → rename →
//! fsync directory, no lock) and beside the ways Node and Python users do it by hand.
//!
//! * **One writer** (`Document::update_json` in this process, each update timed alone and
//!   interleaved one by one with a raw rewrite of a document of the same size; target ≥ 0.9×
//!   the floor): `stores::document`.
//! * **4 contending processes** (`leasehold worker bench doc`, each `update_json` in a loop,
//!   started together): all their updates over the wall time from the start cue to the last
//!   one's end. The floor is the same raw rewrite: a durable update is at least one, and
//!   contending writers cannot overlap theirs.
//! * **Node** (`write-file-atomic` + `proper-lockfile`, installed from npm into a temporary
//!   directory at bench time): `lock` (retries every 1–10 ms), read, parse, write-file-atomic
//!   (temp file, fsync, rename; no directory fsync), release. One process, and 4.
//! * **Python** (`filelock` + `os.replace` + fsync; `filelock` imported where installed, else
//!   installed from PyPI into a temporary directory): `with FileLock(path + ".lock")`, read,
//!   parse, write a temp file, fsync it, `os.replace` (no directory fsync). One process, and 4.
//!
//! A way whose runtime or packages cannot be had here is a `not measured` line saying why.
//! Every process reads its start cue (`go`) after saying `R`, and ends with `D <ns>`: the time
//! its own loop took, which is the one-process figure (process start-up left out).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::crew::Crew;
use super::report::{NotMeasured, Plan, Row, Unit, io_fail, mono_ns};
use super::stores::{Settings, bump};
use crate::exit::Failure;

/// Processes of the contended figures.
const CONTENDERS: usize = 4;

/// The Node way: `node -e NODE_WAY PATH N` (`NODE_PATH` has the two packages).
const NODE_WAY: &str = r#"
const fs = require('fs')
const lockfile = require('proper-lockfile')
const writeFileAtomic = require('write-file-atomic')
const [path, n] = process.argv.slice(1)
const rl = require('readline').createInterface({ input: process.stdin })
const lines = rl[Symbol.asyncIterator]()
const retries = { retries: 100000, factor: 1, minTimeout: 1, maxTimeout: 10 }
async function main () {
  console.log('R')
  await lines.next()
  const t0 = process.hrtime.bigint()
  for (let i = 0; i < Number(n); i++) {
    const release = await lockfile.lock(path, { retries })
    const d = JSON.parse(fs.readFileSync(path, 'utf8'))
    d.count += 1
    d.theme = 'dark'
    d.recent = [0, 1, 2, 3].map((k) => `/home/me/project-${k}`)
    await writeFileAtomic(path, JSON.stringify(d, null, 2) + '\n')
    await release()
  }
  console.log(`D ${process.hrtime.bigint() - t0}`)
  process.exit(0)
}
main().catch((e) => { console.error(e); process.exit(1) })
"#;

/// The Python way: `python3 -c PYTHON_WAY PATH N`.
const PYTHON_WAY: &str = r#"
import json, os, sys, time
from filelock import FileLock
path, n = sys.argv[1], int(sys.argv[2])
lock = FileLock(path + ".lock")
print("R", flush=True)
sys.stdin.readline()
t0 = time.monotonic_ns()
for _ in range(n):
    with lock:
        with open(path) as f:
            d = json.load(f)
        d["count"] += 1
        d["theme"] = "dark"
        d["recent"] = ["/home/me/project-%d" % k for k in range(4)]
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "w") as f:
            json.dump(d, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
print("D", time.monotonic_ns() - t0, flush=True)
"#;

/// The command of one process updating the document at the path that many times.
type WayCommand = Box<dyn Fn(&Path, usize) -> Result<Command, Failure>>;

/// A way of updating the document, run as processes speaking `R` / `go` / `D <ns>`.
struct Way {
    key_one: &'static str,
    key_four: &'static str,
    label: &'static str,
    /// The command of one process updating `path` `n` times.
    command: WayCommand,
}

/// All the figures of this scenario: the rows, and the ways that cannot be measured here.
pub(super) fn run(dir: &Path, plan: &Plan) -> Result<(Vec<Row>, Vec<NotMeasured>), Failure> {
    let base = dir.join("doc-ways");
    std::fs::create_dir_all(&base).map_err(io_fail("create directory"))?;
    let one = super::stores::document(dir, plan)?;
    let floor = one.floor.map(|(f, _)| f).unwrap_or(0.0);
    let mut rows = vec![one];
    let mut not = Vec::new();
    let n = if plan.quick { 20 } else { 200 };
    let mut ways = vec![Way {
        key_one: "",
        key_four: "document_update_4",
        label: "Document::update_json",
        command: Box::new(|path: &Path, n: usize| {
            let mut cmd = crate::platform::worker_command("bench")?;
            cmd.args(["doc", "--lock"])
                .arg(path)
                .arg(format!("--count={n}"));
            Ok(cmd)
        }),
    }];
    match node_packages(&base) {
        Ok(modules) => ways.push(Way {
            key_one: "node_document_way_1",
            key_four: "node_document_way_4",
            label: "Node write-file-atomic + proper-lockfile",
            command: Box::new(move |path: &Path, n: usize| {
                let mut cmd = Command::new("node");
                cmd.args(["-e", NODE_WAY])
                    .arg(path)
                    .arg(n.to_string())
                    .env("NODE_PATH", &modules);
                Ok(cmd)
            }),
        }),
        Err(why) => not.push(NotMeasured::new(
            "node_document_way_1, node_document_way_4",
            "Node write-file-atomic + proper-lockfile",
            why,
        )),
    }
    match python_filelock(&base) {
        Ok(extra) => ways.push(Way {
            key_one: "python_document_way_1",
            key_four: "python_document_way_4",
            label: "Python filelock + os.replace + fsync",
            command: Box::new(move |path: &Path, n: usize| {
                let mut cmd = Command::new("python3");
                cmd.args(["-c", PYTHON_WAY]).arg(path).arg(n.to_string());
                if let Some(p) = &extra {
                    cmd.env("PYTHONPATH", p);
                }
                Ok(cmd)
            }),
        }),
        Err(why) => not.push(NotMeasured::new(
            "python_document_way_1, python_document_way_4",
            "Python filelock + os.replace + fsync",
            why,
        )),
    }
    for (i, way) in ways.iter().enumerate() {
        if !way.key_one.is_empty() {
            let path = fresh(&base, &format!("one-{i}.json"))?;
            let rate = rate_of(&way.command, &path, 1, n)?;
            rows.push(row(
                way.key_one,
                format!("{}, one writer process (updates/s)", way.label),
                rate,
                floor,
                n,
            ));
        }
        let path = fresh(&base, &format!("four-{i}.json"))?;
        let rate = rate_of(&way.command, &path, CONTENDERS, n)?;
        let count = read_count(&path)?;
        if count != (CONTENDERS * n) as u64 {
            return Err(Failure::failed(format!(
                "bench: {}: {CONTENDERS} processes of {n} updates left the count at {count}",
                way.label
            )));
        }
        rows.push(row(
            way.key_four,
            format!(
                "{}, {CONTENDERS} contending processes (updates/s, all together)",
                way.label
            ),
            rate,
            floor,
            CONTENDERS * n,
        ));
    }
    Ok((rows, not))
}

/// A fresh settings document at `base/name`, as the first update writes it.
fn fresh(base: &Path, name: &str) -> Result<PathBuf, Failure> {
    let path = base.join(name);
    let mut s = Settings::default();
    bump(&mut s);
    s.count = 0;
    let mut bytes = serde_json::to_vec_pretty(&s)
        .map_err(|e| Failure::failed(format!("bench: encode: {e}")))?;
    bytes.push(b'\n');
    std::fs::write(&path, bytes).map_err(io_fail("write the document"))?;
    Ok(path)
}

fn read_count(path: &Path) -> Result<u64, Failure> {
    let bytes = std::fs::read(path).map_err(io_fail("read the document"))?;
    let s: Settings = serde_json::from_slice(&bytes)
        .map_err(|e| Failure::failed(format!("bench: the document does not parse: {e}")))?;
    Ok(s.count)
}

/// Updates per second of `procs` processes of `command`, `n` updates each, started together:
/// one process's own loop time, or (several) the wall time from the cue to the last `D`.
fn rate_of(
    command: &dyn Fn(&Path, usize) -> Result<Command, Failure>,
    path: &Path,
    procs: usize,
    n: usize,
) -> Result<f64, Failure> {
    let mut crew = Crew::new();
    let mut ids = Vec::new();
    for _ in 0..procs {
        let mut cmd = command(path, n)?;
        cmd.stderr(Stdio::inherit());
        ids.push(crew.spawn_command(cmd)?);
    }
    for _ in &ids {
        let (_, line) = crew.recv_within(Duration::from_secs(60))?;
        if line.trim() != "R" {
            return Err(Failure::failed(format!(
                "bench: a document worker said {line:?} (wanted R)"
            )));
        }
    }
    let t0 = mono_ns();
    for &id in &ids {
        crew.send(id, "go")?;
    }
    let mut own = Vec::new();
    for _ in &ids {
        let (_, line) = crew.recv_within(Duration::from_secs(600))?;
        match line
            .strip_prefix("D ")
            .and_then(|ns| ns.trim().parse::<u64>().ok())
        {
            Some(ns) => own.push(ns),
            None => {
                return Err(Failure::failed(format!(
                    "bench: a document worker said {line:?}"
                )));
            }
        }
    }
    let wall = mono_ns().saturating_sub(t0);
    for id in ids {
        crew.finish(id);
    }
    let ns = if procs == 1 { own[0] } else { wall };
    Ok((procs * n) as f64 * 1e9 / (ns.max(1) as f64))
}

fn row(key: &'static str, name: String, rate: f64, floor: f64, samples: usize) -> Row {
    Row {
        key,
        name,
        unit: Unit::PerSecond,
        median: rate,
        dist: None,
        floor: Some((floor, "raw temp+fsync+rename+fsync dir, no lock")),
        floor_dist: None,
        target: None,
        samples,
    }
}

/// `write-file-atomic` and `proper-lockfile` from npm, in `base/node_modules`: its path, or
/// why they cannot be had.
pub(super) fn node_packages(base: &Path) -> Result<PathBuf, &'static str> {
    let ok = |c: &mut Command| {
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !ok(Command::new("node").arg("--version")) {
        return Err("node is not installed");
    }
    let npm = if cfg!(windows) { "npm.cmd" } else { "npm" };
    let installed = ok(Command::new(npm)
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--no-save",
            "--silent",
            "--prefix",
        ])
        .arg(base)
        .args(["write-file-atomic", "proper-lockfile"]));
    if !installed {
        return Err(
            "npm could not install write-file-atomic and proper-lockfile here (no npm, or no registry)",
        );
    }
    Ok(base.join("node_modules"))
}

/// Where `filelock` can be imported from: `None` when python3 has it, else a directory
/// pip installed it into; or why it cannot be had.
pub(super) fn python_filelock(base: &Path) -> Result<Option<PathBuf>, &'static str> {
    let has = |path: Option<&Path>| {
        let mut c = Command::new("python3");
        c.args(["-c", "import filelock"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(p) = path {
            c.env("PYTHONPATH", p);
        }
        c.status().is_ok_and(|s| s.success())
    };
    if has(None) {
        return Ok(None);
    }
    let target = base.join("python-packages");
    let installed = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--target",
        ])
        .arg(&target)
        .arg("filelock")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match installed {
        Err(_) => Err("python3 is not installed"),
        Ok(s) if s.success() && has(Some(&target)) => Ok(Some(target)),
        Ok(_) => Err("pip could not install filelock here (no pip, or no registry)"),
    }
}
