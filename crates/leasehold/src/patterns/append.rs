//! An append-only JSON-lines log with one writer (the lease holder) and any number of
//! lock-free readers.
//!
//! The format is the simplest one a crash cannot corrupt silently: one record per line, each
//! line ending in `\n`. The contract, and why each part of it is there:
//!
//! * **One writer.** [`AppendLog`] is opened and written only with a held [`Lease`] in hand,
//!   and the lease is verified ([`Lease::verify`]) before the log is opened and before every
//!   record: two writers appending to one file interleave their bytes and tear each other's
//!   records, and a lease whose lock file was replaced excludes nobody.
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
//! * **Files** are created with mode 0600; the final component is never followed
//!   (`O_NOFOLLOW`) and anything but a regular file is refused untouched — a log replaced by a
//!   symlink to a victim file is never written through, and a FIFO never hangs the opener.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::error::{Classify, Error, ErrorClass};
use crate::lease::{self, Lease, LockDir};

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
    /// only while it is verified to be held.
    pub fn open_at(
        dir: &LockDir,
        name: &str,
        lease: &Lease,
        durability: Durability,
    ) -> Result<(AppendLog, Option<TornTail>), AppendError> {
        lease.verify()?;
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

    /// Appends one record (without its newline) as one line, after verifying `lease`;
    /// with [`Durability::EveryRecord`] it is on stable storage when this returns.
    ///
    /// A record must be non-empty and must not contain a newline. On error nothing of the
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
        Ok(())
    }

    /// Verifies the lease, then writes whole lines with one `write` call (rolled back on
    /// failure).
    fn write_lines(&mut self, lease: &Lease, lines: &[u8]) -> Result<(), AppendError> {
        if self.poisoned {
            return Err(AppendError::Poisoned {
                path: self.path.clone(),
            });
        }
        lease.verify()?;
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

    /// The next whole record, or `None` at the end (or at a torn tail).
    pub fn next_record(&mut self) -> Result<Option<Vec<u8>>, Error> {
        if self.done {
            return Ok(None);
        }
        let mut line = Vec::new();
        let n = self
            .inner
            .read_until(b'\n', &mut line)
            .map_err(|e| io_error(&self.path, "read log", e))?;
        if n == 0 {
            self.done = true;
            return Ok(None);
        }
        if line.last() != Some(&b'\n') {
            self.torn = Some(TornTail {
                offset: self.offset,
                len: n as u64,
            });
            self.done = true;
            return Ok(None);
        }
        line.pop();
        self.offset += n as u64;
        Ok(Some(line))
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
