//! An append-only JSON-lines log with one writer (the lease holder) and any number of
//! lock-free readers.
//!
//! The format is the simplest one a crash cannot corrupt silently: one record per line, each
//! line ending in `\n`. The contract, and why each part of it is there:
//!
//! * **One writer.** [`AppendLog`] is opened and written only with a held [`Lease`] in hand,
//!   and the whole chain is verified before the log is opened and before every record: the
//!   lease ([`Lease::verify`]: the lock file is still the locked inode) and the directories
//!   the log was reached through (each still the directory of that name, up to the path the
//!   chain was opened as). Two writers appending to one file interleave their bytes and tear
//!   each other's records; a lease whose lock file was replaced excludes nobody; and a log
//!   whose directory was renamed keeps taking our appends through the open handles while a
//!   newcomer creates a fresh directory under the old name and becomes its writer (a session writer appended, exit 0, into a moved log beside a second owner).
//! * **One `write` per record.** A record and its newline are written with a single `write(2)`
//!   on an `O_APPEND` descriptor, so a record is never split by our own buffering and always
//!   lands at the end of the file. (The kernel completes a regular-file write in one call
//!   unless the disk fills up or a signal interrupts it; the remainder is then written at once
//!   by further calls before anything else, and a failed write is truncated away again.)
//! * **Durability.** [`Durability::EveryRecord`] (the default) `fsync`s after each record, so
//!   an acknowledged record survives a crash; [`Durability::Batch`] once per
//!   [`AppendLog::append_batch`] (or [`AppendLog::sync`]); [`Durability::None`] leaves it to
//!   the kernel.
//! * **Torn tails.** A crash in the middle of a write can leave a final line without its
//!   newline. Opening the log for writing detects it and truncates it away (under the lease)
//!   *before* the first append — otherwise the next record would be glued to the torn bytes
//!   and both would be lost as one unparseable line.
//! * **Readers** ([`LogReader`]) never touch the lock, so they never disturb or wait for the
//!   writer, and they work while it appends. They return only whole lines — a prefix of the
//!   log's records — and report (not return) a final line without a newline, which is either a
//!   torn record or one being written right now.
//! * **Bounded records.** A record is at most [`MAX_RECORD_LEN`] bytes (64 MiB): writers
//!   refuse a longer one, and readers never hold more than that of a line — a longer torn
//!   tail is skipped in constant memory — so reading a log costs bounded memory whatever a
//!   crash (or anyone) left in it.
//! * **Files** are created with mode 0600; the final component is never followed
//!   (`O_NOFOLLOW`) and anything but a regular file is refused untouched — a log replaced by a
//!   symlink to a victim file is never written through, and a FIFO never hangs the opener.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::error::{Classify, Error, ErrorClass};
use crate::lease::{self, Lease, LockDir};

/// The longest record a log holds, in bytes, without its newline: 64 MiB (67,108,864).
///
/// Writers refuse a longer record ([`AppendError::InvalidRecord`]), so that a reader never
/// needs more than this much memory for one record: [`LogReader`] holds at most this many
/// bytes of a line, skips a longer final line without a newline (a torn tail) in constant
/// memory, and reports a longer whole line as an error rather than reading it in (a 1.5 GB torn tail cost `session read` 1.5 GB, and a 3 GB one under a 2 GB
/// memory limit aborted it).
pub const MAX_RECORD_LEN: usize = 64 << 20;

/// What [`read_record_line`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineRead {
    /// A whole line: the buffer holds it without its newline, which was consumed.
    Whole,
    /// The input ended after the bytes the buffer holds, without a newline.
    Unterminated,
    /// The input was at its end: the buffer is empty.
    End,
    /// The line is longer than the limit: the buffer holds its first `limit` bytes and the
    /// input is positioned right after them (see [`skip_line`]).
    TooLong,
}

