//! COMMAND's tree in a PID namespace of its own (Linux): the kernel, not a process of ours,
//! ends the tree when its supervisor dies — also when `run` and the supervisor are killed
//! together (`pkill -9 leasehold`), when no process of ours is left to act.
//!
//! ```text
//! leasehold run --etcd
//!   └─ supervisor        (unshare(CLONE_NEWPID): its next child begins a new namespace)
//!        └─ ns-init      (`leasehold worker etcd-ns-init`: PID 1 there; parent-death
//!             │            signal SIGKILL; leads process group C)
//!             └─ COMMAND (PID 2 there, in group C: the exec helper, then COMMAND)
//!                  └─ …  (every descendant, whatever its group or session)
//! ```
//!
//! No process can leave its PID namespace, and when a namespace's first process (its init)
//! dies the kernel SIGKILLs every other process in it. ns-init dies of its parent-death
//! signal when the supervisor dies, so the supervisor's death — by any signal, with `run`
//! dead too — ends the whole tree, and nothing COMMAND does can undo that.
//!
//! The supervisor calls `unshare`, not `run`: a process that has unshared its PID namespace
//! can no longer create threads (`clone(CLONE_THREAD)` fails with EINVAL), and only a
//! single-threaded process may enter a new user namespace; `run` has the etcd client's
//! threads, the supervisor one thread. As root it unshares the PID namespace alone;
//! otherwise with a user namespace (`CLONE_NEWUSER|CLONE_NEWPID`, which unprivileged users
//! may create where the system allows user namespaces) in which its own user and group ID
//! map to themselves (`setgroups` denied, as the kernel requires of such a mapping). Where
//! both are refused the supervisor says so in one line at start and binds the tree as
//! without namespaces (process group, subreaper; docs/platforms.md).
//!
//! ns-init keeps COMMAND's semantics. COMMAND is not PID 1 (the kernel spares a namespace's
//! init every signal it has no handler for: SIGTERM, SIGINT, SIGHUP…); ns-init is, and it
//! starts COMMAND's process as its child in its own process group C, which thus holds
//! COMMAND as before. It installs no signal handler, so what is sent to group C — the
//! supervisor's SIGTERM, Ctrl-C at the terminal (C is then the foreground group) — reaches
//! COMMAND and passes ns-init by; only SIGKILL and SIGSTOP sent from outside reach it. It
//! reaps every orphan of the namespace and exits, with COMMAND's status, once nothing else is
//! left in it; when COMMAND ends with processes left behind, it first tells the supervisor
//! `exit STATUS`, and the supervisor stops them (SIGTERM, then SIGKILL) as before.
//!
//! What COMMAND sees differently: process IDs are the namespace's (`$$` is 2); /proc is the
//! machine's, so `/proc/$$` is not COMMAND (`/proc/self` is); under a user namespace,
//! set-user-ID programs (sudo) gain no privilege and unmapped groups show as `nogroup`.
//!
//! ns-init's stdin is a socket to the supervisor: ns-init says `ready` once its parent-death
//! signal is armed (so the supervisor was alive after it was: no window in which its death
//! goes unnoticed); the supervisor then passes it COMMAND's socket (one byte, `w`, with the
//! descriptor attached); ns-init says `stopped SIG` each time COMMAND is stopped (it waits
//! for its child's stops too: Ctrl-Z, or SIGTTIN/SIGTTOU of a background COMMAND — job
//! control, see `supervisor.rs`), and `exit STATUS` as above.

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use crate::exit::{Failure, Outcome};

/// How the supervisor binds COMMAND's tree to itself.
pub enum Binding {
    /// Its next child is the init of a new PID namespace.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Kernel,
    /// No namespace, and why: process group and subreaper only.
    Refused(String),
}

/// Makes the caller's next child the init of a new PID namespace, with a user namespace
/// where the PID namespace alone is not permitted. The caller must be single-threaded, and
/// can create no thread afterwards. An error only when a user namespace was entered but its
/// ID mapping failed: COMMAND would run as nobody, so it must not run.
#[cfg(target_os = "linux")]
pub fn enter() -> Result<Binding, Failure> {
    use nix::errno::Errno;
    use nix::sched::{CloneFlags, unshare};
    match unshare(CloneFlags::CLONE_NEWPID) {
        Ok(()) => return Ok(Binding::Kernel),
        Err(Errno::EPERM) => {}
        Err(e) => return Ok(Binding::Refused(format!("unshare(CLONE_NEWPID): {e}"))),
    }
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    if let Err(e) = unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWPID) {
        return Ok(Binding::Refused(format!(
            "a PID namespace needs CAP_SYS_ADMIN, and a user namespace was refused ({e})"
        )));
    }
    // In the new user namespace now, where this process is nobody until mapped.
    let map = |file: &str, text: String| match std::fs::write(format!("/proc/self/{file}"), text) {
        // Kernels before 3.19 have no `setgroups` file (nor need it).
        Err(e) if file == "setgroups" && e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Failure::failed(format!(
            "supervisor: cannot map user {uid} and group {gid} into COMMAND's user namespace (/proc/self/{file}: {e}); COMMAND was not started"
        ))),
        Ok(()) => Ok(()),
    };
    map("setgroups", "deny".into())?;
    map("uid_map", format!("{uid} {uid} 1\n"))?;
    map("gid_map", format!("{gid} {gid} 1\n"))?;
    Ok(Binding::Kernel)
}

