//! `--etcd ENDPOINTS`: `run`, `status` and `registry` with etcd v3 as the arbiter
//! (cli-contract v1.3, "etcd"), for processes spread over several machines.
//!
//! `run --etcd E NAME -- COMMAND` takes the lock `leasehold/lock/NAME/` (etcd's mutex recipe,
//! see `leasehold::arbiters::etcd`) and runs COMMAND with `LEASEHOLD_FENCING_TOKEN` set to
//! the grant's token. COMMAND must never outlive the lease:
//!
//! * **lease lost** (etcd says it is gone, or no keep-alive was acknowledged for long enough
//!   that it may have expired): COMMAND gets SIGTERM at once — before the TTL can have run
//!   out — and SIGKILL 5 s later if still alive; `run` then exits 1, `lease lost`;
//! * **leasehold dies** (even by SIGKILL): COMMAND is killed by the kernel, through the
//!   parent-death signal. Setting it needs code in the child between fork and exec, which
//!   std offers only as `unsafe` `pre_exec`; instead the child is this binary again (a hidden
//!   verb) that sets `PR_SET_PDEATHSIG` on itself, checks its parent is still the one that
//!   started it, and then execs COMMAND — the signal survives the exec;
//! * **clean exit** (COMMAND ended, or SIGINT/SIGTERM forwarded to it): the lease is revoked
//!   at once, so a waiter's COMMAND starts within a round trip.
//!
//! Built without the `etcd` feature, every `--etcd` says so in one line and exits 1.

// Without the feature only the stubs and the argument parsers are used.
#![cfg_attr(not(all(feature = "etcd", unix)), allow(dead_code))]

use std::time::Duration;

use crate::exit::Failure;

/// The key prefix of `run`'s and `status`'s locks: `leasehold/lock/NAME/` (the stores check
/// registry prefixes against it).
pub const LOCK_PREFIX: &str = leasehold_stores::registry::ETCD_RUN_LOCKS;
/// `registry --prefix` by default.
pub const REGISTRY_PREFIX: &str = "leasehold/registry";
/// `--ttl` by default.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// How long COMMAND has between SIGTERM and SIGKILL once the lease is lost.
pub const KILL_AFTER: Duration = Duration::from_secs(5);

/// `--ttl SECS`: a number of seconds, at least 2 (etcd counts whole seconds: rounded up).
pub fn parse_ttl(s: &str) -> Result<Duration, String> {
    let d = super::parse_secs(s)?;
    if d < Duration::from_secs(2) {
        return Err(format!("'{s}': the lease TTL must be at least 2 seconds"));
    }
    Ok(Duration::from_secs(d.as_secs_f64().ceil() as u64))
}

/// A lock NAME must be a safe name ([A-Za-z0-9._-], 1..128 characters, not starting with
/// '.'): it becomes part of an etcd key, and a `/` in it would put one lock's keys under
/// another's prefix.
pub fn check_name(name: &str) -> Result<(), Failure> {
    let ok = (1..=128).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Failure::usage(format!(
            "{name:?}: not a usable lock name (use 1 to 128 of A-Z a-z 0-9 . _ -, not starting with '.')"
        )))
    }
}

/// What `run --etcd` was asked.
pub struct RunEtcd {
    pub endpoints: String,
    pub ttl: Duration,
    pub timeout: Option<Duration>,
    pub no_wait: bool,
    pub conflict_exit_code: u8,
    pub name: String,
    pub command: Vec<std::ffi::OsString>,
}

#[cfg(not(all(feature = "etcd", unix)))]
fn unsupported() -> Failure {
    Failure::failed(
        "--etcd: this leasehold was built without etcd support; rebuild it with `cargo build --release --features etcd`",
    )
}

#[cfg(not(all(feature = "etcd", unix)))]
pub fn run(_: RunEtcd) -> crate::exit::Outcome {
    Err(unsupported())
}

#[cfg(not(all(feature = "etcd", unix)))]
pub fn status(_: &str, _: &str, _: bool) -> crate::exit::Outcome {
    Err(unsupported())
}