/// Reads one line of at most `limit` bytes (without its newline) from `input` into `buf`
/// (cleared first), never holding more than `limit` bytes of it: the one bounded line reading
/// of the log's reader and of writers that take records from a stream (the CLI's `session
/// append` reads its stdin through it).
///
/// # Errors
/// The input's read error.
pub fn read_record_line(
    input: &mut impl BufRead,
    buf: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<LineRead> {
    buf.clear();
    loop {
        let chunk = match input.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(if buf.is_empty() {
                LineRead::End
            } else {
                LineRead::Unterminated
            });
        }
        let (take, newline) = match newline_in(chunk) {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        let room = limit - buf.len();
        if take > room {
            reserve_capped(buf, room, limit);
            buf.extend_from_slice(&chunk[..room]);
            input.consume(room);
            return Ok(LineRead::TooLong);
        }
        reserve_capped(buf, take, limit);
        buf.extend_from_slice(&chunk[..take]);
        input.consume(take + usize::from(newline));
        if newline {
            return Ok(LineRead::Whole);
        }
    }
}

/// The offset of the first newline in `chunk`. `contains` first: for bytes it is the
/// standard library's `memchr` (word at a time), so a long line without a newline — the case
/// that must not be slow, a torn tail of gigabytes — is passed over at memory speed.
fn newline_in(chunk: &[u8]) -> Option<usize> {
    match chunk.contains(&b'\n') {
        true => chunk.iter().position(|b| *b == b'\n'),
        false => None,
    }
}

/// Grows `buf` for `more` bytes the way `Vec` does (doubling), but never past `limit`: a
/// line of the limit's length costs the limit, not the next power of two above it.
fn reserve_capped(buf: &mut Vec<u8>, more: usize, limit: usize) {
    let need = buf.len() + more;
    if need > buf.capacity() {
        let want = (buf.capacity() * 2).max(need).min(limit.max(need));
        buf.reserve_exact(want - buf.len());
    }
}

/// Skips the rest of a line in constant memory: how many bytes were skipped and whether its
/// newline was found (and consumed) before the input ended.
///
/// # Errors
/// The input's read error.
pub fn skip_line(input: &mut impl BufRead) -> std::io::Result<(u64, bool)> {
    let mut skipped = 0u64;
    loop {
        let chunk = match input.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok((skipped, false));
        }
        match newline_in(chunk) {
            Some(i) => {
                input.consume(i + 1);
                return Ok((skipped + i as u64, true));
            }
            None => {
                let n = chunk.len();
                input.consume(n);
                skipped += n as u64;
            }
        }
    }
}

/// How far an append is pushed to stable storage before it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `fsync` after every record: an acknowledged record survives a crash or power loss.
    #[default]
    EveryRecord,
    /// `fsync` once per [`AppendLog::append_batch`] and on [`AppendLog::sync`] (and, best
    /// effort, on drop): cheaper, and a crash loses at most the unsynced batch.
    Batch,
    /// Never `fsync`: the kernel writes the records back when it likes. A process crash loses
    /// nothing; a machine crash may lose recent records (and leave a torn tail).
    None,
}

/// A final line without its newline: where it starts and how many bytes it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTail {
    /// Offset of the first byte after the last whole record.
    pub offset: u64,
    /// Length of the torn bytes.
    pub len: u64,
}

/// Errors of the append-only log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// Opening, verifying the lease, reading or writing failed; the error names the path.
    #[error(transparent)]
    Lease(#[from] Error),
    /// The record cannot be one line of the log; nothing was written.
    #[error("{path}: invalid record: {reason}")]
    InvalidRecord {
        /// The log file.
        path: PathBuf,
        /// Why the record was refused.
        reason: &'static str,
    },
    /// An earlier write failed and its partial bytes could not be truncated away, so a further
    /// append could glue a record to them. Drop this handle; the next writer to open the log
    /// repairs the torn tail.
    #[error(
        "{path}: an earlier append failed and could not be rolled back; reopen the log (opening repairs the torn tail)"
    )]
    Poisoned {
        /// The log file.
        path: PathBuf,
    },
}

impl Classify for AppendError {
    /// How a caller should treat this error: a refused record is [`ErrorClass::Usage`]
    /// (nothing was written), a poisoned handle [`ErrorClass::Failure`], and a lease or I/O
    /// error has its own class.
    fn class(&self) -> ErrorClass {
        match self {
            AppendError::Lease(e) => e.class(),
            AppendError::InvalidRecord { .. } => ErrorClass::Usage,
            AppendError::Poisoned { .. } => ErrorClass::Failure,
        }
    }
}

impl AppendError {
    /// True when the log path itself is unusable (not a regular file, permission denied, …):
    /// the caller's input is at fault and nothing was changed.
    pub fn is_unusable_path(&self) -> bool {
        matches!(self, AppendError::Lease(e) if e.is_unusable_path())
    }
}

/// The writer's handle on an append-only log. See the module docs for the contract.
///
/// Every method that writes takes the [`Lease`] that makes this process the log's only
/// writer and verifies it first; the handle does not own the lease so that a store can keep
/// the lease for longer than one open log (for example across a reopen after an error).
#[derive(Debug)]
pub struct AppendLog {
    file: File,
    path: PathBuf,
    /// The directory the log was opened in, kept to verify its chain before every append.
    dir: LockDir,
    /// File length after our last successful append: we are the only writer, so this is where
    /// a failed write is truncated back to.
    len: u64,
    durability: Durability,
    unsynced: bool,
    poisoned: bool,
}

