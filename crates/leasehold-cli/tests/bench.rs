//! Smoke test of `leasehold bench`: it runs, stops by itself, prints well-formed JSON with
//! every figure, and cleans up. Figures are printed, never asserted: no timed assertions.
#![cfg(unix)]

mod common;

use common::leasehold;
use testkit::run;

#[test]
fn quick_bench_prints_every_figure_as_json_and_leaves_no_files() {
    let dir = tempfile::tempdir().unwrap();
    // A contender of another language (`--contender`, bench/external.rs): a Python worker
    // doing what the kernel floor does, where python3 is installed.
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/flock_contender.py"
    );
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !python {
        println!(
            "SKIP: bench --contender: python3 is not installed (the contender is a Python script)"
        );
    }
    let mut cmd = leasehold();
    cmd.args(["bench", "--quick", "--json", "--dir"])
        .arg(dir.path());
    if python {
        cmd.arg("--contender")
            .arg(format!("py-flock=python3 {fixture}"));
    }
    let out = run(&mut cmd);
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).expect("one JSON document");
    for key in ["quick", "repeats", "elapsed_s", "machine", "figures"] {
        assert!(doc.get(key).is_some(), "missing {key}: {doc}");
    }
    let figures = doc["figures"].as_array().expect("figures array");
    let keys: Vec<&str> = figures.iter().filter_map(|f| f["key"].as_str()).collect();
    for want in [
        "cold_cycle",
        "fs4_cold_cycle",
        "warm_reacquire",
        "verify",
        "handoff_2",
        "handoff_4",
        "waiting_cpu",
        "takeover_after_sigkill",
        "cancel_latency",
        "deadline_latency",
        "async_handoff_4",
        "async_waiter_threads",
        "crowd_waiting_cpu",
        "registry_mutation",
        "document_update",
        "document_update_4",
        "session_append_fsync",
        "session_append_batched",
        "keyed_10_ids",
        "keyed_many_ids",
        "keyed_many_ids_same_files",
        "gc_beside_verbs",
        "uncontended_floor",
        "uncontended_floor_verify",
        "uncontended_acquire",
        "uncontended_acquire_cancellable",
        "uncontended_handle_lock",
    ] {
        assert!(keys.contains(&want), "missing figure {want}: {keys:?}");
    }
    // The Node and Python ways of updating a document by hand: measured, or a line saying
    // why not (no node, no npm registry, no pip).
    let not: Vec<&str> = doc["not_measured"]
        .as_array()
        .expect("not_measured")
        .iter()
        .filter_map(|n| n["key"].as_str())
        .collect();
    for (way, measured) in [
        ("node_document_way", "node_document_way_4"),
        ("python_document_way", "python_document_way_4"),
    ] {
        assert!(
            keys.contains(&measured) || not.iter().any(|k| k.starts_with(way)),
            "{way}: neither measured nor said why: {keys:?} {not:?}"
        );
    }
    // The uncued back-to-back scenario: every method with 2 and 4 workers, the floors
    // defining the targets (met: null) and every leasehold method judged against them.
    let lines = doc["uncued"]["lines"].as_array().expect("uncued lines");
    let methods = [
        "floor",
        "floor-verify",
        "lease",
        "lease-budget",
        "handle",
        "async",
        "keyed",
    ];
    for workers in [2, 4] {
        for method in methods {
            let line = lines
                .iter()
                .find(|l| l["workers"] == workers && l["method"] == method)
                .unwrap_or_else(|| panic!("no uncued line for {method} with {workers}"));
            let owner = line["owner_change"].as_f64().expect("owner_change");
            assert!((0.0..=1.0).contains(&owner), "{line}");
            assert!(
                line["acquisitions"].as_f64().is_some_and(|n| n > 0.0),
                "{line}"
            );
            for field in ["handoff", "contended_wait", "acquisitions_per_s", "ratios"] {
                assert!(
                    line.get(field).is_some(),
                    "uncued line lacks {field}: {line}"
                );
            }
            let floor = method.starts_with("floor") || method == "helper-floor";
            assert_eq!(line["met"].is_null(), floor, "{line}");
            // The faces that hand over through a helper thread (a keyed wait is the lease's
            // cancellable one) are read against the helper-thread floor of the same runs,
            // the others against floor + verify; every line has its ratio to the helper floor.
            let p50_of = |m: &str| {
                lines
                    .iter()
                    .find(|l| l["workers"] == workers && l["method"] == m)
                    .and_then(|l| l["handoff"]["p50"].as_f64())
            };
            let (verify, helper) = (p50_of("floor-verify"), p50_of("helper-floor"));
            assert!(line["futex_wake"]["p50"].as_f64().is_some(), "{line}");
            if let Some(base) = line["handoff_base"].as_f64() {
                if ["lease-budget", "async", "keyed"].contains(&method) {
                    assert_eq!(Some(base), helper, "{line}");
                } else if !floor {
                    assert_eq!(Some(base), verify, "{line}");
                }
            }
            if let (Some(h), Some(helper)) = (line["handoff"]["p50"].as_f64(), helper) {
                let ratio = line["ratios"]["handoff_p50_vs_helper_floor"].as_f64();
                assert!(
                    ratio.is_some_and(|r| (r - h / helper).abs() < 1e-9),
                    "{line}"
                );
            }
            // ... and beside it, its ratio to the kernel floor's.
            if let (Some(h), Some(kernel)) = (line["handoff"]["p50"].as_f64(), p50_of("floor")) {
                let ratio = line["ratios"]["handoff_p50_vs_kernel_floor"].as_f64();
                assert!(
                    ratio.is_some_and(|r| (r - h / kernel).abs() < 1e-9),
                    "{line}"
                );
            }
        }
    }
    if python {
        // The contender is one more method of the uncued table (ratios, no verdict) and has
        // an uncontended row against the run's kernel floor.
        for workers in [2, 4] {
            let line = lines
                .iter()
                .find(|l| l["workers"] == workers && l["method"] == "py-flock")
                .unwrap_or_else(|| panic!("no uncued line for the contender with {workers}"));
            assert!(
                line["acquisitions"].as_f64().is_some_and(|n| n > 0.0),
                "{line}"
            );
            assert!(line["ratios"]["owner_change_vs_floor"].is_f64(), "{line}");
            assert!(line["met"].is_null(), "{line}");
        }
        let cycles = doc["contenders"]["uncontended"]
            .as_array()
            .expect("contender rows");
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert_eq!(cycles[0]["method"], "py-flock");
        assert!(
            cycles[0]["ns_per_cycle"].as_f64().is_some_and(|n| n > 0.0),
            "{cycles:?}"
        );
        assert!(cycles[0]["ratio_vs_floor"].is_f64(), "{cycles:?}");
    }
    for f in figures {
        assert!(f["median"].as_f64().is_some_and(|m| m >= 0.0), "{f}");
        for field in ["floor", "ratio", "target", "met", "dist", "unit", "samples"] {
            assert!(f.get(field).is_some(), "figure lacks {field}: {f}");
        }
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "bench left files behind: {left:?}");
}

