//! `cargo xtask dist`: the release artifacts this machine can build, into `dist/`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::{
    Result, copy_licenses, on_path, output, path_with, root, run, target_dir, tools_venv, venv_bin,
    version,
};

/// One platform the release ships for: a Python wheel, an npm platform package and, where
/// `cli` says so, a CLI archive.
pub struct Target {
    pub triple: &'static str,
    /// The npm platform package's suffix (`leasehold-lock-<npm>`), napi-rs's naming; the
    /// loader (bindings/node/platform.js) computes the same names.
    pub npm: &'static str,
    pub os: &'static str,
    pub cpu: &'static str,
    /// The C library, for Linux packages (npm's `libc` field).
    pub libc: Option<&'static str>,
    /// maturin's `--compatibility` (the wheel's platform tag) for Linux wheels.
    pub wheel_tag: Option<&'static str>,
    /// Whether a CLI archive is built for this target (Linux ships the static musl binaries).
    pub cli: bool,
    /// Whether the release publishes this target's packages (and the main npm package names
    /// its platform package as an optional dependency).
    pub published: bool,
}

pub const TARGETS: &[Target] = &[
    Target {
        triple: "x86_64-unknown-linux-gnu",
        npm: "linux-x64-gnu",
        os: "linux",
        cpu: "x64",
        libc: Some("glibc"),
        wheel_tag: Some("manylinux2014"),
        cli: false,
        published: true,
    },
    Target {
        triple: "aarch64-unknown-linux-gnu",
        npm: "linux-arm64-gnu",
        os: "linux",
        cpu: "arm64",
        libc: Some("glibc"),
        wheel_tag: Some("manylinux2014"),
        cli: false,
        published: true,
    },
    Target {
        triple: "x86_64-unknown-linux-musl",
        npm: "linux-x64-musl",
        os: "linux",
        cpu: "x64",
        libc: Some("musl"),
        wheel_tag: Some("musllinux_1_2"),
        cli: true,
        published: true,
    },
    Target {
        triple: "aarch64-unknown-linux-musl",
        npm: "linux-arm64-musl",
        os: "linux",
        cpu: "arm64",
        libc: Some("musl"),
        wheel_tag: Some("musllinux_1_2"),
        cli: true,
        published: true,
    },
    Target {
        triple: "x86_64-apple-darwin",
        npm: "darwin-x64",
        os: "darwin",
        cpu: "x64",
        libc: None,
        wheel_tag: None,
        cli: true,
        published: true,
    },
    Target {
        triple: "aarch64-apple-darwin",
        npm: "darwin-arm64",
        os: "darwin",
        cpu: "arm64",
        libc: None,
        wheel_tag: None,
        cli: true,
        published: true,
    },
    Target {
        triple: "x86_64-pc-windows-msvc",
        npm: "win32-x64-msvc",
        os: "win32",
        cpu: "x64",
        libc: None,
        wheel_tag: None,
        cli: true,
        published: true,
    },
    // Cross-built on Linux with MinGW, to build and load the Windows artifacts under Wine;
    // the release publishes the MSVC build instead (same wheel tag, win_amd64).
    Target {
        triple: "x86_64-pc-windows-gnu",
        npm: "win32-x64-gnu",
        os: "win32",
        cpu: "x64",
        libc: None,
        wheel_tag: None,
        cli: true,
        published: false,
    },
];

/// How a target is built on this host.
#[derive(Clone, Copy, PartialEq)]
enum How {
    /// The host's own toolchain (cargo, the platform's linker).
    Native,
    /// Cross, with zig as the C compiler and linker (cargo-zigbuild; maturin --zig).
    Zig,
}