impl AppendLog {
    /// Opens (creating with mode 0600) the log `name` inside `dir` for appending, after
    /// verifying `lease`; a torn tail left by a crashed writer is truncated away before this
    /// returns, and reported.
    ///
    /// `lease` must be the lease that guards this log: the repair and every append happen
    /// only while it is verified to be held and the chain of directories `dir` was reached
    /// through still stands (each name still names the directory that was opened).
    pub fn open_at(
        dir: &LockDir,
        name: &str,
        lease: &Lease,
        durability: Durability,
    ) -> Result<(AppendLog, Option<TornTail>), AppendError> {
        lease.verify()?;
        dir.verify()?;
        let path = dir.path().join(name);
        let Some((file, existed)) = dir.open_file(name, true, true)? else {
            return Err(Error::NotFound { path }.into());
        };
        let len = file
            .metadata()
            .map_err(|e| io_error(&path, "stat log", e))?
            .len();
        if !existed && durability != Durability::None {
            // The new name must survive a crash too, not only the records written under it.
            sync_dir(dir).map_err(|e| io_error(&path, "sync log directory", e))?;
        }
        let mut log = AppendLog {
            file,
            path,
            dir: dir.clone(),
            len,
            durability,
            unsynced: false,
            poisoned: false,
        };
        let torn = log.repair()?;
        Ok((log, torn))
    }

    /// The log file's path (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The length of the log in bytes: all whole records, each with its newline.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the log holds no record.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends one record (without its newline) as one line, after verifying `lease` and the
    /// log's directory chain;
    /// with [`Durability::EveryRecord`] it is on stable storage when this returns.
    ///
    /// A record must be non-empty, must not contain a newline and must not be longer than
    /// [`MAX_RECORD_LEN`]. On error nothing of the
    /// record remains in the log (or the handle is [`AppendError::Poisoned`]).
    pub fn append(&mut self, lease: &Lease, record: &[u8]) -> Result<(), AppendError> {
        self.write_record(lease, record)?;
        if self.durability == Durability::EveryRecord {
            self.sync_last()?;
        }
        Ok(())
    }

    /// Appends several records as one batch: every record is checked first (a batch with an
    /// invalid record writes nothing), the lease is verified once, the lines go out in one
    /// `write`, and one `fdatasync` follows (unless the durability is [`Durability::None`]).
    /// Returns how many records were appended.
    ///
    /// One lease check covers the batch as one covers a single record: either way the check
    /// precedes the write it guards, and a lock file replaced afterwards is caught at the next
    /// append. A crash mid-write leaves a torn tail, which the next writer cuts back to the
    /// last whole record, as for a single record. A failed write or sync removes the whole
    /// batch again, so a batch reported as failed is not in the log.
    pub fn append_batch<I, R>(&mut self, lease: &Lease, records: I) -> Result<usize, AppendError>
    where
        I: IntoIterator<Item = R>,
        R: AsRef<[u8]>,
    {
        let mut lines = Vec::new();
        let mut n = 0;
        for record in records {
            let record = record.as_ref();
            self.check_record(record)?;
            lines.extend_from_slice(record);
            lines.push(b'\n');
            n += 1;
        }
        if n == 0 {
            return Ok(0);
        }
        let before = self.len;
        self.write_lines(lease, &lines)?;
        if self.durability != Durability::None
            && let Err(e) = self.sync()
        {
            self.len = before;
            self.roll_back();
            return Err(e);
        }
        Ok(n)
    }

    /// Pushes every appended record to stable storage.
    pub fn sync(&mut self) -> Result<(), AppendError> {
        if self.unsynced {
            self.file
                .sync_data()
                .map_err(|e| io_error(&self.path, "sync log", e))?;
            self.unsynced = false;
        }
        Ok(())
    }

    fn write_record(&mut self, lease: &Lease, record: &[u8]) -> Result<(), AppendError> {
        self.check_record(record)?;
        let mut line = Vec::with_capacity(record.len() + 1);
        line.extend_from_slice(record);
        line.push(b'\n');
        self.write_lines(lease, &line)
    }

    /// A record must be one non-empty line.
    fn check_record(&self, record: &[u8]) -> Result<(), AppendError> {
        let invalid = |reason| AppendError::InvalidRecord {
            path: self.path.clone(),
            reason,
        };
        if record.is_empty() {
            return Err(invalid("a record must not be empty"));
        }
        if record.contains(&b'\n') {
            return Err(invalid("a record must not contain a newline"));
        }
        if record.len() > MAX_RECORD_LEN {
            return Err(invalid(
                "a record must not be longer than 64 MiB (67108864 bytes, MAX_RECORD_LEN)",
            ));
        }
        Ok(())
    }

    /// Verifies the lease and the log's directory chain, then writes whole lines with one
    /// `write` call (rolled back on failure).
    fn write_lines(&mut self, lease: &Lease, lines: &[u8]) -> Result<(), AppendError> {
        if self.poisoned {
            return Err(AppendError::Poisoned {
                path: self.path.clone(),
            });
        }
        lease.verify()?;
        self.dir.verify()?;
        if let Err(e) = write_at_end(&self.file, lines, self.len) {
            self.roll_back();
            return Err(io_error(&self.path, "append record", e).into());
        }
        self.len += lines.len() as u64;
        self.unsynced = true;
        Ok(())
    }