/// `--only` measures the one scenario it names and leaves the others out (never estimated).
#[test]
fn only_runs_the_one_scenario_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(leasehold()
        .args(["bench", "--quick", "--json", "--only", "micro", "--dir"])
        .arg(dir.path()));
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).expect("one JSON document");
    assert_eq!(doc["only"], "micro", "{doc}");
    let keys: Vec<&str> = doc["figures"]
        .as_array()
        .expect("figures array")
        .iter()
        .filter_map(|f| f["key"].as_str())
        .collect();
    assert!(keys.contains(&"cold_cycle"), "{keys:?}");
    for other in ["handoff_2", "cancel_latency", "registry_mutation"] {
        assert!(!keys.contains(&other), "{other} was measured: {keys:?}");
    }
    let lines = doc["uncued"]["lines"].as_array().expect("uncued lines");
    assert!(lines.is_empty(), "the uncued table ran: {lines:?}");
    let out = run(leasehold().args(["bench", "--only", "nothing"]));
    assert_eq!(
        out.code, 2,
        "an unknown scenario is a usage error: {}",
        out.stderr
    );
}

/// `--only shared-mount` runs the record lease's figures on two bindfs mounts of one
/// directory and prints its rows (same host: takeover and hand-over beside the kernel's
/// lease; another host, as root: takeover and hand-over; proper-lockfile and SoftFileLock on
/// the same bed, or a line saying why not), unmounts and leaves no files; where bindfs or
/// FUSE is missing it says `SKIP:`. Figures are printed, never asserted.
#[test]
#[cfg(target_os = "linux")]
fn only_shared_mount_prints_the_record_lease_rows_on_the_two_mount_bed() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(leasehold()
        .args(["bench", "--quick", "--only", "shared-mount", "--dir"])
        .arg(dir.path()));
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    println!("{}", out.stdout);
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "bench left files behind: {left:?}");
    if let Some(skip) = out
        .stderr
        .lines()
        .find(|l| l.starts_with("SKIP: shared-mount"))
    {
        println!("{skip}");
        assert!(
            out.stdout.contains("shared-mount figures"),
            "{}",
            out.stdout
        );
        return;
    }
    assert!(
        out.stdout
            .starts_with("leasehold bench --quick --only shared-mount")
    );
    let row = |text: &str| {
        assert!(
            out.stdout
                .lines()
                .any(|l| l.contains(text) && !l.starts_with("not measured")),
            "no row {text:?} in\n{}",
            out.stdout
        )
    };
    row("takeover after SIGKILL on the same host");
    row("hand-over between waiters on one host");
    if rustix::process::geteuid().is_root() {
        row("takeover after SIGKILL by another host");
        row("hand-over to another host");
    }
    for foreign in ["proper-lockfile", "SoftFileLock"] {
        assert!(out.stdout.contains(foreign), "{foreign}: {}", out.stdout);
    }
    let rows = out
        .stdout
        .lines()
        .filter(|l| l.contains("kernel lease on the same mount"))
        .count();
    assert_eq!(rows, 2, "{}", out.stdout);
}

