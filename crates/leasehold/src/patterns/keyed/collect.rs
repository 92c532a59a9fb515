//! The collector's protocol: [`KeyedLeases::collect`].

use std::collections::HashSet;
use std::time::Duration;

use super::{COLLECTOR_LOCK, Collection, KeyError, KeyedLeases, lock_name};
use crate::lease::claim::Mode;
use crate::{Budget, Error, LockDir};

/// How long a collection waits for the collector lock before each batch: acquisitions hold
/// it shared only across one more try of a busy key (microseconds), so this passes only
/// when another collection keeps it; the collection then stops and reports itself busy.
const COLLECTOR_PATIENCE: Duration = Duration::from_millis(100);

/// How many lock files a collection takes per batch: one exclusive hold of the collector
/// lock and one listing of the live keys per batch.
const COLLECT_BATCH: usize = 256;

impl KeyedLeases {
    /// Removes the lock files of keys that have no record, that nobody holds, and that are
    /// older than `older_than` (by modification time: lock files are never written, so it is
    /// their creation), by the protocol in the module documentation: in batches of
    /// `COLLECT_BATCH` lock files, each under the collector lock (released before the next
    /// batch): the batch's files locked (never waiting: a held lock file is kept), `live`
    /// asked once, the files of keys without records unlinked. `live` lists the keys that
    /// have records; it is also asked once before the first batch, and each listing tells
    /// the next batch which files to leave alone (the listing after a batch's locks is the
    /// one that decides).
    ///
    /// The collector lock is waited for a moment (`COLLECTOR_PATIENCE`) before each batch;
    /// if another collection keeps it longer, this one stops and reports itself
    /// [`busy`](Collection::busy), keeping whatever it had not examined.
    ///
    /// Lock files that are not a key's (foreign or hidden names, non-regular files) are left
    /// as they are and not counted.
    ///
    /// # Errors
    /// [`KeyError::Records`] when `live` fails, [`KeyError::Lease`] for an unusable root or
    /// namespace or an I/O failure.
    pub fn collect(
        &self,
        older_than: Duration,
        mut live: impl FnMut() -> std::io::Result<Vec<String>>,
    ) -> Result<Collection, KeyError> {
        let mut report = Collection::default();
        let root = match LockDir::open(&self.root) {
            Ok(dir) => dir,
            Err(Error::NotFound { .. }) => return Ok(report),
            Err(e) => return Err(e.into()),
        };
        let ns = match root.child(&self.namespace, false) {
            Ok(ns) => ns,
            Err(Error::NotFound { .. }) => return Ok(report),
            Err(e) => return Err(e.into()),
        };
        let names: Vec<String> = ns
            .names()?
            .into_iter()
            .filter_map(|n| n.into_string().ok())
            .filter(|n| is_lock_name(n))
            .collect();
        let mut list = || -> Result<HashSet<String>, KeyError> {
            let keys = live().map_err(|source| KeyError::Records {
                root: self.root.clone(),
                source,
            })?;
            Ok(keys.iter().map(|k| lock_name(k)).collect())
        };
        let mut with_records = list()?;
        let now = std::time::SystemTime::now();
        let mut batches = names.chunks(COLLECT_BATCH);
        while let Some(batch) = batches.next() {
            let (live, batch): (Vec<&String>, Vec<&String>) =
                batch.iter().partition(|n| with_records.contains(*n));
            report.kept += live.len();
            if batch.is_empty() {
                continue;
            }
            // The collector lock first: an acquisition that finds one of this batch's files
            // busy waits for it (see `Admission::confirm_busy`), not in the queue of a file
            // the batch is about to unlink.
            let exclusive = self.options.create(true).acquire_at_mode(
                &ns,
                COLLECTOR_LOCK,
                &Budget::timeout(COLLECTOR_PATIENCE),
                Mode::Exclusive,
            );
            let exclusive = match exclusive {
                Ok(lease) => lease,
                Err(e) if e.is_contended() => {
                    report.busy = true;
                    report.kept += batch.len() + batches.map(<[String]>::len).sum::<usize>();
                    break;
                }
                Err(e) => return Err(e.into()),
            };
            let mut locked = Vec::with_capacity(batch.len());
            for name in batch {
                match self.options.create(false).try_acquire_at(&ns, name) {
                    Ok(lease) => {
                        let age = now.duration_since(lease.modified()?).unwrap_or_default();
                        if age < older_than {
                            report.kept += 1;
                        } else {
                            locked.push((name, lease));
                        }
                    }
                    Err(Error::NotFound { .. }) => {} // gone meanwhile
                    Err(_) => report.kept += 1,       // held, or unusable: left as it is
                }
            }
            if !locked.is_empty() {
                // Every holder that had one of these files before us has released it now, so
                // a record it created is visible to this listing.
                with_records = list()?;
            }
            for (name, lease) in locked {
                if !with_records.contains(name) && lease.unlink_locked()? {
                    report.removed += 1;
                } else {
                    report.kept += 1;
                }
            }
            // Acquisitions go on between batches.
            drop(exclusive);
        }
        if report.removed > 0 {
            let _ = ns.sync();
        }
        Ok(report)
    }
}

/// Whether `name` is a key's lock file name: 64 lowercase hex digits and `.lock`.
fn is_lock_name(name: &str) -> bool {
    name.strip_suffix(".lock")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}
