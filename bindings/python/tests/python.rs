//! Runs the Python package's pytest suite (`bindings/python/tests/*.py`) from the README's
//! test command, `cargo test --workspace --all-features`, and checks that `pip install
//! bindings/python` builds and installs it from source (PEP 517, maturin).
//!
//! How the suite gets the extension without linking it (a test binary that links a pyo3
//! extension module fails to link): cargo builds this crate's cdylib before running this
//! test, so it is copied from the target dir as `leasehold_lock/_native.abi3.so` next to a copy of
//! the Python sources, and pytest runs with that directory on `PYTHONPATH`. pytest (and
//! filelock and portalocker, which the suite compares against) live in a virtual environment
//! under the target dir, made once and reused.
//!
//! Skipped, with a `SKIP: python: <why>` line, only where python3 (3.9 or later) or its
//! `venv` module is missing.
//!
//! A third test runs filelock's own test suite against the package's `FileLock`,
//! `AsyncFileLock`, `Timeout` and `ReadWriteLock`: it downloads the newest filelock sdist pip
//! can get here (the sdist ships filelock's tests; they are never copied into this repository),
//! and runs three of its test modules (`FILELOCK_SUITE_MODULES`) with the pytest plugin in
//! `tests/filelock_suite/`, which substitutes the package's classes for filelock's, chooses the
//! tests of those classes and marks the deliberate differences (the package README,
//! "Switching from filelock"). It names the filelock version it ran, and prints
//! `SKIP: filelock suite: <why>` where no release can be had (offline, Python before 3.11).

#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use testkit::faces::{profile_dir, python};

/// The packages the suite imports besides `leasehold`, installed into the cached venv.
const REQUIREMENTS: &[&str] = &["pytest>=7", "filelock>=3.13", "portalocker>=2.8"];