/// How `t` is built on `host`, or why it cannot be.
fn how(host: &str, t: &Target) -> Result<How> {
    if t.triple == host && !host.contains("linux") {
        return Ok(How::Native);
    }
    let linux_host = host.contains("linux");
    match t.os {
        // Even the host's own Linux target goes through zig: its glibc 2.17 floor is what
        // makes the wheel manylinux2014 and the addon load on old distributions.
        "linux" if linux_host => Ok(How::Zig),
        "darwin" if linux_host => Ok(How::Zig),
        "darwin" if host.contains("apple") => Ok(How::Native),
        "win32" if linux_host && t.triple.ends_with("-gnu") => {
            // cargo's default linker for the target is MinGW's gcc.
            match on_path(
                "x86_64-w64-mingw32-gcc",
                &std::env::var_os("PATH").unwrap_or_default(),
            ) {
                true => Ok(How::Native),
                false => {
                    Err("x86_64-w64-mingw32-gcc is missing (Debian: gcc-mingw-w64-x86-64)".into())
                }
            }
        }
        "win32" if t.triple.ends_with("-gnu") => Err(format!(
            "the MinGW build is made on Linux; a Windows host builds the MSVC one (this host is {host})"
        )),
        "win32" => Err(format!(
            "needs the MSVC toolchain (what Windows' Python and Node are built with): built on a \
             Windows runner by .github/workflows/release.yml (this host is {host})"
        )),
        _ => Err(format!(
            "not built on {host}: .github/workflows/release.yml builds it on its own runner"
        )),
    }
}

/// One artifact's build: (the tools' venv, dist/, the target, how).
type Step = fn(&Path, &Path, &Target, How) -> Result;

/// `cargo xtask dist [--target TRIPLE]... [--no-cli]`.
pub fn main(args: &[String]) -> Result {
    let mut only: Vec<&str> = Vec::new();
    let mut no_cli = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            // The packages only (.ci/run: the CLI archives are the slowest builds, and the
            // gate tests the CLI itself).
            "--no-cli" => no_cli = true,
            "--target" => only.push(it.next().ok_or("--target needs a target triple")?.as_str()),
            other => return Err(format!("dist: unknown argument {other:?}")),
        }
    }
    for t in &only {
        if !TARGETS.iter().any(|k| k.triple == *t) {
            return Err(format!(
                "dist: {t} is not a release target (xtask/src/dist.rs lists them)"
            ));
        }
    }
    let dist = root().join("dist");
    if dist.exists() {
        std::fs::remove_dir_all(&dist).map_err(|e| format!("removing {}: {e}", dist.display()))?;
    }
    std::fs::create_dir_all(&dist).map_err(|e| format!("{}: {e}", dist.display()))?;
    let venv = tools_venv()?;
    let host = host()?;
    let mut cannot: Vec<String> = Vec::new();
    let mut failed: Vec<String> = Vec::new();

    // What every platform shares: the sdist and the main npm package.
    if let Err(e) = sdist(&venv, &dist) {
        failed.push(format!("the Python sdist: {e}"));
    }
    if let Err(e) = npm_main(&dist) {
        failed.push(format!("the npm package leasehold-lock: {e}"));
    }
    for t in TARGETS {
        if !only.is_empty() && !only.contains(&t.triple) {
            continue;
        }
        let how = match how(&host, t) {
            Ok(how) => how,
            Err(why) => {
                cannot.push(format!("{}: {why}", t.triple));
                continue;
            }
        };
        if let Err(why) = rust_target(t.triple) {
            cannot.push(format!("{}: {why}", t.triple));
            continue;
        }
        let steps: [(&str, Step); 3] = [
            ("the Python wheel", wheel),
            ("the npm platform package", npm_platform),
            ("the CLI archive", cli),
        ];
        for (what, step) in steps {
            if what == "the CLI archive" && (!t.cli || no_cli) {
                continue;
            }
            if what == "the CLI archive" && t.os == "darwin" && how == How::Zig {
                cannot.push(format!(
                    "{}: the CLI: its etcd feature's TLS links Apple's Security and \
                     CoreFoundation frameworks, which zig does not ship: built on a macOS \
                     runner by .github/workflows/release.yml",
                    t.triple
                ));
                continue;
            }
            if let Err(e) = step(&venv, &dist, t, how) {
                failed.push(format!("{what} for {}: {e}", t.triple));
            }
        }
    }
    checksums(&dist)?;

    println!("\n=== dist/ ({})", dist.display());
    for (name, size) in listing(&dist)? {
        println!("{size:>12}  {name}");
    }
    for line in &cannot {
        println!("cannot build: {line}");
    }
    for line in &failed {
        println!("FAILED: {line}");
    }
    match failed.is_empty() {
        true => Ok(()),
        false => Err(format!("{} artifact(s) failed to build", failed.len())),
    }
}

