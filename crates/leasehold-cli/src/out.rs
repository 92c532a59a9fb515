//! The CLI's output helpers: every message to stderr is one line in one `write(2)`, and every
//! write to stdout goes through [`Stdout`], which tells a reader that went away (the end of
//! output) from a write that failed (exit 1, one line).
//!
//! Why one write: `eprintln!` formats straight into unbuffered stderr, piece by piece (7–10
//! `write` calls for one message were counted), so processes that share a stderr — parallel
//! `run`s under one supervisor — splice each other's lines. A line of a few hundred bytes
//! written with one `write` to a pipe is atomic (POSIX: up to `PIPE_BUF`, 4096 on Linux).
//!
//! Why EPIPE is not an error: Rust ignores SIGPIPE, so `println!` panics (exit 101 with a
//! backtrace) when the reader has gone, as in `leasehold status x | head -0`. Whoever closed
//! the pipe wants no more output; the verb's work stands and its status is unchanged.
//!
//! Why any other write error is one: `> /dev/full`, a full disk or a failing device lose the
//! output, and a script that goes on as if it had it acts on nothing. util-linux tools
//! (`close_stdout`) report it as `write error` and exit 1; so do we, with one line naming
//! the error, so that no verb exits 0 with its output lost. A closed stdout (`>&-`) is neither:
//! the Rust runtime opens `/dev/null` on a closed descriptor 0–2 before `main`, so the
//! output is discarded as the caller asked.

use std::cell::Cell;
use std::io::Write;

/// Writes `leasehold: LINE\n` to stderr in one `write` (embedded newlines are flattened, so
/// a message is always one line).
pub fn error_line(line: &str) {
    let mut buf = String::with_capacity(line.len() + 12);
    buf.push_str("leasehold: ");
    buf.push_str(&printable(&line.replace('\n', " ")));
    buf.push('\n');
    let _ = std::io::stderr().lock().write_all(buf.as_bytes());
}

/// `text` with every control character but newline and tab written as its Rust escape
/// (`\u{1b}`), so nothing printed can drive the terminal: holder records read from etcd, file
/// names and IDs found on disk, and paths the user passed reach stdout and stderr only
/// through here ([`error_line`] and [`Stdout::print`]). JSON output is unchanged (serde
/// escapes control characters already); record payloads (`session read`) are data, written
/// as they are by their own writer.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let escape = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(escape) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if escape(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A verb's stdout: the one writer every output of the CLI goes through.
///
/// Invariant: each [`print`](Stdout::print) is written and flushed before it returns (a
/// line a script waits for — `serve`'s answers, `flock --verbose` before COMMAND — is never
/// held in a buffer); once a write failed or the reader went away nothing more is written,
/// and [`finish`](Stdout::finish) reports the first failure that was not a reader going
/// away. So a verb may print from inside its work (under a lease, in a closure whose error
/// type is the store's) and decide what the failure means once the work is done.
#[derive(Default)]
pub struct Stdout {
    /// The first write error other than EPIPE.
    failed: Cell<Option<std::io::Error>>,
    /// Nothing more is written (a write failed, or the reader went away).
    ended: Cell<bool>,
}

impl Stdout {
    /// A writer that has written nothing yet.
    pub fn new() -> Stdout {
        Stdout::default()
    }

    /// Writes `text` and flushes. Returns whether the output is still being read: `false`
    /// once the reader went away or a write failed (then nothing is written any more).
    pub fn print(&self, text: &str) -> bool {
        if self.ended.get() {
            return false;
        }
        let text = printable(text);
        let mut out = std::io::stdout().lock();
        match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            Ok(()) => return true,
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            Err(e) => self.failed.set(Some(e)),
        }
        self.ended.set(true);
        false
    }

    /// [`print`](Stdout::print) of `line` and a newline.
    pub fn line(&self, line: impl std::fmt::Display) -> bool {
        self.print(&format!("{line}\n"))
    }

    /// The first write that failed (not counting a reader that went away), as an error
    /// whose message says what happened; it converts into the CLI's `Failure` (exit 1) with
    /// `?` (this module sits below `exit`).
    pub fn finish(self) -> std::io::Result<()> {
        match self.failed.take() {
            None => Ok(()),
            Some(e) => Err(std::io::Error::new(
                e.kind(),
                format!("writing stdout: {e}; the output is incomplete (check where stdout goes)"),
            )),
        }
    }
}

/// Writes `text` to stdout and flushes (see [`Stdout`]): a reader that went away is the end
/// of output, not a failure; any other write error is one.
pub fn print(text: &str) -> std::io::Result<()> {
    let out = Stdout::new();
    out.print(text);
    out.finish()
}

/// [`print()`] of `line` and a newline.
pub fn print_line(line: impl std::fmt::Display) -> std::io::Result<()> {
    print(&format!("{line}\n"))
}
