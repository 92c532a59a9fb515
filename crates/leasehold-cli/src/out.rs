//! The CLI's two output helpers: every message to stderr is one line in one `write(2)`, and a
//! closed stdout ends the output instead of panicking.
//!
//! Why one write: `eprintln!` formats straight into unbuffered stderr, piece by piece (7–10
//! `write` calls for one message were counted), so processes that share a stderr — parallel
//! `run`s under one supervisor — splice each other's lines. A line of a few hundred bytes
//! written with one `write` to a pipe is atomic (POSIX: up to `PIPE_BUF`, 4096 on Linux).
//!
//! Why EPIPE is not an error: Rust ignores SIGPIPE, so `println!` panics (exit 101 with a
//! backtrace) when the reader has gone, as in `leasehold status x | head -0`. Whoever closed
//! the pipe wants no more output; the verb's work stands and its status is unchanged.

use std::io::Write;

/// Writes `leasehold: LINE\n` to stderr in one `write` (embedded newlines are flattened, so
/// a message is always one line).
pub fn error_line(line: &str) {
    let mut buf = String::with_capacity(line.len() + 12);
    buf.push_str("leasehold: ");
    buf.push_str(&line.replace('\n', " "));
    buf.push('\n');
    let _ = std::io::stderr().lock().write_all(buf.as_bytes());
}

/// Writes `text` to stdout and flushes. A reader that went away (EPIPE) is the end of
/// output, not a failure; any other write error is one.
/// (An error converts into the CLI's `Failure` with `?`: this module sits below `exit`.)
pub fn print(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(std::io::Error::new(
            e.kind(),
            format!("writing stdout: {e}"),
        )),
    }
}

/// [`print`] of `line` and a newline.
pub fn print_line(line: impl std::fmt::Display) -> std::io::Result<()> {
    print(&format!("{line}\n"))
}