#[cfg(not(all(feature = "etcd", unix)))]
pub fn registry(
    _: &str,
    _: &str,
    _: Duration,
) -> Result<leasehold_stores::registry::Registry, Failure> {
    Err(unsupported())
}

#[cfg(not(all(feature = "etcd", unix)))]
pub fn exec(_: ExecArgs) -> crate::exit::Outcome {
    Err(unsupported())
}

/// The hidden verb `run --etcd` starts COMMAND through.
#[derive(clap::Args, Debug)]
pub struct ExecArgs {
    /// The pid of the `run` that must stay alive for COMMAND to live.
    parent: i32,
    /// COMMAND and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<std::ffi::OsString>,
}

#[cfg(all(feature = "etcd", unix))]
pub use imp::{PrivateEtcd, exec, registry, run, status};

#[cfg(all(feature = "etcd", unix))]
mod imp {
    use std::process::Command;
    use std::sync::{Arc, Condvar, Mutex, PoisonError};
    use std::time::{Duration, Instant};

    use leasehold::arbiters::etcd::{EtcdArbiter, EtcdGrant};
    use leasehold::patterns::authority::{Arbiter, Grant};
    use leasehold::{Budget, Error};
    use leasehold_stores::registry::Registry;
    use rustix::process::{Pid, Signal, kill_process};

    use super::{ExecArgs, KILL_AFTER, LOCK_PREFIX, RunEtcd, check_name};
    use crate::exit::{Failure, OK, Outcome};
    use crate::signals::Interrupts;
    use crate::wait::NOTICE_AFTER;

    fn connect(endpoints: &str, name: &str, ttl: Duration) -> Result<EtcdArbiter, Failure> {
        EtcdArbiter::connect(endpoints, &format!("{LOCK_PREFIX}/{name}"), ttl)
            .map_err(|e| Failure::of(&e))
    }

    /// "NAME: lock is held by another process (pid N on HOST)", as far as the holder told.
    fn contended(arbiter: &EtcdArbiter, name: &str, code: u8, waited: Option<Duration>) -> Failure {
        let who = match arbiter.owner() {
            Ok(Some(h)) => format!(" (pid {} on {})", h.pid, h.host),
            _ => String::new(),
        };
        let gave_up = waited.map_or(String::new(), |w| format!("; gave up after {w:.1?}"));
        Failure::with_status(
            code,
            format!("{name}: lock is held by another process{who}{gave_up}"),
        )
    }

    pub fn run(args: RunEtcd) -> Outcome {
        check_name(&args.name)?;
        let Some((_, _)) = args.command.split_first() else {
            return Err(Failure::usage("run: COMMAND is required after --"));
        };
        let interrupts = Interrupts::install()?;
        let arbiter = connect(&args.endpoints, &args.name, args.ttl)?;
        let mut grant = match acquire(&arbiter, &args, &interrupts) {
            Ok(g) => g,
            Err(Error::Cancelled { .. }) => return Ok(interrupts.exit_code()),
            Err(Error::TimedOut { waited, .. }) => {
                return Err(contended(
                    &arbiter,
                    &args.name,
                    args.conflict_exit_code,
                    Some(waited),
                ));
            }
            Err(e) if e.is_contended() => {
                return Err(contended(
                    &arbiter,
                    &args.name,
                    args.conflict_exit_code,
                    None,
                ));
            }
            Err(e) => return Err(Failure::of(&e)),
        };
        if interrupts.signal().is_some() {
            // Interrupted in the instant the lock arrived: COMMAND must not start.
            grant.release();
            return Ok(interrupts.exit_code());
        }
        let exe = std::env::current_exe()
            .map_err(|e| Failure::failed(format!("cannot find this executable: {e}")))?;
        let mut child = Command::new(exe)
            .arg("_exec-with-parent-death-signal")
            .arg(std::process::id().to_string())
            .arg("--")
            .args(&args.command)
            .env("LEASEHOLD_FENCING_TOKEN", grant.token().to_string())
            .spawn()
            .map_err(|e| Failure::failed(format!("cannot start COMMAND: {e}")))?;
        super::super::run::forward_signals(child.id());
        let guard = Arc::new(Guard::default());
        let monitor = {
            let (guard, watch, pid) = (guard.clone(), grant.watch(), child.id());
            std::thread::spawn(move || guard.stop_when_lost(&watch, pid))
        };
        let status = child
            .wait()
            .map_err(|e| Failure::failed(format!("waiting for COMMAND: {e}")));
        guard.finish();
        let lost = guard.lost();
        grant.release(); // wakes the monitor, which then sees the run finished
        let _ = monitor.join();
        if let Some(why) = lost {
            return Err(Failure::failed(format!(
                "{}: lease lost: {why}; COMMAND was stopped",
                args.name
            )));
        }
        Ok(super::super::run::exit_status(status?))
    }

