//! `crashfs`: mount the crash-simulating file system, cut its power, or run the power-loss
//! torture of leasehold's stores on it.
//!
//! ```text
//! crashfs mount BACKING MOUNTPOINT [--control SOCKET] [--ignore-file-fsync] [--ignore-dir-fsync]
//! crashfs cut --control SOCKET [--policy drop|keep|prefix|torn] [--seed N]
//! crashfs torture [--cuts N] [--seconds S] [--leasehold PATH] [--seed N] [--policy P] ...
//! ```

#![deny(unsafe_code)]

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("crashfs: Linux only (FUSE)");
    std::process::exit(2);
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::path::PathBuf;
    use std::process::ExitCode;
    use std::time::Duration;

    use clap::{Parser, Subcommand, ValueEnum};
    use crashfs::torture;
    use crashfs::{CutPolicy, Faults, Mounted};

    #[derive(Parser)]
    #[command(
        name = "crashfs",
        about = "A crash-simulating FUSE file system and leasehold's power-loss torture"
    )]
    struct Cli {
        #[command(subcommand)]
        command: Cmd,
    }

    #[derive(Clone, Copy, ValueEnum)]
    enum Policy {
        /// Drop every unsynced operation.
        Drop,
        /// Keep every unsynced operation.
        Keep,
        /// Keep a random prefix of each file's and directory's unsynced operations.
        Prefix,
        /// As `prefix`, and the first dropped write may be kept in part (torn).
        Torn,
    }

    impl From<Policy> for CutPolicy {
        fn from(p: Policy) -> CutPolicy {
            match p {
                Policy::Drop => CutPolicy::DropAll,
                Policy::Keep => CutPolicy::KeepAll,
                Policy::Prefix => CutPolicy::RandomPrefix { torn: false },
                Policy::Torn => CutPolicy::RandomPrefix { torn: true },
            }
        }
    }

    #[derive(clap::Args, Clone, Copy)]
    struct FaultArgs {
        /// Self-check: acknowledge fsync of a regular file and do nothing (as if the code under
        /// test skipped it).
        #[arg(long)]
        ignore_file_fsync: bool,
        /// Self-check: acknowledge fsync of a directory and do nothing.
        #[arg(long)]
        ignore_dir_fsync: bool,
    }

    impl From<FaultArgs> for Faults {
        fn from(f: FaultArgs) -> Faults {
            Faults {
                ignore_file_fsync: f.ignore_file_fsync,
                ignore_dir_fsync: f.ignore_dir_fsync,
            }
        }
    }

    #[derive(Subcommand)]
    enum Cmd {
        /// Mount BACKING at MOUNTPOINT until unmounted (fusermount3 -u MOUNTPOINT) or cut.
        Mount {
            backing: PathBuf,
            mountpoint: PathBuf,
            /// A Unix socket accepting `cut POLICY SEED` and `stats` lines.
            #[arg(long)]
            control: Option<PathBuf>,
            #[command(flatten)]
            faults: FaultArgs,
        },
        /// Cut the power of a mount started with --control: drop its volatile layer and unmount it.
        Cut {
            #[arg(long)]
            control: PathBuf,
            #[arg(long, value_enum, default_value = "torn")]
            policy: Policy,
            #[arg(long, default_value_t = 0)]
            seed: u64,
        },
        /// The power-loss torture of leasehold's stores (see RELIABILITY.md).
        Torture {
            /// Power cuts to make.
            #[arg(long, default_value_t = 20)]
            cuts: u32,
            /// Stop after this many seconds even if fewer cuts were made.
            #[arg(long, default_value_t = 120)]
            seconds: u64,
            /// The leasehold binary (default: $LEASEHOLD_BIN, else `leasehold` beside this binary;
            /// build it with `cargo build --release -p leasehold-cli`).
            #[arg(long)]
            leasehold: Option<PathBuf>,
            /// Where to put the backing directory and the mount point (default: a temporary directory).
            #[arg(long)]
            work: Option<PathBuf>,
            #[arg(long, default_value_t = 1)]
            seed: u64,
            #[arg(long, value_enum, default_value = "torn")]
            policy: Policy,
            /// The longest time from a round's start to its cut, in milliseconds.
            #[arg(long, default_value_t = 1500)]
            max_round_ms: u64,
            #[command(flatten)]
            faults: FaultArgs,
        },
        /// (Used by the torture.) A batched session writer: each stdin line is a JSON array of
        /// records, appended as one batch (one write, one fdatasync), answered `ok`.
        #[command(hide = true)]
        SessionBatch {
            #[arg(long)]
            dir: PathBuf,
            id: String,
        },
        /// (Used by the torture, as `leasehold doc update`'s COMMAND.) The JSON object on
        /// stdin (none: `{}`) with counter KEY incremented, on stdout.
        #[command(hide = true)]
        DocBump { key: String },
    }

    pub fn main() -> ExitCode {
        match run(Cli::parse()) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("crashfs: {e}");
                ExitCode::from(2)
            }
        }
    }

    fn run(cli: Cli) -> Result<ExitCode, String> {
        match cli.command {
            Cmd::Mount {
                backing,
                mountpoint,
                control,
                faults,
            } => mount(backing, mountpoint, control, faults.into()),
            Cmd::Cut {
                control,
                policy,
                seed,
            } => {
                let policy = match policy {
                    Policy::Drop => "drop",
                    Policy::Keep => "keep",
                    Policy::Prefix => "prefix",
                    Policy::Torn => "torn",
                };
                let mut s = UnixStream::connect(&control)
                    .map_err(|e| format!("cannot connect to {}: {e}", control.display()))?;
                writeln!(s, "cut {policy} {seed}").map_err(|e| e.to_string())?;
                let mut line = String::new();
                BufReader::new(s)
                    .read_line(&mut line)
                    .map_err(|e| e.to_string())?;
                println!("{}", line.trim());
                Ok(if line.starts_with("ok") {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                })
            }
            Cmd::Torture {
                cuts,
                seconds,
                leasehold,
                work,
                seed,
                policy,
                max_round_ms,
                faults,
            } => {
                if let Some(why) = crashfs::unavailable() {
                    println!("SKIP: crashfs torture: {why}");
                    return Ok(ExitCode::SUCCESS);
                }
                let crashfs_bin = std::env::current_exe().map_err(|e| e.to_string())?;
                let leasehold = leasehold
                    .or_else(|| std::env::var_os("LEASEHOLD_BIN").map(PathBuf::from))
                    .unwrap_or_else(|| crashfs_bin.with_file_name("leasehold"));
                if !leasehold.is_file() {
                    return Err(format!(
                        "no leasehold binary at {}: build it (cargo build --release -p leasehold-cli) \
                     or pass --leasehold PATH",
                        leasehold.display()
                    ));
                }
                let config = torture::Config {
                    cuts,
                    seconds,
                    leasehold,
                    crashfs: crashfs_bin,
                    work,
                    seed,
                    policy: policy.into(),
                    faults: faults.into(),
                    max_round: Duration::from_millis(max_round_ms),
                };
                let report = torture::run(&config).map_err(|e| format!("torture: {e}"))?;
                for v in &report.violations {
                    println!("VIOLATION: {v}");
                }
                print!("{}", report.summary());
                Ok(if report.violations.is_empty() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                })
            }
            Cmd::SessionBatch { dir, id } => session_batch(dir, id),
            Cmd::DocBump { key } => {
                let mut input = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut input)
                    .map_err(|e| e.to_string())?;
                let out = crashfs::torture::doc_bump(&input, &key)?;
                std::io::stdout()
                    .write_all(&out)
                    .map_err(|e| e.to_string())?;
                Ok(ExitCode::SUCCESS)
            }
        }
    }

    fn mount(
        backing: PathBuf,
        mountpoint: PathBuf,
        control: Option<PathBuf>,
        faults: Faults,
    ) -> Result<ExitCode, String> {
        let mounted = Mounted::mount(&backing, &mountpoint, faults).map_err(|e| e.to_string())?;
        let ready = || {
            // The handshake: a script (or test) waits for this line, not for a while.
            eprintln!(
                "crashfs: {} mounted at {}",
                backing.display(),
                mountpoint.display()
            );
        };
        let Some(control) = control else {
            ready();
            // Serve until someone unmounts it.
            mounted.wait();
            return Ok(ExitCode::SUCCESS);
        };
        let _ = std::fs::remove_file(&control);
        let listener = UnixListener::bind(&control)
            .map_err(|e| format!("cannot listen on {}: {e}", control.display()))?;
        ready();
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let mut line = String::new();
            if BufReader::new(&stream).read_line(&mut line).is_err() {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let mut out = &stream;
            match words.as_slice() {
                ["stats"] => {
                    let _ = writeln!(
                        out,
                        "ok {:?} pending={}",
                        mounted.handle().stats(),
                        mounted.handle().pending_ops()
                    );
                }
                ["cut", policy, seed] => {
                    let policy = match *policy {
                        "drop" => CutPolicy::DropAll,
                        "keep" => CutPolicy::KeepAll,
                        "prefix" => CutPolicy::RandomPrefix { torn: false },
                        _ => CutPolicy::RandomPrefix { torn: true },
                    };
                    let seed = seed.parse().unwrap_or(0);
                    match mounted.handle().cut(policy, seed) {
                        Ok(r) => {
                            let _ = writeln!(
                                out,
                                "ok kept={} dropped={} torn={}",
                                r.kept, r.dropped, r.torn
                            );
                        }
                        Err(e) => {
                            let _ = writeln!(out, "error {e}");
                        }
                    }
                    drop(listener);
                    let _ = std::fs::remove_file(&control);
                    mounted.unmount().map_err(|e| e.to_string())?;
                    return Ok(ExitCode::SUCCESS);
                }
                _ => {
                    let _ = writeln!(out, "error unknown command {:?}", line.trim());
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    }

    fn session_batch(dir: PathBuf, id: String) -> Result<ExitCode, String> {
        use leasehold::patterns::append::Durability;
        use leasehold_stores::session::{SessionId, SessionStore};
        // On crashfs (FUSE): the same opt-ins as the `leasehold` workers (see torture.rs).
        let options = leasehold::LeaseOptions::new()
            .allow_network_filesystem(true)
            .allow_shared_state(true);
        let store = SessionStore::new(dir)
            .with_durability(Durability::Batch)
            .with_lease_options(options);
        let id = SessionId::new(id).map_err(|e| e.to_string())?;
        let mut writer = store.open_writer(&id).map_err(|e| e.to_string())?;
        let stdout = std::io::stdout();
        for line in std::io::stdin().lock().lines() {
            let line = line.map_err(|e| e.to_string())?;
            let records: Vec<String> = serde_json::from_str(&line).map_err(|e| e.to_string())?;
            writer
                .append_batch(records.iter().map(String::as_str))
                .map_err(|e| e.to_string())?;
            let mut out = stdout.lock();
            writeln!(out, "ok")
                .and_then(|()| out.flush())
                .map_err(|e| e.to_string())?;
        }
        writer.release();
        Ok(ExitCode::SUCCESS)
    }
}

#[cfg(target_os = "linux")]
fn main() -> std::process::ExitCode {
    linux::main()
}
