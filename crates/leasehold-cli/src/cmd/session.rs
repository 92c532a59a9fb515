//! `leasehold session [--dir DIR] (append ID | read ID)`: drive the session log.
//!
//! `append` is the session's single writer: it appends each JSON line from stdin as it
//! arrives, taking the session's write lease at its first materializing write (or at start
//! for an existing session) and holding it until it exits. `read` prints the whole records
//! without ever touching the lock, so it works while a writer appends.

use std::ffi::OsString;
use std::io::{BufRead, BufWriter, Write};
use std::path::PathBuf;

use clap::{Args, Subcommand};
use leasehold_stores::session::{SessionError, SessionId, SessionStore};

use crate::exit::{Failure, OK, Outcome};

#[derive(Args, Debug)]
pub struct SessionArgs {
    /// Sessions directory (default: $LEASEHOLD_HOME/sessions, else ~/.leasehold/sessions).
    #[arg(long, value_name = "DIR", global = true)]
    dir: Option<PathBuf>,
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand, Debug)]
enum Action {
    /// Append the JSON lines read from stdin to session ID, each as it arrives.
    Append {
        /// The session ID (pass an ID starting with '-' after `--`).
        id: OsString,
    },
    /// Print every whole record of session ID, one per line.
    Read {
        /// The session ID (pass an ID starting with '-' after `--`).
        id: OsString,
    },
}

pub fn main(args: SessionArgs) -> Outcome {
    let store =
        SessionStore::new(sessions_dir(args.dir)?).with_lease_options(crate::env::lease_options());
    match args.action {
        Action::Append { id } => append(&store, &SessionId::from_os(&id).map_err(failure)?),
        Action::Read { id } => read(&store, &SessionId::from_os(&id).map_err(failure)?),
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

/// Appends stdin's JSON lines until EOF; stops at the first line that is not JSON, leaving the
/// lines before it appended.
fn append(store: &SessionStore, id: &SessionId) -> Outcome {
    let mut writer = store.open_writer(id).map_err(failure)?;
    let stdin = std::io::stdin();
    // `split` hands over each line as soon as its newline arrives: the record is appended
    // (and, by default, fsynced) before the next one is read.
    for (n, line) in stdin.lock().split(b'\n').enumerate() {
        let line =
            line.map_err(|e| Failure::failed(format!("session {id}: reading stdin: {e}")))?;
        let Ok(text) = std::str::from_utf8(&line) else {
            return Err(Failure::usage(format!(
                "session {id}: line {} is not JSON: not valid UTF-8",
                n + 1
            )));
        };
        if text.trim().is_empty() {
            continue;
        }
        writer.append_json(text).map_err(|e| match e {
            SessionError::NotJson { reason, .. } => Failure::usage(format!(
                "session {id}: line {} is not JSON: {reason}",
                n + 1
            )),
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

/// A session error with its class's status (unusable input 2, owned by another process 75,
/// anything else 1).
fn failure(e: SessionError) -> Failure {
    Failure::of(&e)
}
