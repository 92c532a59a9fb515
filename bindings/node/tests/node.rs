//! Runs the npm package's own tests (`node --test` on `bindings/node/test/`) against the addon
//! cargo built for this test run, so that the README's `cargo test --workspace --all-features`
//! runs them; and checks the package that `npm pack` makes.
//!
//! The addon is never linked into this test binary (it needs the `napi_*` symbols of a
//! running `node`) and never built from here (a nested `cargo build` would wait on this
//! build's lock): cargo builds this crate's cdylib before its integration tests, and the test
//! finds it in the target directory and copies it, under the name the loader expects, into a
//! temporary copy of the package. `SKIP: node: <why>` where Node is missing or older than 20.

use std::path::Path;
use std::process::{Command, Output};

use testkit::faces::profile_dir;

/// The package's own files (what `package.json`'s `files` lists, but the addon): everything
/// a user's `npm pack` tarball holds besides the addon, and nothing the repository alone uses
/// (build.js, the tests, Cargo's files).
const PACKAGE_FILES: &[&str] = &[
    "package.json",
    "index.js",
    "index.d.ts",
    "proper-lockfile.js",
    "proper-lockfile.d.ts",
    "platform.js",
    "README.md",
    "LICENSE-MIT",
    "LICENSE-APACHE",
];

/// `bindings/node`.
fn source() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn check(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A temporary copy of the package with the built addon in it, as `npm pack` would pack it.
///
/// The addon is the one `cargo test` built for this test, beside the test binary in
/// `target/PROFILE/deps` (the crate's rlib type makes cargo build the library, cdylib
/// included, before its integration tests); `target/PROFILE` has one only after a
/// `cargo build`, and may hold an older one.
fn package() -> tempfile::TempDir {
    let name = if cfg!(windows) {
        "leasehold_node.dll"
    } else if cfg!(target_os = "macos") {
        "libleasehold_node.dylib"
    } else {
        "libleasehold_node.so"
    };
    let lib = testkit::faces::built(&[name]).unwrap_or_else(|| profile_dir().join(name));
    assert!(
        lib.exists(),
        "cargo did not build the addon {} before this test",
        lib.display()
    );
    let dir = tempfile::Builder::new()
        .prefix("leasehold-node-pkg-")
        .tempdir()
        .expect("a temporary directory");
    for f in PACKAGE_FILES {
        std::fs::copy(source().join(f), dir.path().join(f))
            .unwrap_or_else(|e| panic!("copy {f} into the package: {e}"));
    }
    // The name the loader looks for comes from the loader's own list (platform.js).
    let out = Command::new("node")
        .arg("-p")
        .arg("require('./platform').addonNames()[0]")
        .current_dir(dir.path())
        .output()
        .expect("run node");
    check("asking platform.js for the addon's name", &out);
    let name = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        name.starts_with("leasehold.") && name.ends_with(".node"),
        "{name:?}"
    );
    std::fs::copy(&lib, dir.path().join(&name)).expect("copy the addon into the package");
    dir
}

