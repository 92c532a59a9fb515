//! Per-function micro-benchmarks of the uncontended paths (`cargo bench -p leasehold`), so a
//! regression shows up against the function that caused it. The cross-process figures (handoff,
//! takeover, cancellation, waiting CPU) live in `leasehold bench`, which needs real processes.
//!
//! Each library path is benchmarked next to its floor: the same system calls issued directly.
//! Keyed lease names (SHA-256 of the trimmed ID) are timed on their own.

// The floors are Linux system calls (criterion is a Linux-only dev-dependency).
#[cfg(target_os = "linux")]
mod posix {
    use std::hint::black_box;
    use std::path::Path;

    use criterion::Criterion;
    use leasehold::{Lease, LeaseOptions};
    use rustix::fs::{AtFlags, CWD, FlockOperation, Mode, OFlags};

    /// The system calls of `Lease::try_acquire` + drop, issued directly.
    fn cold_floor(path: &Path) {
        rustix::fs::statat(CWD, path, AtFlags::SYMLINK_NOFOLLOW).expect("stat");
        let fd = rustix::fs::openat(
            CWD,
            path,
            OFlags::RDONLY
                | OFlags::CREATE
                | OFlags::NOFOLLOW
                | OFlags::NONBLOCK
                | OFlags::CLOEXEC
                | OFlags::NOCTTY,
            Mode::from_raw_mode(0o600),
        )
        .expect("open");
        rustix::fs::fstat(&fd).expect("fstat");
        rustix::fs::fstatfs(&fd).expect("fstatfs");
        rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).expect("flock");
        rustix::fs::statat(CWD, path, AtFlags::SYMLINK_NOFOLLOW).expect("stat");
    }

    fn cold(c: &mut Criterion) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cold.lock");
        let mut g = c.benchmark_group("cold_cycle");
        g.bench_function("lease_try_acquire_drop", |b| {
            b.iter(|| drop(black_box(Lease::try_acquire(&path).expect("lease"))))
        });
        g.bench_function("floor_same_syscalls", |b| b.iter(|| cold_floor(&path)));
        g.finish();
    }

    fn warm(c: &mut Criterion) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("warm.lock");
        let mut handle = LeaseOptions::new().open_handle(&path).expect("handle");
        let fd = rustix::fs::openat(CWD, &path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
            .expect("open");
        let mut g = c.benchmark_group("warm_reacquire");
        g.bench_function("handle_try_lock_release", |b| {
            b.iter(|| handle.try_lock().expect("lock").release())
        });
        g.bench_function("floor_flock_fstatat_unlock", |b| {
            b.iter(|| {
                rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).expect("flock");
                rustix::fs::statat(CWD, &path, AtFlags::SYMLINK_NOFOLLOW).expect("stat");
                rustix::fs::flock(&fd, FlockOperation::Unlock).expect("unlock");
            })
        });
        g.finish();
    }

    fn verify(c: &mut Criterion) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("verify.lock");
        let lease = Lease::try_acquire(&path).expect("lease");
        let mut g = c.benchmark_group("verify");
        g.bench_function("lease_verify", |b| {
            b.iter(|| lease.verify().expect("verify"))
        });
        g.bench_function("floor_fstatat", |b| {
            b.iter(|| rustix::fs::statat(CWD, &path, AtFlags::SYMLINK_NOFOLLOW).expect("stat"))
        });
        g.finish();
    }

    /// Keyed lock names: trim + SHA-256 + lowercase hex, per acquisition.
    fn keyed_name(c: &mut Criterion) {
        let mut g = c.benchmark_group("keyed");
        g.bench_function("lock_name", |b| {
            b.iter(|| leasehold::patterns::keyed::lock_name(black_box("  run-0042-candidate  ")))
        });
        g.finish();
    }

    criterion::criterion_group!(benches, cold, warm, verify, keyed_name);
}

#[cfg(target_os = "linux")]
criterion::criterion_main!(posix::benches);

#[cfg(not(target_os = "linux"))]
fn main() {}
