//! Windows implementation of the platform boundary: named kernel semaphores.
//!
//! Windows has no `flock` that survives the rules leasehold needs (a `LockFileEx` lock pins an
//! open handle on the lock file, which blocks directory removal and confuses indexers), so a
//! lease is a *named kernel object* whose existence is the lock: `CreateSemaphoreW` either
//! creates the object (we hold the lease) or opens one that already exists
//! (`ERROR_ALREADY_EXISTS`: someone else holds it, and we close our handle at once). The kernel
//! destroys a named object when its last handle closes — on `CloseHandle`, and on process
//! death, `TerminateProcess` included — so a crashed holder never blocks a successor.
//!
//! This is the only module of the crate that contains `unsafe` code: `windows-sys` exposes the
//! raw Win32 calls, and there is no safe wrapper crate (like `rustix` on POSIX) for named
//! semaphores. Each block states why it is sound.

use std::io;
use std::os::windows::ffi::OsStrExt;
use std::os::windows::io::{FromRawHandle, OwnedHandle};

use windows_sys::Win32::Foundation::{ERROR_ACCESS_DENIED, ERROR_ALREADY_EXISTS, GetLastError};
use windows_sys::Win32::System::Threading::CreateSemaphoreW;

/// Outcome of trying to create a lease's named object.
#[derive(Debug)]
pub(crate) enum Created {
    /// We created the object: the lease is ours while this handle stays open.
    Held(OwnedHandle),
    /// The object already exists: somebody holds the lease.
    Exists,
}

/// Creates the named semaphore `name` (for example `Local\leasehold-<hex>`), or reports that
/// it already exists.
///
/// The handle is not inheritable (null security attributes), so a lease is never leaked into
/// child processes. When the object exists, the handle `CreateSemaphoreW` opened to it is
/// closed before returning: keeping it would keep the holder's object alive after the holder
/// released it. `ERROR_ACCESS_DENIED` also means the object exists (created by a holder whose
/// security descriptor does not let us open it), so it is contention too.
pub(crate) fn create_named(name: &str) -> io::Result<Created> {
    let wide: Vec<u16> = std::ffi::OsStr::new(name)
        .encode_wide()
        .chain(std::iter::once(0))
        .collect();
    if wide[..wide.len() - 1].contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "object name contains NUL",
        ));
    }
    // SAFETY: `wide` is a NUL-terminated UTF-16 string that outlives the call; a null
    // security-attributes pointer is documented as "default descriptor, not inheritable";
    // the counts satisfy 0 <= initial <= maximum, maximum > 0.
    let raw = unsafe { CreateSemaphoreW(std::ptr::null(), 0, 1, wide.as_ptr()) };
    // SAFETY: GetLastError only reads this thread's last-error value, set by the call above.
    let last = unsafe { GetLastError() };
    if raw.is_null() {
        if last == ERROR_ACCESS_DENIED {
            return Ok(Created::Exists);
        }
        return Err(io::Error::from_raw_os_error(last as i32));
    }
    // SAFETY: `raw` is a valid, non-null handle that CreateSemaphoreW just returned and that
    // nothing else owns; OwnedHandle closes it exactly once on drop.
    let handle = unsafe { OwnedHandle::from_raw_handle(raw) };
    if last == ERROR_ALREADY_EXISTS {
        drop(handle); // release our reference to the holder's object at once
        return Ok(Created::Exists);
    }
    Ok(Created::Held(handle))
}