#[test]
fn bench_workers_are_hidden_from_help() {
    let out = run(leasehold().args(["bench", "--help"]));
    assert_eq!(out.code, 0);
    assert!(out.stdout.contains("--quick") && out.stdout.contains("--json"));
    assert!(!out.stdout.contains("--worker"), "{}", out.stdout);
    assert!(!out.stdout.contains("--lock"), "{}", out.stdout);
    // The one worker entry point of bench and torture is not listed either.
    let out = run(leasehold().arg("--help"));
    assert_eq!(out.code, 0);
    assert!(out.stdout.contains("bench") && out.stdout.contains("torture"));
    assert!(
        !out.stdout
            .lines()
            .any(|l| l.trim_start().starts_with("worker")),
        "{}",
        out.stdout
    );
}

/// The hidden `micro` worker, which BENCHMARKS.md's system-call and instruction counts run
/// under strace or callgrind, calls the in-process op it names as often as told, and refuses
/// an unknown op before it creates anything.
#[test]
fn micro_worker_repeats_the_op_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let micro = |op: &str, count: &str| {
        run(leasehold()
            .args([
                "worker", "bench", "micro", "--op", op, "--count", count, "--lock",
            ])
            .arg(dir.path()))
    };
    let out = micro("nope", "1");
    assert_eq!(
        out.code, 2,
        "an unknown op is a usage error: {}",
        out.stderr
    );
    assert!(out.stderr.contains("cold-floor"), "{}", out.stderr);
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "an unknown op created files: {left:?}");
    // The cold cycle's lock file is the op's own: made by a call of it, not by the set-up.
    let cold = dir.path().join("cold.lock");
    let out = micro("cold", "0");
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    assert!(!cold.exists(), "--count 0 called the op");
    let out = micro("cold", "3");
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    assert!(cold.exists(), "the op was not called");
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    for op in [
        "cold-floor",
        "fs4",
        "warm",
        "warm-floor",
        "verify",
        "verify-floor",
        "kernel-floor",
        "floor-verify",
        "acquire",
        "acquire-budget",
        "handle-lock",
    ] {
        let out = micro(op, "2");
        assert_eq!(out.code, 0, "{op}: {}", out.stderr);
    }
}
