//! `leasehold session [--dir DIR] (append ID | read ID)`: drive the session log.
//!
//! `append` is the session's single writer: it appends each JSON line from stdin as it
//! arrives, taking the session's write lease at its first materializing write (or at start
//! for an existing session) and holding it until it exits. `read` prints the whole records
//! without ever touching the lock, so it works while a writer appends.

use std::ffi::OsString;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use clap::{Args, Subcommand};
use leasehold::patterns::append::{LineRead, read_record_line};
use leasehold_stores::session::{MAX_RECORD_LEN, SessionError, SessionId, SessionStore};

use crate::exit::{Failure, OK, Outcome};

/// What `session --help` says about record length (the store's limit, stated once there).
fn limits_help() -> String {
    format!(
        "A record (one line) is at most {MAX_RECORD_LEN} bytes (64 MiB): append refuses a longer line with exit 2, writing nothing of it or after it; read skips a longer torn final line without holding it in memory."
    )
}

#[derive(Args, Debug)]
#[command(after_help = limits_help())]
pub struct SessionArgs {
    /// Sessions directory (default: $LEASEHOLD_HOME/sessions, else ~/.leasehold/sessions).
    #[arg(long, value_name = "DIR", global = true)]
    dir: Option<PathBuf>,
    /// Where the session's mount keeps kernel locks on each host (NFS with local_lock=all or
    /// nolock, SMB with nobrl, sshfs, bindfs and other FUSE): append holds a record lease
    /// with a TTL of SECS seconds (at least 0.03) instead of refusing; elsewhere the kernel
    /// lease, as without it. The flag form of LEASEHOLD_SHARED_MOUNT=record:SECS, which it
    /// overrides.
    #[arg(long, value_name = "SECS", global = true)]
    ttl: Option<String>,
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand, Debug)]
enum Action {
    /// Append the JSON lines read from stdin to session ID, each as it arrives.
    #[command(after_help = limits_help())]
    Append {
        /// The session ID (pass an ID starting with '-' after `--`).
        id: OsString,
    },
    /// Print every whole record of session ID, one per line.
    #[command(after_help = limits_help())]
    Read {
        /// The session ID (pass an ID starting with '-' after `--`).
        id: OsString,
    },
}

pub fn main(args: SessionArgs) -> Outcome {
    let options = crate::env::record_lease_options(args.ttl.as_deref()).map_err(Failure::usage)?;
    let store = SessionStore::new(sessions_dir(args.dir)?).with_lease_options(options);
    match args.action {
        Action::Append { id } => append(&store, &session_id(&id)?),
        Action::Read { id } => read(&store, &session_id(&id)?),
    }
}

/// `DIR`: `--dir`, else `$LEASEHOLD_HOME/sessions`, else `~/.leasehold/sessions`.
fn sessions_dir(dir: Option<PathBuf>) -> Result<PathBuf, Failure> {
    if let Some(dir) = dir {
        return Ok(dir);
    }
    let nonempty = |var| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(home) = nonempty("LEASEHOLD_HOME") {
        return Ok(home.join("sessions"));
    }
    match nonempty("HOME") {
        Some(home) => Ok(home.join(".leasehold").join("sessions")),
        None => Err(Failure::usage(
            "session: cannot find the sessions directory: set LEASEHOLD_HOME or HOME, or pass --dir",
        )),
    }
}

/// Appends stdin's JSON lines until EOF; stops at the first line that is not JSON or is
/// longer than the record limit, leaving the lines before it appended.
fn append(store: &SessionStore, id: &SessionId) -> Outcome {
    let mut writer = store.open_writer(id).map_err(failure)?;
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut line = Vec::new();
    // Each line is handed over as soon as its newline arrives: the record is appended (and,
    // by default, fsynced) before the next one is read. At most the limit of a line is held.
    for n in 1.. {
        let read = read_record_line(&mut input, &mut line, MAX_RECORD_LEN)
            .map_err(|e| Failure::failed(format!("session {id}: reading stdin: {e}")))?;
        match read {
            LineRead::End => break,
            LineRead::TooLong => {
                return Err(Failure::usage(format!(
                    "session {id}: line {n} is longer than the record limit of {MAX_RECORD_LEN} bytes (64 MiB); nothing of it or after it was written (split it into smaller records)"
                )));
            }
            LineRead::Whole | LineRead::Unterminated => {}
        }
        let Ok(text) = std::str::from_utf8(&line) else {
            return Err(Failure::usage(format!(
                "session {id}: line {n} is not JSON: not valid UTF-8"
            )));
        };
        if text.trim().is_empty() {
            continue;
        }
        writer.append_json(text).map_err(|e| match e {
            SessionError::NotJson { reason, .. } => {
                Failure::usage(format!("session {id}: line {n} is not JSON: {reason}"))
            }
            other => failure(other),
        })?;
    }
    writer.release();
    Ok(OK)
}

/// Prints every whole record, one per line; never touches the lock. A torn (or still being
/// written) final line is not printed: the output is always a prefix of whole records.
fn read(store: &SessionStore, id: &SessionId) -> Outcome {
    let reader = store.reader(id).map_err(failure)?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    let printed = (|| -> std::io::Result<Result<(), SessionError>> {
        for record in reader {
            match record {
                Ok(record) => {
                    out.write_all(&record)?;
                    out.write_all(b"\n")?;
                }
                Err(e) => return Ok(Err(e)),
            }
        }
        out.flush()?;
        Ok(Ok(()))
    })();
    match printed {
        Ok(result) => result.map(|()| OK).map_err(failure),
        // The consumer stopped reading (`read ID | head`): not our failure.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(OK),
        Err(e) => Err(Failure::failed(format!(
            "session {id}: writing stdout: {e}"
        ))),
    }
}

/// The session ID argument, checked by the stores' one ID rule (an unsafe one is the
/// session store's unusable input).
fn session_id(id: &std::ffi::OsStr) -> Result<SessionId, Failure> {
    SessionId::from_os(id).map_err(|e| failure(e.into()))
}

/// A session error with its class's status (unusable input 2, owned by another process 75,
/// anything else 1); a lease's refusal names the settings in this tool's terms.
fn failure(e: SessionError) -> Failure {
    match e {
        SessionError::Lease(e) => Failure::lease(&e),
        other => Failure::of(&other),
    }
}
