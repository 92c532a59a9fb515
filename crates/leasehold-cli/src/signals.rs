//! Turning SIGINT/SIGTERM into a cancellation of the current wait.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use leasehold::CancelToken;
use signal_hook::consts::{SIGINT, SIGTERM};

/// The signal that cancelled a wait (0: none yet), shared by every [`Interrupts`] of the
/// process so that [`exit_code`] — which the exit-status map asks — needs no handle.
fn fired() -> &'static Arc<AtomicUsize> {
    static FIRED: OnceLock<Arc<AtomicUsize>> = OnceLock::new();
    FIRED.get_or_init(Arc::default)
}

/// The conventional exit status for the signal that cancelled a wait (128 + N; SIGTERM's
/// 143 if none was seen).
pub fn exit_code() -> u8 {
    let sig = match fired().load(Ordering::SeqCst) {
        0 => SIGTERM,
        n => n as i32,
    };
    128u8.wrapping_add(sig as u8)
}

/// Cancels `token` when SIGINT or SIGTERM arrives, remembering which one did.
pub struct Interrupts {
    token: CancelToken,
    which: Arc<AtomicUsize>,
}

impl Interrupts {
    /// Installs the handlers. They only store a number and (POSIX) write to signal-hook's
    /// self-pipe, both async-signal-safe; a thread reading that pipe cancels the token,
    /// which wakes the waits using it at once (a handler cannot: cancelling takes a mutex).
    /// On Windows the handler raises the token's flag, which waiters there poll.
    ///
    /// (An error converts into the CLI's `Failure` with `?`: this module sits below `exit`.)
    pub fn install() -> std::io::Result<Interrupts> {
        let token = CancelToken::new();
        let which = fired().clone();
        let failed = |e: std::io::Error| {
            std::io::Error::other(format!("cannot install signal handler: {e}"))
        };
        for sig in [SIGINT, SIGTERM] {
            signal_hook::flag::register_usize(sig, which.clone(), sig as usize).map_err(failed)?;
            #[cfg(windows)]
            signal_hook::flag::register(sig, token.flag()).map_err(failed)?;
        }
        #[cfg(unix)]
        {
            let mut signals =
                signal_hook::iterator::Signals::new([SIGINT, SIGTERM]).map_err(failed)?;
            let cancel = token.clone();
            std::thread::Builder::new()
                .name("leasehold-signals".into())
                .spawn(move || {
                    if signals.forever().next().is_some() {
                        cancel.cancel();
                    }
                })
                .map_err(failed)?;
        }
        Ok(Interrupts { token, which })
    }

    /// The token to attach to wait budgets.
    pub fn token(&self) -> &CancelToken {
        &self.token
    }

    /// The signal that fired, if any.
    pub fn signal(&self) -> Option<i32> {
        match self.which.load(Ordering::SeqCst) {
            0 => None,
            n => Some(n as i32),
        }
    }

    /// The conventional exit status for the signal that fired (128 + N).
    pub fn exit_code(&self) -> u8 {
        exit_code()
    }
}

/// Passes termination signals sent to us on to COMMAND, so a supervisor stopping the verb
/// that runs COMMAND (`run`, `run --etcd`, `flock`) stops COMMAND too; the verb then exits
/// with COMMAND's status.
///
/// Installed before the wait for SIGINT/SIGTERM (which also cancel the wait, see
/// [`Interrupts`]) and, once the lease is held, for SIGHUP/SIGQUIT (which until then keep
/// their default action: they end a wait by ending the verb). signal-hook queues what
/// arrives before [`start`](Self::start); the forwarding thread delivers it first.
#[cfg(unix)]
pub struct Forward(signal_hook::iterator::Signals);

#[cfg(unix)]
impl Forward {
    /// Takes SIGINT and SIGTERM, queued until [`start`](Self::start).
    pub fn install() -> std::io::Result<Forward> {
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM]).map(Forward)
    }

    /// Takes SIGHUP and SIGQUIT as well.
    pub fn hangups(&self) -> std::io::Result<()> {
        use signal_hook::consts::{SIGHUP, SIGQUIT};
        for sig in [SIGHUP, SIGQUIT] {
            self.0.add_signal(sig)?;
        }
        Ok(())
    }

    /// Delivers every signal taken, from now on, to process `pid`.
    pub fn start(self, pid: u32) {
        let Some(pid) = rustix::process::Pid::from_raw(pid as i32) else {
            return;
        };
        let mut signals = self.0;
        std::thread::spawn(move || {
            for sig in signals.forever() {
                if let Some(sig) = rustix::process::Signal::from_named_raw(sig) {
                    let _ = rustix::process::kill_process(pid, sig);
                }
            }
        });
    }
}

/// For the verbs that spawn COMMAND once the lease is held (`run --etcd`, `flock`): forward
/// every termination signal to COMMAND from now on.
#[cfg(unix)]
pub fn forward_signals(pid: u32) {
    if let Ok(forward) = Forward::install() {
        let _ = forward.hangups();
        forward.start(pid);
    }
}

/// COMMAND's exit status as a shell reports it: its code (the low byte), or 128 + N when
/// signal N ended it.
pub fn exit_status(status: std::process::ExitStatus) -> u8 {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return 128u8.wrapping_add(sig as u8);
        }
    }
    status.code().map_or(1, |code| code as u8)
}

/// [`exit_status`] of a child reaped with `waitpid` (rustix's status): `run --etcd`'s
/// supervisor and its PID namespace's init.
#[cfg(all(feature = "etcd", unix))]
pub fn wait_status_code(status: rustix::process::WaitStatus) -> u8 {
    match (status.exit_status(), status.terminating_signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => 128u8.wrapping_add(sig as u8),
        _ => 1,
    }
}
