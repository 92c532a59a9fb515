//! What a suite that runs a binding needs of the machine and of cargo's build: `node` of a
//! version the Node package supports, `python3` of one the Python package supports, and the
//! library cargo built for a binding in this target directory. One copy for the bindings'
//! own suites and the CLI's cross-face test; each answers `Err(why)` for a `SKIP:` line.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The oldest Node the package supports.
pub const NODE_MAJOR: u32 = 20;
/// The oldest CPython the package supports.
pub const PYTHON: (u32, u32) = (3, 9);

/// `node`'s version (`v22.1.0`) if it is installed and at least [`NODE_MAJOR`]; else why not.
pub fn node() -> Result<String, String> {
    let out = Command::new("node")
        .arg("--version")
        .output()
        .map_err(|e| format!("node is not installed ({e})"))?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let major: u32 = version
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .ok_or_else(|| format!("cannot read node's version {version:?}"))?;
    if major < NODE_MAJOR {
        return Err(format!("node {version} is older than {NODE_MAJOR}"));
    }
    Ok(version)
}

/// `python3` (or `LEASEHOLD_PYTHON`) if it runs, has `venv` and `ensurepip`, and is at least
/// [`PYTHON`]; else why not.
pub fn python() -> Result<PathBuf, String> {
    let python =
        PathBuf::from(std::env::var_os("LEASEHOLD_PYTHON").unwrap_or_else(|| "python3".into()));
    let out = Command::new(&python)
        .args([
            "-c",
            "import sys, venv, ensurepip; print('%d.%d' % sys.version_info[:2])",
        ])
        .output()
        .map_err(|e| format!("{} cannot be run: {e}", python.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} has no venv/ensurepip module: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let found = version
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
        .ok_or_else(|| format!("cannot read the version of {}: {version}", python.display()))?;
    if found < PYTHON {
        return Err(format!(
            "{} is Python {version}; the package needs {}.{} or later",
            python.display(),
            PYTHON.0,
            PYTHON.1
        ));
    }
    Ok(python)
}

/// The profile directory the running test binary was built into (`target/debug`).
///
/// # Panics
/// When the test binary does not live in `<target>/<profile>/deps`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("the test binary lives in <target>/<profile>/deps")
        .to_path_buf()
}

/// The first of `names` cargo built in this profile (in `deps/` or the profile directory):
/// a binding's library (`libleasehold_node.so`, `libleasehold_python.so`, ...).
pub fn built(names: &[&str]) -> Option<PathBuf> {
    let profile = profile_dir();
    let deps = profile.join("deps");
    names
        .iter()
        .flat_map(|n| [deps.join(n), profile.join(n)])
        .find(|p| p.exists())
}

/// The Python package (`bindings/python/python/leasehold_lock`'s sources, its stubs and
/// `py.typed`) with the extension cargo built in this target directory beside them as
/// `_native.abi3.so`, staged in `root/leasehold_lock` (made afresh): put `root` on
/// `PYTHONPATH`. `Err(why)` when the extension is not built here (`cargo test --workspace
/// --all-features` builds it; a suite of another crate may find an older one).
pub fn python_package(root: &Path) -> Result<(), String> {
    let built = built(&["libleasehold_python.so", "libleasehold_python.dylib"]).ok_or(
        "the Python extension is not built in this target dir (cargo build -p leasehold-python, or cargo test --workspace --all-features)",
    )?;
    let sources =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bindings/python/python/leasehold_lock");
    let pkg = root.join("leasehold_lock");
    let _ = std::fs::remove_dir_all(&pkg);
    std::fs::create_dir_all(&pkg).map_err(|e| format!("make {}: {e}", pkg.display()))?;
    let entries = std::fs::read_dir(&sources).map_err(|e| format!("{}: {e}", sources.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", sources.display()))?;
        let name = entry.file_name();
        let keep = Path::new(&name)
            .extension()
            .is_some_and(|e| e == "py" || e == "pyi")
            || name == "py.typed";
        if keep {
            std::fs::copy(entry.path(), pkg.join(&name))
                .map_err(|e| format!("copy {}: {e}", entry.path().display()))?;
        }
    }
    std::fs::copy(&built, pkg.join("_native.abi3.so"))
        .map_err(|e| format!("copy the extension {}: {e}", built.display()))?;
    Ok(())
}