/// Without PID namespaces: the process group and the subreaper only.
#[cfg(not(target_os = "linux"))]
pub fn enter() -> Result<Binding, Failure> {
    Ok(Binding::Refused("this system has no PID namespaces".into()))
}

/// The supervisor's side: waits for ns-init's `ready`, then hands it COMMAND's socket.
pub fn hand_over(init: &UnixStream, word: OwnedFd) -> std::io::Result<()> {
    let mut ready = [0u8; 6];
    (&*init).read_exact(&mut ready)?;
    if &ready != b"ready\n" {
        return Err(std::io::Error::other("ns-init said something unexpected"));
    }
    super::fds::send_with_fds(init, b"w", &[word.as_fd()])
}

/// The hidden role's arguments: `leasehold worker etcd-ns-init -- COMMAND...`, stdin a Unix
/// socket to the supervisor.
#[derive(clap::Args, Debug)]
pub struct NsInitArgs {
    /// COMMAND and its arguments.
    #[arg(last = true, required = true)]
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    command: Vec<OsString>,
}

/// ns-init: see the module docs. Exits with COMMAND's status.
#[cfg(target_os = "linux")]
pub fn ns_init(args: NsInitArgs) -> Outcome {
    use std::io::Write;
    use std::process::{Command, Stdio};

    use rustix::process::{Signal, WaitOptions};
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        Failure::failed(format!("COMMAND's namespace: {what}: {e}"))
    };
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
        .map_err(|e| fail("cannot set the parent-death signal", &e))?;
    let sock = rustix::stdio::stdin()
        .try_clone_to_owned()
        .map(UnixStream::from)
        .map_err(|e| fail("stdin", &e))?;
    // Armed: if the supervisor reads this, its death from now on kills us.
    if (&sock).write_all(b"ready\n").is_err() {
        return Ok(0); // the supervisor is gone: nothing ran
    }
    let mut tag = [0u8; 1];
    let Ok((1, fds)) = super::fds::receive_with_fds(&sock, &mut tag) else {
        return Ok(0);
    };
    let Some(word) = fds.into_iter().next() else {
        return Ok(0);
    };
    let exe = std::env::current_exe().map_err(|e| fail("cannot find this executable", &e))?;
    // COMMAND's process, in our group (C), its parent-death signal armed against us.
    let child = Command::new(exe)
        .arg("_exec-with-parent-death-signal")
        .arg(rustix::process::getpid().as_raw_nonzero().to_string())
        .arg("--")
        .args(&args.command)
        .stdin(Stdio::from(word))
        .spawn()
        .map_err(|e| Failure::failed(format!("cannot start COMMAND: {e}")))?;
    let command = child.id() as i32;
    drop(child); // reaped below with every orphan of the namespace, never through std
    let mut status = None;
    let mut told = false;
    loop {
        let nohang = status.is_some() && !told;
        // Stops and continues too: COMMAND's are told to the supervisor (`run` then stops
        // its own group as the terminal stopped COMMAND's); any other child's are nothing.
        let mut options = WaitOptions::UNTRACED | WaitOptions::CONTINUED;
        if nohang {
            options |= WaitOptions::NOHANG;
        }
        match rustix::process::wait(options) {
            Ok(Some((pid, st))) if pid.as_raw_nonzero().get() == command => {
                if let Some(sig) = st.stopping_signal() {
                    let _ = (&sock).write_all(format!("stopped {sig}\n").as_bytes());
                } else if !st.continued() {
                    status = Some(crate::signals::wait_status_code(st));
                }
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                // COMMAND ended and left processes behind: the supervisor stops them.
                let line = format!("exit {}\n", status.unwrap_or(1));
                let _ = (&sock).write_all(line.as_bytes());
                told = true;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break, // no child left: the namespace is empty
        }
    }
    Ok(status.unwrap_or(1))
}

/// Never started where there are no PID namespaces.
#[cfg(not(target_os = "linux"))]
pub fn ns_init(_: NsInitArgs) -> Outcome {
    Err(Failure::failed("COMMAND's namespace: not on this system"))
}