/// The crate directory (`bindings/python`).
fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where this test keeps what it builds (`target/tmp`: cargo's directory for tests).
fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

fn run(cmd: &mut Command, what: &str) {
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(status.success(), "{what}: {status}");
}

/// A virtual environment at `dir` with `packages`, made unless a marker says it has them.
fn venv(python: &Path, dir: &Path, packages: &[&str]) -> PathBuf {
    let marker = dir.join("leasehold-requirements.txt");
    let want = packages.join("\n");
    let bin = dir.join("bin").join("python");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(want.as_str()) && bin.exists() {
        return bin;
    }
    let _ = std::fs::remove_dir_all(dir);
    run(
        Command::new(python).arg("-m").arg("venv").arg(dir),
        "python3 -m venv",
    );
    if !packages.is_empty() {
        run(
            Command::new(&bin)
                .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
                .args(packages),
            "pip install (from PyPI)",
        );
    }
    std::fs::write(&marker, want).expect("write the venv marker");
    bin
}

/// The cached test venv (made once per test binary run; both tests may ask at once).
fn test_venv(python: &Path) -> PathBuf {
    static VENV: OnceLock<PathBuf> = OnceLock::new();
    static MAKING: Mutex<()> = Mutex::new(());
    let _making = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    VENV.get_or_init(|| venv(python, &scratch().join("python-venv"), REQUIREMENTS))
        .clone()
}

/// A copy of the Python sources with the freshly built extension beside them.
///
/// The extension is the one `cargo test` built for this test, beside the test binary in
/// `target/PROFILE/deps` (the crate's rlib type makes cargo build the library, cdylib
/// included, before its integration tests); `target/PROFILE` has one only after a
/// `cargo build`, and may hold an older one.
fn staged_package() -> PathBuf {
    // Staged once per run: the tests run in parallel and share it.
    static STAGED: OnceLock<PathBuf> = OnceLock::new();
    STAGED.get_or_init(stage_package).clone()
}

fn stage_package() -> PathBuf {
    let root = scratch().join("python-pkg");
    testkit::faces::python_package(&root).unwrap_or_else(|why| {
        panic!("cargo builds the leasehold-python cdylib before this test: {why}")
    });
    root
}

#[test]
fn pytest_suite() {
    let python = match python() {
        Ok(p) => p,
        Err(why) => {
            println!("SKIP: python: {why}");
            return;
        }
    };
    let venv = test_venv(&python);
    let staged = staged_package();
    let cli = profile_dir().join("leasehold");
    let mut cmd = Command::new(&venv);
    // `faulthandler_timeout`: a test still running after 5 minutes prints every thread's
    // traceback (the run goes on), so a hang in CI says where it is.
    cmd.args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"])
        .args(["-o", "faulthandler_timeout=300"])
        .arg(crate_dir().join("tests"))
        .env("PYTHONPATH", &staged)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("LEASEHOLD_CRATE_VERSION", env!("CARGO_PKG_VERSION"))
        .stdin(Stdio::null());
    if cli.exists() {
        cmd.env("LEASEHOLD_CLI", &cli);
    }
    run(&mut cmd, "pytest bindings/python/tests");
}

#[test]
fn pip_installs_the_package_from_source_into_a_fresh_venv() {
    let python = match python() {
        Ok(p) => p,
        Err(why) => {
            println!("SKIP: python: {why}");
            return;
        }
    };
    let fresh = tempfile::tempdir_in(scratch()).expect("a temporary dir");
    let bin = venv(&python, fresh.path(), &[]);
    // maturin's cargo build gets a target dir of its own: this one is locked by the running
    // `cargo test`. Kept between runs, so only the first run compiles everything; the dev
    // profile, because what is checked is the PEP 517 path, not the optimiser.
    run(
        Command::new(&bin)
            .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
            .arg(crate_dir())
            .env("CARGO_TARGET_DIR", scratch().join("pep517-target"))
            .env("MATURIN_PEP517_ARGS", "--profile dev")
            .stdin(Stdio::null()),
        "pip install bindings/python",
    );
    let check = r#"
import importlib.metadata, os, sys
import leasehold_lock
here = os.path.dirname(leasehold_lock.__file__)
assert leasehold_lock.__version__ == sys.argv[1], (leasehold_lock.__version__, sys.argv[1])
assert importlib.metadata.version("leasehold-lock") == sys.argv[1], importlib.metadata.version("leasehold-lock")
for name in ("py.typed", "_native.pyi"):
    assert os.path.exists(os.path.join(here, name)), name + " is not in the wheel"
with leasehold_lock.acquire(os.path.join(sys.argv[2], "x.lock"), 5) as lease:
    lease.verify()
print("ok")
"#;
    let out = Command::new(&bin)
        .arg("-c")
        .arg(check)
        .arg(env!("CARGO_PKG_VERSION"))
        .arg(fresh.path())
        .current_dir(fresh.path())
        .output()
        .expect("run the installed package");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok",
        "the installed package: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What filelock's suite needs besides filelock itself (its "test" dependency group, less
/// coverage, randomised order and virtualenv).
const FILELOCK_SUITE_REQUIREMENTS: &[&str] = &[
    "pytest>=9",
    "pytest-asyncio>=1.3",
    "pytest-mock>=3.15",
    "pytest-timeout>=2.4",
];

/// filelock's test modules run against the package: the ones that test `FileLock`,
/// `AsyncFileLock` and `ReadWriteLock`.
const FILELOCK_SUITE_MODULES: &[&str] = &[
    "tests/test_filelock.py",
    "tests/test_async_filelock.py",
    "tests/test_read_write.py",
];

/// How many of the newest filelock releases are tried, newest first, before giving up (the
/// sdist of a release whose build backend needs a plugin the registry lacks cannot be had).
const FILELOCK_TRIES: usize = 8;

/// Whether `python` is 3.11 or later (filelock's current releases need it).
fn python_is_3_11(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import sys; sys.exit(sys.version_info < (3, 11))"])
        .status()
        .is_ok_and(|s| s.success())
}

/// Why a pip command failed, in a line: its last `ERROR:` line (a build backend's missing
/// requirement, say), else the last line it wrote.
fn last_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines
        .iter()
        .rev()
        .find_map(|l| l.split_once("ERROR: ").map(|(_, why)| why))
        .or(lines.last().copied())
        .unwrap_or("(no output)")
        .to_string()
}

/// Says `lines` on the test's stderr, past the harness's capture (which takes only `print!`
/// and `eprint!`), so that a passing run names what it ran too.
fn tell(lines: &[String]) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    for line in lines {
        let _ = writeln!(err, "filelock suite: {line}");
    }
}

