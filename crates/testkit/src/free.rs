//! "Nothing holds this lock", asserted the way the build can tell, and whether it can tell.

use std::path::Path;
use std::sync::OnceLock;

use leasehold::{Holders, Lease};

/// Whether the library under test reveals who holds a lock (Linux: `/proc/locks`). `false`
/// on macOS and the BSDs, and on Linux in the portable build (`LEASEHOLD_PORTABLE=1`, which
/// runs the macOS/BSD code path: docs/platforms.md), where `holders()` answers
/// [`Holders::Unknown`] and contention messages name no pid. Asked of the library once, at
/// run time (a lease held on a fresh file, and `holders()` of it), so that no crate but
/// `leasehold` needs to know how it was built.
///
/// # Panics
///
/// When no temporary lock file can be made and leased.
pub fn reveals_holders() -> bool {
    static ANSWER: OnceLock<bool> = OnceLock::new();
    *ANSWER.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("probe.lock");
        let lease = Lease::try_acquire(&path).expect("a lease on a fresh file");
        let answer = matches!(leasehold::holders(&path), Ok(Holders::Held { .. }));
        drop(lease);
        answer
    })
}

/// Asserts that nothing holds `path`. Where the library reveals holders
/// ([`reveals_holders`]) `holders()` must answer [`Holders::Free`]; elsewhere a try to take
/// the lease must succeed instead (it is released again at once).
pub fn assert_free(path: &Path) {
    if reveals_holders() {
        assert_eq!(leasehold::holders(path).unwrap(), Holders::Free);
    } else {
        drop(Lease::try_acquire(path).expect("free: a try takes the lease"));
    }
}