/// Installs the devDependencies when they are missing; `Err` says why they could not be (the
/// tests that need them then SKIP; `test/types.test.js` installs the compilers it checks with
/// itself).
fn dev_dependencies() -> Result<(), String> {
    if source().join("node_modules/typescript").exists() {
        return Ok(());
    }
    let npm = if cfg!(windows) { "npm.cmd" } else { "npm" };
    let out = Command::new(npm)
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(source())
        .output()
        .map_err(|e| format!("npm is not installed ({e})"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "npm ci failed (is the registry reachable?): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

#[test]
fn node_test_suite() {
    if let Err(why) = testkit::faces::node() {
        println!("SKIP: node: {why}");
        return;
    }
    if let Err(why) = dev_dependencies() {
        println!("SKIP: node: npm ci (the devDependencies): {why}");
    }
    let pkg = package();
    let cli = profile_dir().join(if cfg!(windows) {
        "leasehold.exe"
    } else {
        "leasehold"
    });
    // The test files by name: node 20 would take every .js file under a `test/` directory
    // for a test, the helpers and the child script included.
    let mut files: Vec<String> = std::fs::read_dir(source().join("test"))
        .expect("bindings/node/test")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".test.js") || n.ends_with(".test.mjs"))
        .map(|n| format!("test/{n}"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no test files in bindings/node/test");
    let mut cmd = Command::new("node");
    // A test that runs 10 minutes fails naming itself (where its event loop still turns).
    cmd.args(["--test", "--test-reporter=spec", "--test-timeout=600000"])
        .args(&files)
        .current_dir(source())
        .env("LEASEHOLD_NODE", pkg.path());
    match cli.exists() {
        true => cmd.env("LEASEHOLD_CLI", &cli),
        false => cmd.env_remove("LEASEHOLD_CLI"),
    };
    // The Python package, for the tests where a Python process is the other side
    // (LEASEHOLD_PYTHON runs it with LEASEHOLD_PYTHONPATH); they SKIP without it.
    let python_pkg = tempfile::Builder::new()
        .prefix("leasehold-node-py-")
        .tempdir()
        .expect("a temporary directory");
    match testkit::faces::python()
        .and_then(|py| testkit::faces::python_package(python_pkg.path()).map(|()| py))
    {
        Ok(py) => cmd
            .env("LEASEHOLD_PYTHON", py)
            .env("LEASEHOLD_PYTHONPATH", python_pkg.path()),
        Err(why) => cmd
            .env_remove("LEASEHOLD_PYTHONPATH")
            .env("LEASEHOLD_NO_PYTHON", why),
    };
    // The suite's report, SKIP lines included, is this test's output; a suite that hangs
    // is stopped and fails with the report so far (the test after the last one it names).
    #[cfg(unix)]
    {
        let (out, in_time) = match testkit::run_within(&mut cmd, NODE_SUITE_LIMIT) {
            Ok(out) => (out, true),
            Err(out) => (out, false),
        };
        print!("{}", out.stdout);
        eprint!("{}", out.stderr);
        assert!(
            in_time,
            "node --test did not end within {NODE_SUITE_LIMIT:?}: stopped (the test that hung \
             follows the last one reported above)"
        );
        assert!(
            out.code == 0,
            "node --test failed: exit status {}",
            out.code
        );
    }
    #[cfg(not(unix))]
    {
        let out = cmd.output().expect("run node --test");
        print!("{}", String::from_utf8_lossy(&out.stdout));
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "node --test failed: {}", out.status);
    }
}

/// How long the whole Node suite may run before it is taken for hung (it takes under a
/// minute on an idle 2-core machine, a few on a busy one).
#[cfg(unix)]
const NODE_SUITE_LIMIT: std::time::Duration = std::time::Duration::from_secs(20 * 60);

#[test]
fn the_license_files_are_the_repositorys() {
    for name in ["LICENSE-MIT", "LICENSE-APACHE"] {
        let here = std::fs::read(source().join(name)).expect("the package's license file");
        let root = std::fs::read(source().join("../..").join(name)).expect("the repository's");
        assert!(
            here == root,
            "bindings/node/{name} differs from /{name}: copy it again"
        );
    }
}

#[test]
fn the_package_version_follows_the_crate() {
    let text = std::fs::read_to_string(source().join("package.json")).expect("package.json");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("package.json is JSON");
    assert_eq!(doc["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(doc["name"], "leasehold-lock");
}

#[test]
fn npm_pack_yields_a_package_whose_main_loads_the_addon() {
    if let Err(why) = testkit::faces::node() {
        println!("SKIP: node: {why}");
        return;
    }
    let pkg = package();
    let npm = if cfg!(windows) { "npm.cmd" } else { "npm" };
    let packed = tempfile::tempdir().expect("a temporary directory");
    let out = match Command::new(npm)
        .args(["pack", "--silent", "--pack-destination"])
        .arg(packed.path())
        .current_dir(pkg.path())
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            println!("SKIP: node: npm pack: npm is not installed ({e})");
            return;
        }
    };
    check("npm pack", &out);
    let tarball = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(
        tarball,
        format!("leasehold-lock-{}.tgz", env!("CARGO_PKG_VERSION"))
    );
    // What a user gets: the package's files and the addon, nothing repo-only.
    let out = Command::new("tar")
        .arg("tzf")
        .arg(packed.path().join(&tarball))
        .output()
        .expect("run tar");
    check("listing the tarball", &out);
    let mut listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_start_matches("package/").to_string())
        .collect();
    listed.sort();
    let mut want: Vec<String> = PACKAGE_FILES.iter().map(|f| f.to_string()).collect();
    want.extend(
        listed
            .iter()
            .filter(|f| f.starts_with("leasehold.") && f.ends_with(".node"))
            .cloned(),
    );
    want.sort();
    assert_eq!(
        listed, want,
        "the tarball holds what a user needs, and only that"
    );
    assert!(
        listed.iter().any(|f| f.ends_with(".node")),
        "the addon is in the tarball: {listed:?}"
    );
    let out = Command::new("tar")
        .arg("xzf")
        .arg(packed.path().join(&tarball))
        .current_dir(packed.path())
        .output()
        .expect("run tar");
    check("unpacking the tarball", &out);
    // Installed as a dependency, `require('leasehold-lock')` resolves main and loads the addon.
    let app = packed.path().join("app");
    std::fs::create_dir_all(app.join("node_modules")).expect("mkdir");
    std::fs::rename(
        packed.path().join("package"),
        app.join("node_modules/leasehold-lock"),
    )
    .expect("install the unpacked package");
    let script = "const { Lease, holders } = require('leasehold-lock'); \
        const l = Lease.tryAcquire('packed.lock'); \
        if (!l || holders('packed.lock').state !== 'held') throw new Error('no lease'); \
        l.release(); \
        const plf = require('leasehold-lock/proper-lockfile'); \
        const r = plf.lockSync('packed.json', { realpath: false }); \
        if (!plf.checkSync('packed.json', { realpath: false })) throw new Error('no lock'); \
        r(); console.log('ok');";
    let out = Command::new("node")
        .args(["-e", script])
        .current_dir(&app)
        .output()
        .expect("run node");
    check("loading the packed package", &out);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    // The subpath module through package.json's exports, from ESM too.
    let script = "import { lockSync } from 'leasehold-lock/proper-lockfile'; \
        lockSync('esm.json', { realpath: false })(); console.log('ok');";
    let out = Command::new("node")
        .args(["--input-type=module", "-e", script])
        .current_dir(&app)
        .output()
        .expect("run node");
    check("importing leasehold-lock/proper-lockfile", &out);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
}

#[test]
fn npm_pack_dry_run_lists_only_what_a_user_needs() {
    if let Err(why) = testkit::faces::node() {
        println!("SKIP: node: {why}");
        return;
    }
    // bindings/node itself, as `npm pack` there (or `npm publish`) would pack it: package.json's
    // `files` decides, so a repo-only file listed there (build.js, tests) fails this.
    let npm = if cfg!(windows) { "npm.cmd" } else { "npm" };
    let out = match Command::new(npm)
        .args(["pack", "--dry-run", "--json", "--ignore-scripts"])
        .current_dir(source())
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            println!("SKIP: node: npm pack --dry-run: npm is not installed ({e})");
            return;
        }
    };
    check("npm pack --dry-run", &out);
    let doc: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("npm pack --json prints JSON");
    let mut listed: Vec<String> = doc[0]["files"]
        .as_array()
        .expect("npm pack --json lists files")
        .iter()
        .filter_map(|f| f["path"].as_str().map(str::to_string))
        // An addon a local build put beside index.js (`npm run build`) is packed too.
        .filter(|p| !(p.starts_with("leasehold.") && p.ends_with(".node")))
        .collect();
    listed.sort();
    let mut want: Vec<String> = PACKAGE_FILES.iter().map(|f| f.to_string()).collect();
    want.sort();
    assert_eq!(listed, want, "npm pack --dry-run in bindings/node");
}