/// The newest filelock release whose sdist pip can get here, unpacked (cached under the target
/// dir): its version and directory, or why none can be had.
fn filelock_sdist(venv: &Path) -> Result<(String, PathBuf), String> {
    let cache = scratch().join("filelock-sdist");
    let out = Command::new(venv)
        .args(["-m", "pip", "index", "versions", "filelock"])
        .args(["--disable-pip-version-check", "--no-input"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("pip cannot be run: {e}"))?;
    let listed = String::from_utf8_lossy(&out.stdout);
    let versions: Vec<String> = listed
        .lines()
        .find_map(|l| l.trim().strip_prefix("Available versions:"))
        .map(|v| v.split(',').map(|v| v.trim().to_string()).collect())
        .unwrap_or_default();
    if versions.is_empty() {
        return Err(format!(
            "pip cannot list filelock's releases: {}",
            last_line(&out.stderr)
        ));
    }
    let mut failed = Vec::new();
    for version in versions.iter().take(FILELOCK_TRIES) {
        let unpacked = cache.join(format!("filelock-{version}"));
        if unpacked.join(FILELOCK_SUITE_MODULES[0]).exists() {
            tell(&failed);
            return Ok((version.clone(), unpacked));
        }
        let download = cache.join("download");
        let _ = std::fs::remove_dir_all(&download);
        let got = Command::new(venv)
            .args([
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
            ])
            .args(["--disable-pip-version-check", "--no-input"])
            .arg(format!("filelock=={version}"))
            .arg("-d")
            .arg(&download)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("pip cannot be run: {e}"))?;
        if !got.status.success() {
            failed.push(format!(
                "filelock {version}: its sdist cannot be had here: {}",
                last_line(&got.stderr)
            ));
            continue;
        }
        let sdist = std::fs::read_dir(&download)
            .map_err(|e| format!("{}: {e}", download.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.to_string_lossy().ends_with(".tar.gz"))
            .ok_or_else(|| format!("pip download of filelock {version} left no .tar.gz"))?;
        let unpack = r#"
import sys, tarfile
with tarfile.open(sys.argv[1]) as tar:
    tar.extractall(sys.argv[2], **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
"#;
        run(
            Command::new(venv)
                .args(["-c", unpack])
                .arg(&sdist)
                .arg(&cache),
            "unpack filelock's sdist",
        );
        if !unpacked.join(FILELOCK_SUITE_MODULES[0]).exists() {
            return Err(format!(
                "filelock {version}'s sdist has no {}",
                FILELOCK_SUITE_MODULES[0]
            ));
        }
        tell(&failed);
        return Ok((version.clone(), unpacked));
    }
    Err(failed.join("; "))
}

#[test]
fn filelocks_own_suite_passes_against_the_package() {
    let python = match python() {
        Ok(p) => p,
        Err(why) => {
            println!("SKIP: filelock suite: {why}");
            return;
        }
    };
    if !python_is_3_11(&python) {
        println!("SKIP: filelock suite: filelock's current releases need Python 3.11 or later");
        return;
    }
    let venv = {
        static MAKING: Mutex<()> = Mutex::new(());
        let _making = MAKING.lock().unwrap_or_else(|e| e.into_inner());
        venv(
            &python,
            &scratch().join("filelock-suite-venv"),
            FILELOCK_SUITE_REQUIREMENTS,
        )
    };
    let (version, sdist) = match filelock_sdist(&venv) {
        Ok(found) => found,
        Err(why) => {
            println!("SKIP: filelock suite: {why}");
            return;
        }
    };
    tell(&[format!(
        "filelock {version} (its sdist from PyPI), in {}",
        sdist.display()
    )]);
    let staged = staged_package();
    let plugin = crate_dir().join("tests").join("filelock_suite");
    let path = std::env::join_paths([staged.clone(), plugin, sdist.join("src")])
        .expect("paths without the separator");
    let status = Command::new(&venv)
        .args([
            "-m",
            "pytest",
            "-q",
            "-rfEx",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
        ])
        .args(["-p", "leasehold_filelock_shim"])
        .args(FILELOCK_SUITE_MODULES)
        .current_dir(&sdist)
        .env("PYTHONPATH", path)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("LEASEHOLD_FILELOCK_SUBSTITUTE", "1")
        .stdin(Stdio::null())
        .status()
        .expect("run pytest");
    assert!(
        status.success(),
        "filelock {version}'s suite against leasehold_lock: {status}"
    );
}

#[test]
fn the_license_files_are_the_repositorys() {
    // The wheel and sdist carry bindings/python's copies (maturin takes a package's license
    // files from beside pyproject.toml); they must be the repository's.
    for name in ["LICENSE-MIT", "LICENSE-APACHE"] {
        let here = std::fs::read(crate_dir().join(name)).expect("the package's license file");
        let root = std::fs::read(crate_dir().join("../..").join(name)).expect("the repository's");
        assert!(
            here == root,
            "bindings/python/{name} differs from /{name}: copy it again"
        );
    }
}

/// What type-checks the typed surface: mypy and pyright (the PyPI wrapper, which fetches
/// pyright itself from npm on first use).
const TYPECHECK_REQUIREMENTS: &[&str] = &["mypy", "pyright"];

/// `tests/typecheck/uses_every_name.py`, a program that uses every public name of the package
/// as a typed program would, passes `mypy --strict` and pyright's strict mode, with the package
/// installed as a user has it (on the checker's `sys.path` through a `.pth` file, so the
/// checkers read its stubs and `py.typed` as they read any installed package's). Prints
/// `SKIP: typecheck: <why>` where the checkers cannot be installed (offline).
#[test]
fn every_public_name_type_checks_under_mypy_strict_and_pyright() {
    let python = match python() {
        Ok(p) => p,
        Err(why) => {
            println!("SKIP: typecheck: {why}");
            return;
        }
    };
    let dir = scratch().join("typecheck-venv");
    let bin = dir.join("bin").join("python");
    let marker = dir.join("leasehold-requirements.txt");
    let want = TYPECHECK_REQUIREMENTS.join("\n");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(want.as_str()) || !bin.exists() {
        let _ = std::fs::remove_dir_all(&dir);
        run(
            Command::new(&python).arg("-m").arg("venv").arg(&dir),
            "python3 -m venv",
        );
        let out = Command::new(&bin)
            .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
            .args(TYPECHECK_REQUIREMENTS)
            .stdin(Stdio::null())
            .output()
            .expect("run pip");
        if !out.status.success() {
            println!(
                "SKIP: typecheck: pip cannot install mypy and pyright: {}",
                last_line(&out.stderr)
            );
            return;
        }
        std::fs::write(&marker, want).expect("write the venv marker");
    }
    let staged = staged_package();
    let site = Command::new(&bin)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .expect("ask the venv for its site-packages");
    let site = PathBuf::from(String::from_utf8_lossy(&site.stdout).trim());
    std::fs::write(
        site.join("leasehold-under-test.pth"),
        format!("{}\n", staged.display()),
    )
    .expect("write the .pth file");

    let program = crate_dir().join("tests/typecheck/uses_every_name.py");
    let names = r#"
import sys, leasehold_lock
text = open(sys.argv[1]).read()
missing = [n for n in leasehold_lock.__all__ if n not in text]
assert not missing, "the program does not use " + ", ".join(missing)
"#;
    run(
        Command::new(&bin).args(["-c", names]).arg(&program),
        "uses_every_name.py names every public name",
    );

    let work = tempfile::tempdir_in(scratch()).expect("a temporary dir");
    let out = Command::new(&bin)
        .args(["-m", "mypy", "--strict", "--no-incremental", "--cache-dir"])
        .arg(work.path().join("mypy-cache"))
        .arg("--python-executable")
        .arg(&bin)
        .arg(&program)
        .current_dir(work.path())
        .stdin(Stdio::null())
        .output()
        .expect("run mypy");
    assert!(
        out.status.success(),
        "mypy --strict {}:\n{}{}",
        program.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // pyright takes files under its project directory: a copy of the program, beside a
    // config naming the venv.
    std::fs::copy(&program, work.path().join("uses_every_name.py")).expect("copy the program");
    let config = pyright_config(&dir);
    std::fs::write(work.path().join("pyrightconfig.json"), config).expect("write the config");
    let out = Command::new(dir.join("bin").join("pyright"))
        .args(["-p", "pyrightconfig.json"])
        .current_dir(work.path())
        .stdin(Stdio::null())
        .output()
        .expect("run pyright");
    let said = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() && !said.contains(" - error: ") {
        println!(
            "SKIP: typecheck: pyright cannot run here (it fetches itself from npm): {}",
            last_line(&[out.stdout.as_slice(), out.stderr.as_slice()].concat())
        );
        return;
    }
    assert!(
        out.status.success() && said.contains("0 errors"),
        "pyright (strict) {}:\n{said}{}",
        program.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// pyright's configuration: strict, Python 3.9 (the package's oldest), the checker venv.
fn pyright_config(venv: &Path) -> String {
    let parent = venv.parent().expect("the venv's directory");
    let name = venv.file_name().expect("the venv's name");
    format!(
        r#"{{ "typeCheckingMode": "strict", "pythonVersion": "3.9", "venvPath": {:?}, "venv": {:?}, "include": ["uses_every_name.py"] }}"#,
        parent.display().to_string(),
        name.to_string_lossy()
    )
}