/// The host's target triple (`rustc -vV`).
fn host() -> Result<String> {
    let out = output(Command::new("rustc").arg("-vV"))?;
    out.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_string)
        .ok_or_else(|| "rustc -vV printed no host line".to_string())
}

/// Makes sure the standard library of `triple` is installed (rustup), or says why not.
fn rust_target(triple: &str) -> Result {
    let installed = output(Command::new("rustup").args(["target", "list", "--installed"]))
        .map_err(|e| format!("rustup is needed to add the target: {e}"))?;
    if installed.lines().any(|l| l.trim() == triple) {
        return Ok(());
    }
    run(Command::new("rustup").args(["target", "add", triple]))
        .map_err(|e| format!("rustup could not add the target (offline?): {e}"))
}

/// `cargo` (Native) or `cargo-zigbuild` (Zig) building `package` for `t`, profile `dist`.
fn cargo_build(venv: &Path, t: &Target, how: How, package: &str, features: &[&str]) -> Command {
    let mut cmd = match how {
        How::Native => {
            let mut c = Command::new("cargo");
            c.arg("build");
            c
        }
        How::Zig => {
            let mut c = Command::new(venv_bin(venv, "cargo-zigbuild"));
            c.arg("zigbuild");
            c
        }
    };
    // glibc 2.17, the manylinux2014 floor, for the gnu targets built with zig.
    let target = match (how, t.libc) {
        (How::Zig, Some("glibc")) => format!("{}.2.17", t.triple),
        _ => t.triple.to_string(),
    };
    cmd.args([
        "--profile",
        "dist",
        "--locked",
        "-p",
        package,
        "--target",
        &target,
    ])
    .current_dir(root())
    // cargo-zigbuild runs zig from the ziglang package (`python -m ziglang`).
    .env(
        "PATH",
        path_with(&venv_bin(venv, "python").with_file_name("")),
    );
    for f in features {
        cmd.args(["--features", f]);
    }
    cmd
}

/// The `dist` profile's output directory of `t` (the workspace's Cargo.toml has the profile).
fn release_dir(t: &Target) -> PathBuf {
    target_dir().join(t.triple).join("dist")
}

/// The Python sdist (`maturin sdist`).
fn sdist(venv: &Path, dist: &Path) -> Result {
    run(Command::new(venv_bin(venv, "maturin"))
        .args([
            "sdist",
            "--manifest-path",
            "bindings/python/Cargo.toml",
            "--out",
        ])
        .arg(dist)
        .current_dir(root()))
}

/// The abi3 wheel for `t` (maturin), its Linux platform tag confirmed by `auditwheel show`.
fn wheel(venv: &Path, dist: &Path, t: &Target, how: How) -> Result {
    let before = files(dist)?;
    let mut cmd = Command::new(venv_bin(venv, "maturin"));
    cmd.args([
        "build",
        "--profile",
        "dist",
        "--locked",
        "--manifest-path",
        "bindings/python/Cargo.toml",
        "--target",
        t.triple,
        "--out",
    ])
    .arg(dist)
    .current_dir(root())
    // A target directory of its own: maturin's zig settings differ from cargo-zigbuild's
    // (cargo fingerprints them), and sharing one directory rebuilt every crate each run.
    .env("CARGO_TARGET_DIR", target_dir().join("dist-wheels"))
    .env(
        "PATH",
        path_with(&venv_bin(venv, "python").with_file_name("")),
    );
    if how == How::Zig {
        cmd.arg("--zig");
    }
    if let Some(tag) = t.wheel_tag {
        cmd.args(["--compatibility", tag]);
    }
    run(&mut cmd)?;
    let made: Vec<String> = files(dist)?
        .into_iter()
        .filter(|f| f.ends_with(".whl") && !before.contains(f))
        .collect();
    let [wheel] = made.as_slice() else {
        return Err(format!("maturin made {made:?}, not one wheel"));
    };
    if let Some(tag) = t.wheel_tag.filter(|t| t.starts_with("musllinux")) {
        // auditwheel resolves the extension's libc.so on the host: on a glibc host that is
        // glibc's linker script, which it cannot read. A musl host (Alpine) can check it.
        println!("unchecked: {wheel}: auditwheel show cannot check a {tag} wheel on a glibc host");
        return Ok(());
    }
    if let Some(tag) = t.wheel_tag {
        let shown = output(
            Command::new(venv_bin(venv, "auditwheel"))
                .arg("show")
                .arg(dist.join(wheel)),
        )?;
        let want = match tag {
            "manylinux2014" => "manylinux_2_17",
            other => other,
        };
        let text = shown.split_whitespace().collect::<Vec<_>>().join(" ");
        println!("auditwheel show {wheel}: {text}");
        if !text.contains(&format!("\"{want}_")) && !text.contains(&format!("{want}_")) {
            return Err(format!(
                "auditwheel show does not confirm {tag} for {wheel}: {text}"
            ));
        }
    }
    Ok(())
}

