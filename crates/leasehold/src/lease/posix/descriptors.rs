//! The lock files and gates this process opened, by descriptor number: what a child forked
//! without `exec` lets go of (`fork.rs`). Every open of a lock file or gate registers here.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::Mutex;

use crate::kind::FileId;

/// By descriptor number, the file it was opened on.
pub(super) type Opened = Option<HashMap<RawFd, FileId>>;

/// The lock files and gates the library opened: by descriptor number, the file it was.
pub(super) static OPENED: Mutex<Opened> = Mutex::new(None);

/// Records that the library opened `fd` on the lock file or gate `id` (see `fork.rs`).
pub(crate) fn register(fd: BorrowedFd<'_>, id: FileId) {
    crate::mutex::lock(&OPENED)
        .get_or_insert_with(HashMap::new)
        .insert(fd.as_raw_fd(), id);
}
