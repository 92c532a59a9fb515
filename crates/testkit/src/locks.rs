//! Looking at lock states from outside (Linux `/proc/locks`), and waiting for one by looking,
//! never by sleeping for a set time.

use std::path::Path;
use std::time::{Duration, Instant};

/// `/proc/locks` in one `read` (empty where it cannot be read): one consistent snapshot.
/// The kernel walks the lock list afresh for every `read` call, so reading it in chunks, as
/// `read_to_string` does, can skip an entry while other processes lock and unlock — a test
/// then sees a lease it holds missing. A buffer that came back full is tried again twice as
/// large (the library reads it the same way).
pub fn proc_locks() -> String {
    use std::io::Read;
    let mut size = 1 << 16;
    loop {
        let mut buf = vec![0u8; size];
        let Ok(n) = std::fs::File::open("/proc/locks").and_then(|mut f| f.read(&mut buf)) else {
            return String::new();
        };
        if n < size || size >= 1 << 26 {
            buf.truncate(n);
            return String::from_utf8_lossy(&buf).into_owned();
        }
        size *= 2;
    }
}

/// Whether process `pid` is blocked in the kernel's lock queue for `path`'s inode (a `->`
/// line of `/proc/locks`; Linux only, `false` elsewhere).
///
/// # Panics
///
/// When `path` cannot be looked at.
pub fn blocked_on(pid: u32, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(path).expect("stat the lock file").ino();
    proc_locks().lines().any(|l| {
        l.contains("->")
            && l.split_whitespace().nth(5) == Some(&pid.to_string())
            && l.contains(&format!(":{ino} "))
    })
}

/// Whether process `pid` holds a `flock` lock on `path`'s inode (a `FLOCK` line of
/// `/proc/locks` that is no `->` waiter; Linux only, `false` elsewhere). POSIX record locks
/// (the library's waiting marks) do not count.
///
/// # Panics
///
/// When `path` cannot be looked at.
pub fn holds(pid: u32, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(path).expect("stat the lock file").ino();
    proc_locks().lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
        f.get(1) == Some(&"FLOCK")
            && f.get(4) == Some(&pid.to_string().as_str())
            && f.get(5)
                .is_some_and(|dev_ino| dev_ino.ends_with(&format!(":{ino}")))
    })
}

/// Waits until `cond` holds, looking again at once (the test's handshake with a state it
/// cannot be told of by a pipe).
///
/// # Panics
///
/// When `cond` still does not hold after 20 s: `what` names what was waited for.
pub fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting until {what}");
        std::thread::yield_now();
    }
}