/// The main npm package `leasehold-lock`: bindings/node's files (package.json's `files`), with
/// every platform package as an optional dependency at this exact version (what napi-rs's
/// `napi prepublish` adds), packed into `dist/`.
fn npm_main(dist: &Path) -> Result {
    let src = root().join("bindings/node");
    let stage = target_dir().join("dist-stage/npm/leasehold-lock");
    fresh_dir(&stage)?;
    let text = std::fs::read_to_string(src.join("package.json"))
        .map_err(|e| format!("bindings/node/package.json: {e}"))?;
    let mut manifest: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("bindings/node/package.json: {e}"))?;
    let listed: Vec<String> = manifest["files"]
        .as_array()
        .ok_or("bindings/node/package.json has no \"files\" list")?
        .iter()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect();
    for name in listed {
        if name.contains('*') {
            continue; // the addon a local build copies beside index.js: never in the release
        }
        std::fs::copy(src.join(&name), stage.join(&name))
            .map_err(|e| format!("copying bindings/node/{name}: {e}"))?;
    }
    // Without what only the repository uses (scripts, devDependencies); with the platform
    // packages as optional dependencies: npm installs the one whose os/cpu/libc match the
    // machine and skips the others.
    let object = manifest
        .as_object_mut()
        .ok_or("bindings/node/package.json is not an object")?;
    object.remove("scripts");
    object.remove("devDependencies");
    let deps: serde_json::Map<String, serde_json::Value> = TARGETS
        .iter()
        .filter(|t| t.published)
        .map(|t| (format!("leasehold-lock-{}", t.npm), version().into()))
        .collect();
    object.insert("optionalDependencies".into(), deps.into());
    let out = serde_json::to_string_pretty(&manifest).map_err(|e| e.to_string())?;
    std::fs::write(stage.join("package.json"), out + "\n")
        .map_err(|e| format!("package.json: {e}"))?;
    npm_pack(&stage, dist)
}

/// The npm platform package `leasehold-lock-<npm>`: the addon built for `t`, the LICENSE
/// files and a README pointing at the main package.
fn npm_platform(venv: &Path, dist: &Path, t: &Target, how: How) -> Result {
    let mut cmd = cargo_build(venv, t, how, "leasehold-node", &[]);
    if t.libc == Some("musl") {
        // An addon is a shared library: musl's default static C runtime cannot make one.
        let var = format!(
            "CARGO_TARGET_{}_RUSTFLAGS",
            t.triple.to_uppercase().replace('-', "_")
        );
        cmd.env(var, "-C target-feature=-crt-static");
    }
    run(&mut cmd)?;
    let lib = match t.os {
        "win32" => "leasehold_node.dll",
        "darwin" => "libleasehold_node.dylib",
        _ => "libleasehold_node.so",
    };
    let name = format!("leasehold-lock-{}", t.npm);
    let stage = target_dir().join("dist-stage/npm").join(&name);
    fresh_dir(&stage)?;
    let addon = format!("leasehold.{}.node", t.npm);
    std::fs::copy(release_dir(t).join(lib), stage.join(&addon))
        .map_err(|e| format!("copying the addon {lib}: {e}"))?;
    copy_licenses(&stage)?;
    let libc = t
        .libc
        .map(|l| format!("\n  \"libc\": [\"{l}\"],"))
        .unwrap_or_default();
    let manifest = format!(
        r#"{{
  "name": "{name}",
  "version": "{version}",
  "description": "The {npm} native addon of leasehold-lock (install leasehold-lock, which depends on it)",
  "license": "MIT OR Apache-2.0",
  "main": "{addon}",
  "files": ["{addon}", "LICENSE-MIT", "LICENSE-APACHE", "README.md"],
  "os": ["{os}"],
  "cpu": ["{cpu}"],{libc}
  "engines": {{ "node": ">=20" }}
}}
"#,
        version = version(),
        npm = t.npm,
        os = t.os,
        cpu = t.cpu,
    );
    std::fs::write(stage.join("package.json"), manifest)
        .map_err(|e| format!("package.json: {e}"))?;
    std::fs::write(
        stage.join("README.md"),
        format!(
            "# {name}\n\nThe native addon of [leasehold-lock](https://www.npmjs.com/package/leasehold-lock) \
             for {npm} ({triple}). Install `leasehold-lock`: npm installs this package with it, on \
             this platform only.\n",
            npm = t.npm,
            triple = t.triple
        ),
    )
    .map_err(|e| format!("README.md: {e}"))?;
    npm_pack(&stage, dist)
}

