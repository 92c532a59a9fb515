//! "Nothing holds this lock", asserted the way the build can tell.

use std::path::Path;

use leasehold::{Holders, Lease};

/// Asserts that nothing holds `path`. Where the OS reveals holders (Linux: `/proc/locks`)
/// `holders()` must answer [`Holders::Free`]; built with `--cfg leasehold_portable` (the
/// macOS/BSD code path, where `holders()` answers `Unknown`) a try to take the lease must
/// succeed instead (it is released again at once).
pub fn assert_free(path: &Path) {
    if cfg!(leasehold_portable) {
        drop(Lease::try_acquire(path).expect("free: a try takes the lease"));
    } else {
        assert_eq!(leasehold::holders(path).unwrap(), Holders::Free);
    }
}