    /// `fsync` after a single record; a record that could not be made durable is removed
    /// again, so that an append reported as failed is not in the log.
    fn sync_last(&mut self) -> Result<(), AppendError> {
        let before = self.len;
        match self.sync() {
            Ok(()) => Ok(()),
            Err(e) => {
                if let Some(start) = self.last_start(before) {
                    self.len = start;
                    self.roll_back();
                }
                Err(e)
            }
        }
    }

    /// Offset where the last record (ending at `end`) starts.
    fn last_start(&self, end: u64) -> Option<u64> {
        if end == 0 {
            return None;
        }
        last_newline_before(&self.file, end - 1)
            .ok()
            .map(|p| p.map_or(0, |p| p + 1))
    }

    /// Truncates back to the last known good length; poisons the handle if that fails.
    fn roll_back(&mut self) {
        if self.file.set_len(self.len).is_err() {
            self.poisoned = true;
        }
    }

    /// Truncates a final line that lacks its newline (see the module docs for why).
    fn repair(&mut self) -> Result<Option<TornTail>, AppendError> {
        if self.len == 0 {
            return Ok(None);
        }
        let mut last = [0u8; 1];
        lease::read_exact_at(&self.file, &mut last, self.len - 1)
            .map_err(|e| io_error(&self.path, "read log", e))?;
        if last[0] == b'\n' {
            return Ok(None);
        }
        let keep = last_newline_before(&self.file, self.len)
            .map_err(|e| io_error(&self.path, "read log", e))?
            .map_or(0, |p| p + 1);
        self.file
            .set_len(keep)
            .map_err(|e| io_error(&self.path, "truncate torn tail", e))?;
        if self.durability != Durability::None {
            self.file
                .sync_data()
                .map_err(|e| io_error(&self.path, "sync log", e))?;
        }
        let torn = TornTail {
            offset: keep,
            len: self.len - keep,
        };
        self.len = keep;
        Ok(Some(torn))
    }
}

impl Drop for AppendLog {
    fn drop(&mut self) {
        if self.durability == Durability::Batch {
            let _ = self.sync();
        }
    }
}

/// A lock-free reader of an append-only log: yields whole records (without their newline) in
/// order, and stops before a final line without a newline, which it reports through
/// [`torn_tail`](LogReader::torn_tail).
///
/// It never opens, takes or waits for the log's lock, and never creates or writes anything,
/// so it can run while a writer appends; what it yields is always a prefix of the records.
#[derive(Debug)]
pub struct LogReader {
    inner: BufReader<File>,
    path: PathBuf,
    offset: u64,
    torn: Option<TornTail>,
    done: bool,
}

impl LogReader {
    /// Opens the log `name` inside `dir` for reading; `Ok(None)` when there is no such file.
    /// A symlink, FIFO, directory or other non-regular file is refused untouched.
    pub fn open_at(dir: &LockDir, name: &str) -> Result<Option<LogReader>, Error> {
        let path = dir.path().join(name);
        let Some((file, _)) = dir.open_file(name, false, false)? else {
            return Ok(None);
        };
        Ok(Some(LogReader {
            inner: BufReader::new(file),
            path,
            offset: 0,
            torn: None,
            done: false,
        }))
    }

    /// The next whole record, or `None` at the end (or at a torn tail). Holds at most
    /// [`MAX_RECORD_LEN`] bytes of a line: a longer torn tail is skipped in constant memory
    /// (and reported as any torn tail is).
    ///
    /// # Errors
    /// A read error; or a whole line longer than [`MAX_RECORD_LEN`], which no writer of
    /// this module writes (the log was changed by something else): reading stops there, after
    /// the records before it.
    pub fn next_record(&mut self) -> Result<Option<Vec<u8>>, Error> {
        if self.done {
            return Ok(None);
        }
        let mut line = Vec::new();
        let read = read_record_line(&mut self.inner, &mut line, MAX_RECORD_LEN)
            .map_err(|e| io_error(&self.path, "read log", e))?;
        let len = match read {
            LineRead::Whole => {
                self.offset += line.len() as u64 + 1;
                return Ok(Some(line));
            }
            LineRead::End => {
                self.done = true;
                return Ok(None);
            }
            LineRead::Unterminated => line.len() as u64,
            LineRead::TooLong => {
                drop(line);
                let (rest, newline) =
                    skip_line(&mut self.inner).map_err(|e| io_error(&self.path, "read log", e))?;
                let len = MAX_RECORD_LEN as u64 + rest;
                if newline {
                    self.done = true;
                    let source = std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!(
                            "the line at byte {} is {len} bytes long, over the record limit of {MAX_RECORD_LEN} bytes, which no writer writes: something else changed the log (the records before it were read; cut the line out to read past it)",
                            self.offset
                        ),
                    );
                    return Err(io_error(&self.path, "read log", source));
                }
                len
            }
        };
        self.torn = Some(TornTail {
            offset: self.offset,
            len,
        });
        self.done = true;
        Ok(None)
    }

    /// The final line without a newline that reading stopped at, once reached.
    pub fn torn_tail(&self) -> Option<TornTail> {
        self.torn
    }
}