fn npm_pack(dir: &Path, dist: &Path) -> Result {
    let npm = if cfg!(windows) { "npm.cmd" } else { "npm" };
    run(Command::new(npm)
        .args(["pack", "--silent", "--pack-destination"])
        .arg(dist)
        .current_dir(dir))
}

/// The CLI for `t`, with the etcd feature, archived with the LICENSE files and the README
/// (`.zip` for Windows, `.tar.gz` elsewhere).
fn cli(venv: &Path, dist: &Path, t: &Target, how: How) -> Result {
    run(&mut cargo_build(venv, t, how, "leasehold-cli", &["etcd"]))?;
    let exe = if t.os == "win32" {
        "leasehold.exe"
    } else {
        "leasehold"
    };
    let base = format!("leasehold-{}-{}", version(), t.triple);
    let stage = target_dir().join("dist-stage/cli");
    fresh_dir(&stage.join(&base))?;
    std::fs::copy(release_dir(t).join(exe), stage.join(&base).join(exe))
        .map_err(|e| format!("copying {exe}: {e}"))?;
    copy_licenses(&stage.join(&base))?;
    std::fs::copy(
        root().join("README.md"),
        stage.join(&base).join("README.md"),
    )
    .map_err(|e| format!("copying README.md: {e}"))?;
    if t.os == "win32" {
        // Python's zipfile: every host that runs maturin has it.
        let archive = dist.join(format!("{base}.zip"));
        run(Command::new(venv_bin(venv, "python"))
            .args(["-m", "zipfile", "-c"])
            .arg(&archive)
            .arg(&base)
            .current_dir(&stage))
    } else {
        let archive = dist.join(format!("{base}.tar.gz"));
        run(Command::new("tar")
            .arg("czf")
            .arg(&archive)
            .arg(&base)
            .current_dir(&stage))
    }
}

/// `dist/SHA256SUMS`: `<hex>  <name>` for every other file (`sha256sum -c` reads it).
fn checksums(dist: &Path) -> Result {
    let mut sums = String::new();
    for name in files(dist)? {
        if name == "SHA256SUMS" {
            continue;
        }
        let bytes = std::fs::read(dist.join(&name)).map_err(|e| format!("{name}: {e}"))?;
        let digest = Sha256::digest(&bytes);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        writeln!(sums, "{hex}  {name}").map_err(|e| e.to_string())?;
    }
    std::fs::write(dist.join("SHA256SUMS"), sums).map_err(|e| format!("SHA256SUMS: {e}"))
}

/// The file names in `dir`, sorted.
fn files(dir: &Path) -> Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    Ok(names)
}

/// The files of `dir` with their sizes.
fn listing(dir: &Path) -> Result<Vec<(String, u64)>> {
    files(dir)?
        .into_iter()
        .map(|n| {
            let len = std::fs::metadata(dir.join(&n))
                .map_err(|e| format!("{n}: {e}"))?
                .len();
            Ok((n, len))
        })
        .collect()
}

fn fresh_dir(dir: &Path) -> Result {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))
}
