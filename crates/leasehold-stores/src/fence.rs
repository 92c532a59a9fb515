//! The fence beside a lock file: `<lock>.fence`, one decimal number — the highest fencing
//! token a writer under a record lease ([`leasehold::MountLease::Record`]) has claimed. A
//! writer claims its grant's token as soon as it holds the lease, before it reads what it
//! will change ([`Fence::claim`]: refused if a higher token is there), and compares it again
//! as the last step before its rename ([`Fence::check`]). A holder that was paused past its
//! TTL and then resumes finds its successor's higher token at either step and writes
//! nothing. docs/design.md ("Fencing the stores' writes") gives the argument and what it
//! leaves open: a pause between the last check and the rename.

use std::io;
use std::path::{Path, PathBuf};

use leasehold::Error as LeaseError;
use leasehold::{LockDir, MountLease};

/// `--cfg leasehold_mutant_no_fence`: a mutant build the two-mount torture must catch
/// (RELIABILITY.md), whose stores neither claim nor compare the fence nor apply the margin
/// rule again before a write (the lease's own verification stays). Never set in a real
/// build.
pub(crate) const MUTANT: bool = cfg!(leasehold_mutant_no_fence);
use leasehold::patterns::durable::{remove_temporaries_in, replace_file};

use crate::read::read_regular;

/// The fence of one lock path.
#[derive(Debug, Clone)]
pub(crate) struct Fence {
    lock: PathBuf,
    path: PathBuf,
}

impl Fence {
    /// The fence of the lock path `lock`: `<lock>.fence` beside it.
    pub(crate) fn of(lock: &Path) -> Fence {
        let mut name = lock.as_os_str().to_owned();
        name.push(".fence");
        Fence {
            lock: lock.to_path_buf(),
            path: PathBuf::from(name),
        }
    }

    /// Under a grant with `token`, before reading what the write will change: refuses
    /// ([`LeaseError::LeaseLost`], naming the lock path) when the fence holds a higher token
    /// (a later holder claimed it: this grant was taken over); otherwise raises the fence to
    /// `token`, durably. Leftover temporaries of a writer killed while raising it are
    /// removed first (under the lease, no writer is mid-rewrite).
    pub(crate) fn claim(&self, token: u64) -> Result<(), LeaseError> {
        if MUTANT {
            return Ok(());
        }
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty());
        if let (Some(dir), Some(name)) = (dir, self.path.file_name().and_then(|n| n.to_str())) {
            let opened =
                LockDir::open(dir).map_err(|e| self.io("open the directory of", e.into()))?;
            remove_temporaries_in(&opened, name)
                .map_err(|e| self.io("remove leftover temporaries of", e))?;
        }
        match self.read()? {
            Some(seen) if seen > token => Err(self.lost()),
            Some(seen) if seen == token => Ok(()),
            _ => replace_file(&self.path, format!("{token}\n").as_bytes())
                .map_err(|e| self.io("write", e)),
        }
    }

    /// The last step before a write's rename: refuses ([`LeaseError::LeaseLost`], naming
    /// the lock path) unless the fence still holds `token`.
    pub(crate) fn check(&self, token: u64) -> Result<(), LeaseError> {
        if MUTANT {
            return Ok(());
        }
        match self.read()? {
            Some(seen) if seen == token => Ok(()),
            _ => Err(self.lost()),
        }
    }

    /// The last checks before a write under `lease` (a record lease's, token `token`):
    /// this fence still holds the token, then the validity left on this process's clock
    /// ([`MountLease::validity_for_write`]) — in that order (docs/design.md, "Fencing the
    /// stores' writes").
    pub(crate) fn last_checks(&self, token: u64, lease: &MountLease) -> Result<(), LeaseError> {
        if MUTANT {
            return Ok(());
        }
        self.check(token)?;
        lease.validity_for_write()
    }

    /// The token the fence holds; `None` when there is no fence yet.
    fn read(&self) -> Result<Option<u64>, LeaseError> {
        let bytes = match read_regular(&self.path, 64) {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(None),
            Err(e) => return Err(self.io("read", e)),
        };
        let text = String::from_utf8_lossy(&bytes);
        match text.trim().parse() {
            Ok(token) => Ok(Some(token)),
            Err(_) => Err(self.io(
                "read",
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{}: not a fencing token ({:?}); once no writer runs, remove it (the next grant writes it again)",
                        self.path.display(),
                        text.trim()
                    ),
                ),
            )),
        }
    }

    fn lost(&self) -> LeaseError {
        LeaseError::LeaseLost {
            path: self.lock.clone(),
        }
    }

    fn io(&self, op: &'static str, source: io::Error) -> LeaseError {
        LeaseError::Io {
            op,
            path: self.path.clone(),
            source,
        }
    }
}
