//! The stores' one careful read of a small regular file by path: through its directory's
//! handle, never following a symlink at the name nor blocking on a FIFO, bounded in size.

use std::io;
use std::path::Path;

use leasehold::{Error as LeaseError, LockDir};

/// Reads the regular file at `path` through its directory's handle
/// ([`LockDir::open_read`]: the library's one careful open); `None` when it is missing.
pub(crate) fn read_regular(path: &Path, limit: u64) -> io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a file name this store uses (not valid UTF-8, or none)",
        )
    })?;
    let opened = LockDir::open(dir).and_then(|d| d.open_read(name));
    let file = match opened {
        Ok(Some((file, _))) => file,
        Ok(None) | Err(LeaseError::NotFound { .. }) => return Ok(None),
        Err(LeaseError::NotRegularFile { kind, .. }) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("is {kind}, not a regular file; refusing to read it"),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {} MiB; not a document of ours", limit >> 20),
        ));
    }
    Ok(Some(bytes))
}