    /// Between the monitor thread and the thread that waits for COMMAND.
    #[derive(Default)]
    struct Guard {
        state: Mutex<GuardState>,
        changed: Condvar,
    }

    #[derive(Default)]
    struct GuardState {
        finished: bool,
        lost: Option<String>,
    }

    impl Guard {
        /// Waits for the grant to be lost; then SIGTERM, and SIGKILL after [`KILL_AFTER`],
        /// unless COMMAND finished first. Signals are sent with the state locked and only
        /// while COMMAND is not known to be reaped.
        fn stop_when_lost(&self, watch: &leasehold::arbiters::etcd::GrantWatch, pid: u32) {
            let Some(why) = watch.wait_lost(None) else {
                return;
            };
            let Some(pid) = Pid::from_raw(pid as i32) else {
                return;
            };
            let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if st.finished {
                return;
            }
            st.lost = Some(why);
            let _ = kill_process(pid, Signal::TERM);
            let (st, timeout) = self
                .changed
                .wait_timeout_while(st, KILL_AFTER, |s| !s.finished)
                .unwrap_or_else(PoisonError::into_inner);
            if timeout.timed_out() && !st.finished {
                let _ = kill_process(pid, Signal::KILL);
            }
        }

        /// COMMAND was reaped: from now on the monitor sends nothing (it signals only while
        /// `finished` is false, under the same lock; the pid cannot have been reused in the
        /// instant between the reaping and this call by anything of ours).
        fn finish(&self) {
            let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            st.finished = true;
            drop(st);
            self.changed.notify_all();
        }

        fn lost(&self) -> Option<String> {
            self.state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .lost
                .clone()
        }
    }

    /// Waits within the user's budget, saying once after a second whom it waits for.
    fn acquire(
        arbiter: &EtcdArbiter,
        args: &RunEtcd,
        interrupts: &Interrupts,
    ) -> leasehold::Result<EtcdGrant> {
        let token = interrupts.token().clone();
        let deadline = if args.no_wait {
            Some(Instant::now())
        } else {
            args.timeout.and_then(|t| Instant::now().checked_add(t))
        };
        let budget = |d: Option<Instant>| {
            let b = match d {
                Some(d) => Budget::until(d),
                None => Budget::unlimited(),
            };
            b.with_cancel(token.clone())
        };
        let notice_at = Instant::now() + NOTICE_AFTER;
        if deadline.is_some_and(|d| d <= notice_at) {
            return arbiter.acquire(&budget(deadline));
        }
        match arbiter.acquire(&budget(Some(notice_at))) {
            Err(Error::TimedOut { .. }) => {
                let who = match arbiter.owner() {
                    Ok(Some(h)) => format!(" (pid {} on {})", h.pid, h.host),
                    _ => String::new(),
                };
                crate::out::error_line(&format!(
                    "waiting for {} held by another process{who}",
                    args.name
                ));
                arbiter.acquire(&budget(deadline))
            }
            other => other,
        }
    }

    pub fn status(endpoints: &str, name: &str, json: bool) -> Outcome {
        check_name(name)?;
        let arbiter = connect(endpoints, name, leasehold::arbiters::etcd::MIN_TTL)?;
        let owner = arbiter.owner().map_err(|e| Failure::of(&e))?;
        if json {
            let holders: Vec<_> = owner
                .iter()
                .map(|h| serde_json::json!({"pid": h.pid, "host": h.host}))
                .collect();
            let doc =
                serde_json::json!({"name": name, "held": owner.is_some(), "holders": holders});
            crate::out::print_line(doc)?;
        } else {
            match owner {
                Some(h) => crate::out::print_line(format!("held by {}@{}", h.pid, h.host))?,
                None => crate::out::print_line("free")?,
            }
        }
        Ok(OK)
    }

