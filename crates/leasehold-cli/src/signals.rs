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
    /// Installs the handlers. They only write to a pipe and store a number, both
    /// async-signal-safe (signal-hook does the registration).
    ///
    /// (An error converts into the CLI's `Failure` with `?`: this module sits below `exit`.)
    pub fn install() -> std::io::Result<Interrupts> {
        let token = CancelToken::new().map_err(std::io::Error::other)?;
        let which = fired().clone();
        for sig in [SIGINT, SIGTERM] {
            #[cfg(unix)]
            let fd = token.write_end().map_err(std::io::Error::other)?;
            signal_hook::flag::register_usize(sig, which.clone(), sig as usize)
                .and_then(|_| {
                    #[cfg(unix)]
                    let registered = signal_hook::low_level::pipe::register(sig, fd);
                    // Windows: no pipe; the waiter polls the token's flag.
                    #[cfg(windows)]
                    let registered = signal_hook::flag::register(sig, token.flag());
                    registered
                })
                .map_err(|e| {
                    std::io::Error::other(format!("cannot install signal handler: {e}"))
                })?;
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
