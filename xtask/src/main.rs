//! The repository's tasks (the cargo-xtask convention: `cargo xtask TASK`, an alias in
//! `.cargo/config.toml`).
//!
//! * `cargo xtask dist [--target TRIPLE]... [--no-cli]`: builds into `dist/` every release artifact this
//!   machine can build (the Python wheels and sdist, the npm packages — the main one and one per
//!   platform — and the CLI archives) and `dist/SHA256SUMS`; what it cannot build it says, one
//!   `cannot build:` line each. CONTRIBUTING.md has the table of targets and builders.
//! * `cargo xtask install-test`: installs what `dist/` holds for this machine the way a user
//!   does, with no Rust toolchain on PATH, and runs the bindings' own test suites against the
//!   installed packages.
//!
//! The Python tools the builds need (maturin, ziglang, cargo-zigbuild, auditwheel) live in a
//! virtual environment under `target/dist-tools`, made on first use from PyPI at pinned versions.

mod dist;
mod install_test;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// What a task reports when it stops: the message, printed as one line.
type Result<T = ()> = std::result::Result<T, String>;

/// The versions of the build tools, installed from PyPI into `target/dist-tools/venv`.
/// cargo-zigbuild is the version maturin embeds (their zig wrappers are the same).
const TOOLS: &[&str] = &[
    "maturin==1.16.0",
    "ziglang==0.17.1",
    "cargo-zigbuild==0.24.0",
    "auditwheel==6.8.2",
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("dist") => dist::main(&args[1..]),
        Some("install-test") => install_test::main(&args[1..]),
        _ => Err(
            "usage: cargo xtask dist [--target TRIPLE]... [--no-cli] | cargo xtask install-test"
                .to_string(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("xtask: {why}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root (this crate's parent directory).
fn root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The workspace's version (this crate's is the workspace's).
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// The target directory (`CARGO_TARGET_DIR`, else `target/`).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// The executable `name` in a virtual environment's scripts directory.
fn venv_bin(venv: &Path, name: &str) -> PathBuf {
    if cfg!(windows) {
        venv.join("Scripts").join(format!("{name}.exe"))
    } else {
        venv.join("bin").join(name)
    }
}

/// Runs `cmd`, echoing it; `Err` names it and its exit status.
fn run(cmd: &mut Command) -> Result {
    let shown = show(cmd);
    println!("$ {shown}");
    let status = cmd
        .status()
        .map_err(|e| format!("{shown}: cannot start it: {e}"))?;
    match status.success() {
        true => Ok(()),
        false => Err(format!("{shown}: {status}")),
    }
}

/// Runs `cmd` and returns its standard output; `Err` has its standard error.
fn output(cmd: &mut Command) -> Result<String> {
    let shown = show(cmd);
    let out = cmd
        .output()
        .map_err(|e| format!("{shown}: cannot start it: {e}"))?;
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err(format!(
            "{shown}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

fn show(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `name` is an executable on `path` (a PATH-style list).
fn on_path(name: &str, path: &OsString) -> bool {
    std::env::split_paths(path).any(|dir| {
        [name.to_string(), format!("{name}.exe")]
            .iter()
            .any(|n| dir.join(n).is_file())
    })
}

/// The build tools' virtual environment, made (or brought to the pinned versions) first.
fn tools_venv() -> Result<PathBuf> {
    let venv = target_dir().join("dist-tools").join("venv");
    let marker = venv.join("xtask-tools.txt");
    let want = TOOLS.join("\n");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(want.as_str()) {
        return Ok(venv);
    }
    let python = std::env::var_os("LEASEHOLD_DIST_PYTHON").unwrap_or_else(|| {
        if cfg!(windows) {
            "python".into()
        } else {
            "python3".into()
        }
    });
    run(Command::new(&python).arg("-m").arg("venv").arg(&venv))
        .map_err(|e| format!("making the build tools' venv (python3 with venv needed): {e}"))?;
    run(Command::new(venv_bin(&venv, "python"))
        .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
        .args(TOOLS))
    .map_err(|e| format!("installing the build tools from PyPI: {e}"))?;
    std::fs::write(&marker, want).map_err(|e| format!("{}: {e}", marker.display()))?;
    Ok(venv)
}

/// PATH with `dir` first.
fn path_with(dir: &Path) -> OsString {
    let rest = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::iter::once(dir.to_path_buf()).chain(std::env::split_paths(&rest));
    std::env::join_paths(dirs).unwrap_or(rest)
}

/// Copies the repository's LICENSE files into `dir`.
fn copy_licenses(dir: &Path) -> Result {
    for name in ["LICENSE-MIT", "LICENSE-APACHE"] {
        std::fs::copy(root().join(name), dir.join(name))
            .map_err(|e| format!("copying {name} into {}: {e}", dir.display()))?;
    }
    Ok(())
}