    pub fn registry(endpoints: &str, prefix: &str, ttl: Duration) -> Result<Registry, Failure> {
        Registry::on_etcd(endpoints, prefix, ttl, None).map_err(|e| match e {
            leasehold_stores::registry::RegistryError::Lease(l) => Failure::of(&l),
            other => Failure::of(&other),
        })
    }

    /// The hidden verb: arm the parent-death signal, make sure the parent is still the `run`
    /// that started us (it may have died before the signal was armed), and become COMMAND.
    pub fn exec(args: ExecArgs) -> Outcome {
        use std::os::unix::process::CommandExt;
        #[cfg(target_os = "linux")]
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
            .map_err(|e| Failure::failed(format!("cannot set the parent-death signal: {e}")))?;
        let parent = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
        if parent != args.parent {
            return Err(Failure::failed(
                "the leasehold run that started COMMAND is gone; not running it",
            ));
        }
        let Some((program, rest)) = args.command.split_first() else {
            return Err(Failure::usage("COMMAND is required after --"));
        };
        let e = Command::new(program).args(rest).exec();
        let code = if e.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        };
        Err(Failure::with_status(
            code,
            format!("cannot run {}: {e}", program.to_string_lossy()),
        ))
    }
    /// A private single-node etcd on free loopback ports, stopped when dropped.
    pub struct PrivateEtcd {
        child: std::process::Child,
        /// Its client URL.
        pub endpoint: String,
    }

    impl PrivateEtcd {
        /// Starts etcd with its data under `dir` and waits until it answers.
        pub fn start(dir: &std::path::Path) -> Result<PrivateEtcd, Failure> {
            let port = || {
                std::net::TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .map(|a| a.port())
                    .map_err(|e| Failure::failed(format!("no free loopback port: {e}")))
            };
            let (client, peer) = (port()?, port()?);
            let endpoint = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let log = std::fs::File::create(dir.join("etcd.log"))
                .map_err(|e| Failure::failed(format!("etcd log: {e}")))?;
            let log2 = log
                .try_clone()
                .map_err(|e| Failure::failed(format!("etcd log: {e}")))?;
            let child = std::process::Command::new("etcd")
                .arg("--name=leasehold")
                .arg(format!("--data-dir={}", dir.join("etcd-data").display()))
                .arg(format!("--listen-client-urls={endpoint}"))
                .arg(format!("--advertise-client-urls={endpoint}"))
                .arg(format!("--listen-peer-urls={peer_url}"))
                .arg(format!("--initial-advertise-peer-urls={peer_url}"))
                .arg(format!("--initial-cluster=leasehold={peer_url}"))
                .arg("--logger=zap")
                .arg("--log-level=warn")
                .stdin(std::process::Stdio::null())
                .stdout(log)
                .stderr(log2)
                .spawn()
                .map_err(|e| {
                    Failure::failed(format!(
                        "cannot start etcd ({e}); install it (Debian: etcd-server) or pass --etcd ENDPOINTS"
                    ))
                })?;
            let mut etcd = PrivateEtcd { child, endpoint };
            // Readiness handshake: connecting succeeds once etcd answers a request.
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if let Ok(Some(status)) = etcd.child.try_wait() {
                    return Err(Failure::failed(format!("etcd exited at start: {status}")));
                }
                match EtcdArbiter::connect(
                    &etcd.endpoint,
                    "leasehold/ready",
                    leasehold::arbiters::etcd::MIN_TTL,
                ) {
                    Ok(_) => return Ok(etcd),
                    Err(e) if Instant::now() >= deadline => {
                        let _ = etcd.child.kill();
                        return Err(Failure::failed(format!("etcd never became ready: {e}")));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
    }

    impl Drop for PrivateEtcd {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