impl Iterator for LogReader {
    type Item = Result<Vec<u8>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

/// Offset of the last `\n` in the first `end` bytes of `file`, scanning backwards.
fn last_newline_before(file: &File, end: u64) -> std::io::Result<Option<u64>> {
    const CHUNK: u64 = 64 * 1024;
    let mut buf = vec![0u8; CHUNK as usize];
    let mut hi = end;
    while hi > 0 {
        let lo = hi.saturating_sub(CHUNK);
        let chunk = &mut buf[..(hi - lo) as usize];
        lease::read_exact_at(file, chunk, lo)?;
        if let Some(i) = chunk.iter().rposition(|b| *b == b'\n') {
            return Ok(Some(lo + i as u64));
        }
        hi = lo;
    }
    Ok(None)
}

/// Writes whole lines at the end of the log in one `write` call (more calls only if the
/// kernel completes it partially).
///
/// POSIX and WASI: the descriptor is `O_APPEND`, so the write lands at the end whatever the
/// offset.
/// Windows: the handle has `FILE_WRITE_DATA` (truncating a torn tail or a failed write needs
/// it, and with it `FILE_APPEND_DATA` no longer forces writes to the end), so the write is
/// positioned at `end`, the length after our last append — we are the only writer.
#[cfg(not(windows))]
fn write_at_end(file: &File, lines: &[u8], _end: u64) -> std::io::Result<()> {
    use std::io::Write;
    (&*file).write_all(lines)
}

#[cfg(windows)]
fn write_at_end(file: &File, mut lines: &[u8], mut end: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !lines.is_empty() {
        match file.seek_write(lines, end) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                lines = &lines[n..];
                end += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn sync_dir(dir: &LockDir) -> std::io::Result<()> {
    dir.sync()
}

fn io_error(path: &Path, op: &'static str, source: std::io::Error) -> Error {
    Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        _tmp: tempfile::TempDir,
        dir: LockDir,
        lease: Lease,
    }

    fn fixture() -> Fixture {
        let tmp = crate::test_dir();
        let dir = LockDir::open(tmp.path()).unwrap();
        // The only process here (WASI needs the opt-in; native targets lock as ever).
        let lease = crate::LeaseOptions::new()
            .single_process(true)
            .try_acquire_at(&dir, "log.lock")
            .unwrap();
        Fixture {
            _tmp: tmp,
            dir,
            lease,
        }
    }

    fn content(f: &Fixture) -> Vec<u8> {
        std::fs::read(f.dir.path().join("log.jsonl")).unwrap()
    }

    fn read_all(f: &Fixture) -> (Vec<Vec<u8>>, Option<TornTail>) {
        let mut r = LogReader::open_at(&f.dir, "log.jsonl").unwrap().unwrap();
        let records: Vec<Vec<u8>> = (&mut r).map(Result::unwrap).collect();
        (records, r.torn_tail())
    }

    #[test]
    fn appends_whole_lines_in_every_durability_mode() {
        for durability in [Durability::EveryRecord, Durability::Batch, Durability::None] {
            let f = fixture();
            let (mut log, torn) =
                AppendLog::open_at(&f.dir, "log.jsonl", &f.lease, durability).unwrap();
            assert_eq!(torn, None);
            log.append(&f.lease, br#"{"a":1}"#).unwrap();
            assert_eq!(log.append_batch(&f.lease, [&b"2"[..], b"[3]"]).unwrap(), 2);
            log.sync().unwrap();
            assert_eq!(content(&f), b"{\"a\":1}\n2\n[3]\n");
            assert_eq!(log.len(), 14);
            let (records, torn) = read_all(&f);
            assert_eq!(
                records,
                vec![br#"{"a":1}"#.to_vec(), b"2".to_vec(), b"[3]".to_vec()]
            );
            assert_eq!(torn, None);
        }
    }

    #[test]
    fn a_batch_is_all_or_nothing_and_checks_the_lease_before_writing() {
        let f = fixture();
        let (mut log, _) =
            AppendLog::open_at(&f.dir, "log.jsonl", &f.lease, Durability::Batch).unwrap();
        log.append(&f.lease, b"1").unwrap();
        // An invalid record anywhere in the batch: nothing of the batch is written.
        let err = log.append_batch(&f.lease, [&b"2"[..], b"bad\nline", b"4"]);
        assert!(
            matches!(err, Err(AppendError::InvalidRecord { .. })),
            "{err:?}"
        );
        assert_eq!(content(&f), b"1\n");
        // The lock file replaced (POSIX: there the file is the lock): the batch is refused
        // before any byte is written.
        #[cfg(unix)]
        {
            std::fs::remove_file(f.dir.path().join("log.lock")).unwrap();
            let err = log.append_batch(&f.lease, [&b"5"[..], b"6"]);
            assert!(err.is_err(), "a lost lease must stop the batch");
            assert_eq!(content(&f), b"1\n");
        }
        assert_eq!(log.append_batch(&f.lease, Vec::<&[u8]>::new()).unwrap(), 0);
    }

    #[cfg(unix)] // Windows files have no mode bits
    #[test]
    fn new_log_is_mode_0600() {
        use std::os::unix::fs::PermissionsExt;
        let f = fixture();
        AppendLog::open_at(&f.dir, "log.jsonl", &f.lease, Durability::default()).unwrap();
        let meta = std::fs::metadata(f.dir.path().join("log.jsonl")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn refuses_records_that_are_not_one_line() {
        let f = fixture();
        let (mut log, _) =
            AppendLog::open_at(&f.dir, "log.jsonl", &f.lease, Durability::default()).unwrap();
        log.append(&f.lease, b"1").unwrap();
        for bad in [&b""[..], b"2\n", b"{\n}"] {
            let e = log.append(&f.lease, bad).unwrap_err();
            assert!(matches!(e, AppendError::InvalidRecord { .. }), "{e}");
        }
        assert_eq!(content(&f), b"1\n");
    }

    #[test]
    fn torn_tail_is_truncated_before_the_next_append() {
        let f = fixture();
        std::fs::write(f.dir.path().join("log.jsonl"), b"{\"a\":1}\n{\"b\":").unwrap();
        let (mut log, torn) =
            AppendLog::open_at(&f.dir, "log.jsonl", &f.lease, Durability::default()).unwrap();
        assert_eq!(torn, Some(TornTail { offset: 8, len: 5 }));
        assert_eq!(
            content(&f),
            b"{\"a\":1}\n",
            "torn bytes are gone before any append"
        );
        log.append(&f.lease, b"{\"c\":3}").unwrap();
        assert_eq!(content(&f), b"{\"a\":1}\n{\"c\":3}\n");
    }

    #[test]
    fn torn_only_line_is_truncated_to_empty() {
        let f = fixture();
        // Longer than one scan chunk, and no newline anywhere.
        std::fs::write(f.dir.path().join("log.jsonl"), vec![b'x'; 200_000]).unwrap();
        let (log, torn) =
            AppendLog::open_at(&f.dir, "log.jsonl", &f.lease, Durability::None).unwrap();
        assert_eq!(
            torn,
            Some(TornTail {
                offset: 0,
                len: 200_000
            })
        );
        assert!(log.is_empty());
        assert_eq!(content(&f), b"");
    }

    #[test]
    fn reader_skips_and_reports_a_torn_tail() {
        let f = fixture();
        std::fs::write(f.dir.path().join("log.jsonl"), b"1\n22\n{\"torn").unwrap();
        let (records, torn) = read_all(&f);
        assert_eq!(records, vec![b"1".to_vec(), b"22".to_vec()]);
        assert_eq!(torn, Some(TornTail { offset: 5, len: 6 }));
    }

    #[test]
    fn bounded_line_reading_holds_at_most_the_limit() {
        let read = |input: &[u8], limit| {
            let mut cursor = std::io::BufReader::with_capacity(3, input);
            let mut buf = Vec::new();
            let mut out = Vec::new();
            loop {
                let r = read_record_line(&mut cursor, &mut buf, limit).unwrap();
                assert!(buf.len() <= limit && buf.capacity() <= limit.max(8));
                out.push((r, String::from_utf8(buf.clone()).unwrap()));
                match r {
                    LineRead::End | LineRead::Unterminated => return out,
                    LineRead::TooLong => {
                        let (rest, newline) = skip_line(&mut cursor).unwrap();
                        out.push((LineRead::TooLong, format!("{rest} {newline}")));
                        if !newline {
                            return out;
                        }
                    }
                    LineRead::Whole => {}
                }
            }
        };
        use LineRead::*;
        let s = |x: &str| x.to_string();
        assert_eq!(
            read(b"abcd\n\nabcde\nxy", 4),
            [
                (Whole, s("abcd")),
                (Whole, s("")),
                (TooLong, s("abcd")),
                (TooLong, s("1 true")),
                (Unterminated, s("xy"))
            ]
        );
        assert_eq!(
            read(b"abcdefghij", 4),
            [(TooLong, s("abcd")), (TooLong, s("6 false"))]
        );
        assert_eq!(read(b"", 4), [(End, s(""))]);
        assert_eq!(read(b"ab\n", 4), [(Whole, s("ab")), (End, s(""))]);
    }

    // Not on WASI: a guest memory grown past 64 MiB makes Node 20's WASI crash (SIGSEGV) in
    // most runs after the tests passed (v20.20.2: 8 and 10 of 10 runs of these two alone, 0 of
    // 10 for every other test of the module); the limit's logic is the same on every target.
    #[cfg(not(target_os = "wasi"))]
    #[test]
    fn a_record_over_the_limit_is_refused_and_nothing_is_written() {
        let f = fixture();
        let (mut log, _) =
            AppendLog::open_at(&f.dir, "log.jsonl", &f.lease, Durability::None).unwrap();
        log.append(&f.lease, b"1").unwrap();
        let big = vec![b'x'; MAX_RECORD_LEN + 1];
        let e = log.append(&f.lease, &big).unwrap_err();
        assert!(matches!(e, AppendError::InvalidRecord { .. }), "{e}");
        assert!(e.to_string().contains("67108864"), "{e}");
        assert_eq!(e.class(), ErrorClass::Usage);
        let e = log.append_batch(&f.lease, [&b"2"[..], &big]).unwrap_err();
        assert!(matches!(e, AppendError::InvalidRecord { .. }), "{e}");
        assert_eq!(content(&f), b"1\n");
    }

    /// The reader holds at most the limit of a line. A torn tail far
    /// longer than the limit (sparse: no disk is spent on it) is skipped and reported; a
    /// whole line longer than the limit, which no writer writes, stops reading with an error
    /// after the records before it.
    #[cfg(not(target_os = "wasi"))] // Node 20's WASI and a grown memory: see above
    #[test]
    fn the_reader_skips_a_torn_tail_over_the_limit_and_refuses_a_line_over_it() {
        let f = fixture();
        let path = f.dir.path().join("log.jsonl");
        std::fs::write(&path, b"1\n").unwrap();
        let tail = MAX_RECORD_LEN as u64 + 4096;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(2 + tail)
            .unwrap();
        let (records, torn) = read_all(&f);
        assert_eq!(records, vec![b"1".to_vec()]);
        assert_eq!(
            torn,
            Some(TornTail {
                offset: 2,
                len: tail
            })
        );

        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut file, b"\n2\n").unwrap();
        let mut r = LogReader::open_at(&f.dir, "log.jsonl").unwrap().unwrap();
        assert_eq!(r.next_record().unwrap(), Some(b"1".to_vec()));
        let e = r.next_record().unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("log.jsonl") && text.contains("at byte 2"),
            "{text}"
        );
        assert!(text.contains(&format!("{tail} bytes long")), "{text}");
        assert_eq!(r.next_record().unwrap(), None, "reading stops there");
    }

    #[test]
    fn reader_of_a_missing_log_creates_nothing() {
        let f = fixture();
        assert!(LogReader::open_at(&f.dir, "log.jsonl").unwrap().is_none());
        assert!(!f.dir.path().join("log.jsonl").exists());
    }

    #[cfg(unix)] // symlinks and FIFOs; Windows: a directory in the way is refused below
    #[test]
    fn hostile_log_paths_are_refused_untouched() {
        let f = fixture();
        let victim = f.dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let log = f.dir.path().join("log.jsonl");
        std::os::unix::fs::symlink(&victim, &log).unwrap();
        let e =
            AppendLog::open_at(&f.dir, "log.jsonl", &f.lease, Durability::default()).unwrap_err();
        assert!(e.is_unusable_path(), "{e}");
        assert!(
            LogReader::open_at(&f.dir, "log.jsonl")
                .unwrap_err()
                .is_unusable_path()
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");

        std::fs::remove_file(&log).unwrap();
        crate::lease::tests::make_fifo(&log);
        // Would hang in open(2) if the FIFO were opened blocking.
        assert!(
            AppendLog::open_at(&f.dir, "log.jsonl", &f.lease, Durability::default())
                .unwrap_err()
                .is_unusable_path()
        );
        assert!(
            LogReader::open_at(&f.dir, "log.jsonl")
                .unwrap_err()
                .is_unusable_path()
        );

        std::fs::remove_file(&log).unwrap();
        std::fs::create_dir(&log).unwrap();
        assert!(
            AppendLog::open_at(&f.dir, "log.jsonl", &f.lease, Durability::default())
                .unwrap_err()
                .is_unusable_path()
        );
        assert!(log.is_dir());
    }

    #[test]
    fn a_directory_in_place_of_the_log_is_refused_untouched() {
        let f = fixture();
        let log = f.dir.path().join("log.jsonl");
        std::fs::create_dir(&log).unwrap();
        let e =
            AppendLog::open_at(&f.dir, "log.jsonl", &f.lease, Durability::default()).unwrap_err();
        assert!(e.is_unusable_path(), "{e}");
        assert!(
            LogReader::open_at(&f.dir, "log.jsonl")
                .unwrap_err()
                .is_unusable_path()
        );
        assert!(log.is_dir());
    }

    #[cfg(unix)] // replacing the lock file loses the lease only where the file is the lock
    #[test]
    fn appends_fail_closed_when_the_lease_is_lost() {
        let f = fixture();
        let (mut log, _) =
            AppendLog::open_at(&f.dir, "log.jsonl", &f.lease, Durability::default()).unwrap();
        log.append(&f.lease, b"1").unwrap();
        // Someone replaced the lock file: our lock excludes nobody any more.
        let lock = f.dir.path().join("log.lock");
        std::fs::remove_file(&lock).unwrap();
        std::fs::write(&lock, b"").unwrap();
        let e = log.append(&f.lease, b"2").unwrap_err();
        assert!(
            matches!(e, AppendError::Lease(Error::LeaseLost { .. })),
            "{e}"
        );
        assert!(matches!(
            AppendLog::open_at(&f.dir, "log.jsonl", &f.lease, Durability::default()),
            Err(AppendError::Lease(Error::LeaseLost { .. }))
        ));
        assert_eq!(content(&f), b"1\n");
    }

    /// A log whose directory is renamed keeps working through our handles,
    /// while a newcomer resolves the old name to a fresh directory and takes a fresh lock
    /// there; the next append must fail closed instead of going into the moved log.
    #[cfg(unix)] // Windows binds names to the real path at open (its verify answers Ok)
    #[test]
    fn appends_fail_closed_when_the_logs_directory_is_renamed() {
        let tmp = crate::test_dir();
        let root = LockDir::open(tmp.path()).unwrap();
        let dir = root.child("s", true).unwrap();
        let lease = crate::LeaseOptions::new()
            .try_acquire_at(&dir, "log.lock")
            .unwrap();
        let (mut log, _) = AppendLog::open_at(&dir, "log.jsonl", &lease, Durability::None).unwrap();
        log.append(&lease, b"1").unwrap();
        std::fs::rename(tmp.path().join("s"), tmp.path().join("moved")).unwrap();
        // The lock file is still the locked inode in the (moved) directory handle; the
        // lease's verify walks the handle's chain and sees the path now leads elsewhere.
        assert!(matches!(lease.verify(), Err(Error::LeaseLost { .. })));
        let e = log.append(&lease, b"2").unwrap_err();
        assert!(
            matches!(&e, AppendError::Lease(Error::LeaseLost { path }) if path.ends_with("s")),
            "{e}"
        );
        assert_eq!(
            std::fs::read(tmp.path().join("moved/log.jsonl")).unwrap(),
            b"1\n"
        );
        assert!(matches!(
            AppendLog::open_at(&dir, "log.jsonl", &lease, Durability::None),
            Err(AppendError::Lease(Error::LeaseLost { .. }))
        ));
    }

    #[cfg(not(target_os = "wasi"))] // a reader thread beside the writer: wasm32-wasip1 has one thread
    #[test]
    fn readers_see_a_prefix_of_whole_records_while_a_writer_appends() {
        let f = fixture();
        // Records of many pages each, and the reader released at the same moment as the
        // writer, make a partially copied record visible to a reader that would return one.
        let record = |i: usize| {
            let pad = char::from(b'a' + (i % 26) as u8)
                .to_string()
                .repeat(1 << 20);
            format!("{{\"i\":{i},\"pad\":\"{pad}\"}}").into_bytes()
        };
        let per_trial = 3;
        for trial in 0..100 {
            let name = format!("race{trial}.jsonl");
            let (mut log, _) =
                AppendLog::open_at(&f.dir, &name, &f.lease, Durability::None).unwrap();
            let start = std::sync::Barrier::new(2);
            std::thread::scope(|s| {
                s.spawn(|| {
                    start.wait();
                    for i in 0..per_trial {
                        log.append(&f.lease, &record(i)).unwrap();
                    }
                });
                start.wait();
                loop {
                    let mut r = LogReader::open_at(&f.dir, &name).unwrap().unwrap();
                    let records: Vec<Vec<u8>> = (&mut r).map(Result::unwrap).collect();
                    for (i, got) in records.iter().enumerate() {
                        assert!(*got == record(i), "trial {trial}: record {i} is not whole");
                    }
                    if records.len() == per_trial {
                        break;
                    }
                }
            });
            std::fs::remove_file(f.dir.path().join(&name)).unwrap();
        }
    }
}
