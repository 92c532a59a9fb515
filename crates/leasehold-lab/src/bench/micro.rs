//! In-process figures: the uncontended cost of a lease next to the same system calls issued
//! directly.
//!
//! Variants are timed in batches and interleaved (one batch of each per repeat), so that a
//! noisy neighbour on a shared machine hurts library and floor alike; each figure is the
//! median over repeats of the mean time per operation within a batch.

#[cfg(unix)]
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Instant;

use leasehold::{Budget, CancelToken, Lease, LeaseHandle, LeaseOptions};
#[cfg(unix)]
use rustix::fs::{AtFlags, CWD, FlockOperation, Mode, OFlags};

#[cfg(windows)]
use super::report::NotMeasured;
use super::report::{Plan, Row, Unit, median};
use crate::exit::Failure;

pub(super) type Op<'a> = Box<dyn FnMut() -> Result<(), Failure> + 'a>;

fn lease_err(e: leasehold::Error) -> Failure {
    Failure::of(&e)
}

#[cfg(unix)]
fn sys_err<'a>(what: &'static str, path: &'a Path) -> impl Fn(rustix::io::Errno) -> Failure + 'a {
    move |e| Failure::failed(format!("{what} {}: {e}", path.display()))
}

#[cfg(unix)]
/// The system calls of `Lease::try_acquire` + drop, issued directly (see `open` and
/// `try_lock` in the library's `lease/posix/mod.rs`, confirmed with strace): open
/// no-follow/non-blocking/close-on-exec/no-ctty creating 0600, one `fstat` for the identity,
/// kind and owner, `geteuid` for the owner check, `flock(LOCK_EX|LOCK_NB)`, `statat` to
/// verify the locked inode is the one at the path, `close`. (The look before the open and
/// the per-acquisition `fstatfs` are gone from the lease; this floor lost them with it.)
fn cold_floor(path: &Path) -> Result<(), Failure> {
    let fd: OwnedFd = rustix::fs::openat(
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
    .map_err(sys_err("open", path))?;
    rustix::fs::fstat(&fd).map_err(sys_err("fstat", path))?;
    std::hint::black_box(rustix::process::geteuid());
    rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive)
        .map_err(sys_err("flock", path))?;
    rustix::fs::statat(CWD, path, AtFlags::SYMLINK_NOFOLLOW).map_err(sys_err("stat", path))?;
    drop(fd);
    Ok(())
}

#[cfg(unix)]
/// What fs4 / std `File::try_lock` users pay per use: open (read-write, create), lock,
/// unlock, close — no look before opening, no verification, no network check.
fn fs4_cycle(path: &Path) -> Result<(), Failure> {
    let fd: OwnedFd = rustix::fs::openat(
        CWD,
        path,
        OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .map_err(sys_err("open", path))?;
    rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive)
        .map_err(sys_err("flock", path))?;
    rustix::fs::flock(&fd, FlockOperation::Unlock).map_err(sys_err("unlock", path))?;
    drop(fd);
    Ok(())
}

#[cfg(unix)]
/// The kernel floor of a blocking lock, uncontended: open (create), `flock(LOCK_EX)`, close;
/// with `verify`, also what a safe lease must check once it has the lock: `fstat` of the
/// descriptor and `stat` of the path name the same inode.
fn kernel_cycle(path: &Path, verify: bool) -> Result<(), Failure> {
    let fd: OwnedFd = rustix::fs::openat(
        CWD,
        path,
        OFlags::RDONLY | OFlags::CREATE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(sys_err("open", path))?;
    rustix::fs::flock(&fd, FlockOperation::LockExclusive).map_err(sys_err("flock", path))?;
    if verify {
        let held = rustix::fs::fstat(&fd).map_err(sys_err("fstat", path))?;
        let now = rustix::fs::statat(CWD, path, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(sys_err("stat", path))?;
        if (held.st_dev, held.st_ino) != (now.st_dev, now.st_ino) {
            return Err(Failure::failed(format!(
                "bench: {} was replaced",
                path.display()
            )));
        }
    }
    drop(fd);
    Ok(())
}

/// The median time per operation of each op, timed by [`measure`], as report rows.
struct Medians {
    m: Vec<f64>,
    samples: usize,
}

impl Medians {
    fn of(ops: &mut [Op<'_>], plan: &Plan) -> Result<Medians, Failure> {
        let t = measure(ops, plan)?;
        Ok(Medians {
            m: t.iter().map(|v| median(v)).collect(),
            samples: plan.repeats * plan.batch,
        })
    }

    /// The row of op `i`, read against op `floor.0` (described as `floor.1`), if any.
    fn row(
        &self,
        key: &'static str,
        name: &str,
        i: usize,
        floor: Option<(usize, &'static str)>,
    ) -> Row {
        Row {
            key,
            name: name.into(),
            unit: Unit::Nanos,
            median: self.m[i],
            dist: None,
            floor: floor.map(|(f, what)| (self.m[f], what)),
            floor_dist: None,
            target: None,
            samples: self.samples,
        }
    }
}

/// Times `plan.batch` calls of each op per repeat, interleaved; returns ns/op per repeat per op.
fn measure(ops: &mut [Op<'_>], plan: &Plan) -> Result<Vec<Vec<f64>>, Failure> {
    measure_batches(ops, plan.repeats, plan.batch)
}

/// Times `batch` calls of each op in each of `repeats` rounds, interleaved (one batch of
/// every op per round); returns ns/op per round, per op.
pub(super) fn measure_batches(
    ops: &mut [Op<'_>],
    repeats: usize,
    batch: usize,
) -> Result<Vec<Vec<f64>>, Failure> {
    let mut per_op = vec![Vec::with_capacity(repeats); ops.len()];
    // One untimed batch each: page cache, dentries and allocator warm.
    for op in ops.iter_mut() {
        for _ in 0..batch / 4 + 1 {
            op()?;
        }
    }
    let n = ops.len();
    for rep in 0..repeats {
        // Forward on even repeats, backward on odd ones: no variant always goes first.
        for k in 0..n {
            let i = if rep % 2 == 0 { k } else { n - 1 - k };
            let op = &mut ops[i];
            let t = Instant::now();
            for _ in 0..batch {
                op()?;
            }
            per_op[i].push(t.elapsed().as_nanos() as f64 / batch as f64);
        }
    }
    Ok(per_op)
}

/// What the unix ops of [`run`] work on: their lock files under one directory, the handles
/// and descriptors kept open between calls, the held lease `verify()` checks.
#[cfg(unix)]
struct Fixtures {
    cold: PathBuf,
    fs4: PathBuf,
    warm: PathBuf,
    held: PathBuf,
    floor: PathBuf,
    floor_verify: PathBuf,
    acquired: PathBuf,
    cancellable: PathBuf,
    token: CancelToken,
    warm_lock: LeaseHandle,
    handle: LeaseHandle,
    warm_fd: OwnedFd,
    lease: Lease,
}

#[cfg(unix)]
impl Fixtures {
    fn new(dir: &Path) -> Result<Fixtures, Failure> {
        let warm = dir.join("warm.lock");
        let held = dir.join("held.lock");
        let warm_lock = LeaseOptions::new()
            .open_handle(dir.join("warm-lock.lock"))
            .map_err(lease_err)?;
        let handle = LeaseOptions::new().open_handle(&warm).map_err(lease_err)?;
        let warm_fd: OwnedFd = rustix::fs::openat(
            CWD,
            &warm,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        )
        .map_err(sys_err("open", &warm))?;
        let lease = Lease::try_acquire(&held).map_err(lease_err)?;
        Ok(Fixtures {
            cold: dir.join("cold.lock"),
            fs4: dir.join("fs4.lock"),
            warm,
            held,
            floor: dir.join("floor.lock"),
            floor_verify: dir.join("floor-verify.lock"),
            acquired: dir.join("acquire.lock"),
            cancellable: dir.join("acquire-budget.lock"),
            token: CancelToken::new(),
            warm_lock,
            handle,
            warm_fd,
            lease,
        })
    }

    /// The ops, in the order [`run`] reads them and [`OP_NAMES`] names them.
    fn ops(&mut self) -> Vec<Op<'_>> {
        let Fixtures {
            cold,
            fs4,
            warm,
            held,
            floor,
            floor_verify,
            acquired,
            cancellable,
            token,
            warm_lock,
            handle,
            warm_fd,
            lease,
        } = self;
        let (cold, warm, held) = (&*cold, &*warm, &*held);
        vec![
            // 0, `cold`: the library's cold cycle: open, lock, verify the inode, close.
            Box::new(move || {
                drop(Lease::try_acquire(cold).map_err(lease_err)?);
                Ok(())
            }),
            // 1, `cold-floor`: its floor.
            Box::new(move || cold_floor(cold)),
            // 2, `fs4`: fs4-style cold cycle (no verification).
            Box::new(|| fs4_cycle(fs4)),
            // 3, `warm`: warm re-acquire on a kept-open handle: lock (which verifies) and release.
            Box::new(|| {
                handle.try_lock().map_err(lease_err)?.release();
                Ok(())
            }),
            // 4, `warm-floor`: its floor: flock + fstatat + unlock on a kept-open descriptor. The warm
            // handle's file is locked and unlocked by both, never at once (one runs after
            // the other).
            Box::new(move || {
                let fd = warm_fd.as_fd();
                rustix::fs::flock(fd, FlockOperation::NonBlockingLockExclusive)
                    .map_err(sys_err("flock", warm))?;
                rustix::fs::statat(CWD, warm, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(sys_err("stat", warm))?;
                rustix::fs::flock(fd, FlockOperation::Unlock).map_err(sys_err("unlock", warm))?;
                Ok(())
            }),
            // 5, `verify`: verify() on a held lease.
            Box::new(|| lease.verify().map_err(lease_err)),
            // 6, `verify-floor`: its floor: one fstatat.
            Box::new(move || {
                rustix::fs::statat(CWD, held, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(sys_err("stat", held))?;
                Ok(())
            }),
            // 7, `kernel-floor`: the kernel floor of a blocking lock: open, flock(LOCK_EX), close.
            Box::new(|| kernel_cycle(floor, false)),
            // 8, `floor-verify`: the same plus the inode verification (fstat + stat).
            Box::new(|| kernel_cycle(floor_verify, true)),
            // 9, `acquire`: cold Lease::acquire with an unlimited budget, then release.
            Box::new(|| {
                drop(Lease::acquire(&*acquired, &Budget::unlimited()).map_err(lease_err)?);
                Ok(())
            }),
            // 10, `acquire-budget`: the same with a deadline and a cancellation token (what timeouts get).
            Box::new(|| {
                let budget =
                    Budget::timeout(std::time::Duration::from_secs(600)).with_cancel(token.clone());
                drop(Lease::acquire(&*cancellable, &budget).map_err(lease_err)?);
                Ok(())
            }),
            // 11, `handle-lock`: warm LeaseHandle::lock (unlimited budget) and release.
            Box::new(|| {
                warm_lock
                    .lock(&Budget::unlimited())
                    .map_err(lease_err)?
                    .release();
                Ok(())
            }),
        ]
    }
}

/// The op names `leasehold worker bench micro --op NAME` accepts, in [`Fixtures::ops`]' order.
#[cfg(unix)]
const OP_NAMES: [&str; 12] = [
    "cold",
    "cold-floor",
    "fs4",
    "warm",
    "warm-floor",
    "verify",
    "verify-floor",
    "kernel-floor",
    "floor-verify",
    "acquire",
    "acquire-budget",
    "handle-lock",
];

/// `leasehold worker bench micro --op NAME --count N --lock DIR`: set up what [`run`] sets
/// up in DIR (an existing, empty directory), then call op NAME `count` times, untimed. For
/// counting what one op costs apart from the others and from its floor, by what does not
/// depend on the machine's load: `strace -f -c` (system calls) or `valgrind --tool=callgrind`
/// (instructions), run with two counts and read by difference (see BENCHMARKS.md).
#[cfg(unix)]
pub(super) fn repeat(dir: &Path, name: &str, count: usize) -> Result<(), Failure> {
    let Some(i) = OP_NAMES.iter().position(|n| *n == name) else {
        return Err(Failure::usage(format!(
            "unknown micro op '{name}' (one of: {})",
            OP_NAMES.join(", ")
        )));
    };
    let mut fixtures = Fixtures::new(dir)?;
    let mut ops = fixtures.ops();
    let Some(op) = ops.get_mut(i) else {
        return Err(Failure::failed(format!("bench: no micro op {name}")));
    };
    for _ in 0..count {
        op()?;
    }
    Ok(())
}

/// Cold cycle, fs4-style cycle, warm re-acquire and `verify()`, each with its floor.
#[cfg(unix)]
pub(super) fn run(dir: &Path, plan: &Plan) -> Result<Vec<Row>, Failure> {
    let mut fixtures = Fixtures::new(dir)?;
    let mut ops = fixtures.ops();
    let medians = Medians::of(&mut ops, plan)?;
    drop(ops);
    let row = |key, name: &str, i, floor| medians.row(key, name, i, floor);
    let mut cold_row = row(
        "cold_cycle",
        "cold cycle (try_acquire: open, lock, verify; drop)",
        0,
        Some((1, "same syscalls")),
    );
    let r = cold_row.ratio().unwrap_or(f64::INFINITY);
    // Its calls are the floor's; what it pays beyond is user space (BENCHMARKS.md,
    // "Cold and uncontended cycles").
    cold_row.target = Some(("≤ 1.15× floor".into(), r <= 1.15));
    let fs4_row = row(
        "fs4_cold_cycle",
        "fs4-style cold cycle (open, lock, unlock, close; no verify)",
        2,
        None,
    );
    let mut warm_row = row(
        "warm_reacquire",
        "warm re-acquire (LeaseHandle: lock + verify, unlock)",
        3,
        Some((4, "flock+fstatat+unlock")),
    );
    let r = warm_row.ratio().unwrap_or(f64::INFINITY);
    // It makes one call its floor does not, the fairness check's `fcntl(F_GETLK)` at release
    // (BENCHMARKS.md, "Warm handle").
    warm_row.target = Some((
        "≤ 1.3× floor, < fs4-style cycle".into(),
        r <= 1.3 && medians.m[3] < medians.m[2],
    ));
    let verify_row = row(
        "verify",
        "verify() on a held lease",
        5,
        Some((6, "one fstatat")),
    );
    let floor_row = row(
        "uncontended_floor",
        "uncontended kernel floor (open, flock(LOCK_EX), close)",
        7,
        None,
    );
    let verify_floor_row = row(
        "uncontended_floor_verify",
        "uncontended floor + inode verify (open, flock, fstat, stat, close)",
        8,
        Some((7, "kernel floor")),
    );
    let target = |mut r: Row, limit: f64, text: &str| {
        let ratio = r.ratio().unwrap_or(f64::INFINITY);
        r.target = Some((text.into(), ratio <= limit));
        r
    };
    // The cold acquisitions make floor + verify's calls and `geteuid`; the rest of what they
    // pay is user space (BENCHMARKS.md, "Cold and uncontended cycles").
    let acquire_row = target(
        row(
            "uncontended_acquire",
            "uncontended cold Lease::acquire (unlimited budget) + release",
            9,
            Some((8, "floor + verify")),
        ),
        1.15,
        "≤ 1.15× floor + verify",
    );
    let cancellable_row = target(
        row(
            "uncontended_acquire_cancellable",
            "uncontended cold Lease::acquire (deadline + CancelToken) + release",
            10,
            Some((8, "floor + verify")),
        ),
        1.15,
        "≤ 1.15× floor + verify",
    );
    // Four calls (`fcntl(F_GETLK)` among them) against the kernel floor's three
    // (BENCHMARKS.md, "Warm handle").
    let handle_row = target(
        row(
            "uncontended_handle_lock",
            "uncontended warm LeaseHandle::lock + release",
            11,
            Some((7, "kernel floor")),
        ),
        0.8,
        "≤ 0.8× kernel floor",
    );
    Ok(vec![
        cold_row,
        fs4_row,
        warm_row,
        verify_row,
        floor_row,
        verify_floor_row,
        acquire_row,
        cancellable_row,
        handle_row,
    ])
}

/// What of a Windows lease's cold cycle can be issued bare from here (see
/// `lease/windows.rs`, `open` and `try_lock`): look at the parent directory (the lease
/// creates missing parents), look at the path without following it, resolve the parent's
/// real path. The named semaphore's `CreateSemaphoreW` + `CloseHandle` are not: they need
/// `unsafe` Win32 calls, which the lab does not write, and the library exposes nothing for
/// benchmarks.
#[cfg(windows)]
fn windows_path_floor(path: &Path) -> Result<(), Failure> {
    let parent = path.parent().unwrap_or(Path::new("."));
    let fail = |what: &str, e: std::io::Error| {
        Failure::failed(format!("bench: {what} {}: {e}", path.display()))
    };
    std::fs::metadata(parent).map_err(|e| fail("stat", e))?;
    match std::fs::symlink_metadata(path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail("stat", e)),
    }
    std::fs::canonicalize(parent).map_err(|e| fail("canonicalize", e))?;
    Ok(())
}

/// The Windows figures of this module: cold cycle, warm re-acquire, `verify()` and the
/// uncontended acquisitions, each next to the named-semaphore calls they make, issued bare.
#[cfg(windows)]
pub(super) fn run(dir: &Path, plan: &Plan) -> Result<(Vec<Row>, Vec<NotMeasured>), Failure> {
    let cold: PathBuf = dir.join("cold.lock");
    let floor_path: PathBuf = dir.join("floor.lock");
    let warm: PathBuf = dir.join("warm.lock");
    let held: PathBuf = dir.join("held.lock");
    let acquired: PathBuf = dir.join("acquire.lock");
    let cancellable: PathBuf = dir.join("acquire-budget.lock");
    let token = CancelToken::new();
    let mut warm_lock: LeaseHandle = LeaseOptions::new()
        .open_handle(dir.join("warm-lock.lock"))
        .map_err(lease_err)?;
    let mut handle: LeaseHandle = LeaseOptions::new().open_handle(&warm).map_err(lease_err)?;
    let lease = Lease::try_acquire(&held).map_err(lease_err)?;
    let held_parent = dir.to_path_buf();

    let mut ops: Vec<Op<'_>> = vec![
        // 0: the library's cold cycle.
        Box::new(|| {
            drop(Lease::try_acquire(&cold).map_err(lease_err)?);
            Ok(())
        }),
        // 1: its path calls, bare (not the named object's).
        Box::new(|| windows_path_floor(&floor_path)),
        // 2: warm re-acquire on a handle: lock (which verifies) and release.
        Box::new(|| {
            handle.try_lock().map_err(lease_err)?.release();
            Ok(())
        }),
        // 3: verify() on a held lease.
        Box::new(|| lease.verify().map_err(lease_err)),
        // 4: its floor: the parent's real path, resolved once more.
        Box::new(|| {
            std::fs::canonicalize(&held_parent)
                .map(drop)
                .map_err(|e| Failure::failed(format!("bench: canonicalize: {e}")))
        }),
        // 5: cold Lease::acquire with an unlimited budget, then release.
        Box::new(|| {
            drop(Lease::acquire(&acquired, &Budget::unlimited()).map_err(lease_err)?);
            Ok(())
        }),
        // 6: the same with a deadline and a cancellation token.
        Box::new(|| {
            let budget =
                Budget::timeout(std::time::Duration::from_secs(600)).with_cancel(token.clone());
            drop(Lease::acquire(&cancellable, &budget).map_err(lease_err)?);
            Ok(())
        }),
        // 7: warm LeaseHandle::lock (unlimited budget) and release.
        Box::new(|| {
            warm_lock
                .lock(&Budget::unlimited())
                .map_err(lease_err)?
                .release();
            Ok(())
        }),
    ];
    let medians = Medians::of(&mut ops, plan)?;
    drop(ops);
    let row = |key, name: &str, i, floor| medians.row(key, name, i, floor);
    const PATHS: &str = "its path calls only: stat ×2, canonicalize";
    let rows = vec![
        row(
            "cold_cycle",
            "cold cycle (try_acquire: resolve, create object; drop)",
            0,
            Some((1, PATHS)),
        ),
        row(
            "warm_reacquire",
            "warm re-acquire (LeaseHandle: lock + verify, unlock)",
            2,
            None,
        ),
        row(
            "verify",
            "verify() on a held lease",
            3,
            Some((4, "one canonicalize")),
        ),
        row(
            "uncontended_acquire",
            "uncontended cold Lease::acquire (unlimited budget) + release",
            5,
            Some((1, PATHS)),
        ),
        row(
            "uncontended_acquire_cancellable",
            "uncontended cold Lease::acquire (deadline + CancelToken) + release",
            6,
            Some((1, PATHS)),
        ),
        row(
            "uncontended_handle_lock",
            "uncontended warm LeaseHandle::lock + release",
            7,
            None,
        ),
    ];
    let not = vec![
        NotMeasured::new(
            "uncontended_floor",
            "uncontended kernel floor (CreateSemaphoreW + CloseHandle)",
            "the named object's calls need unsafe Win32 calls, which the lab does not write, and the library exposes nothing for benchmarks; the rows above have their path calls as floor, or none",
        ),
        NotMeasured::new(
            "fs4_cold_cycle",
            "fs4-style cold cycle",
            "its LockFileEx floor would pin an open handle on a lock file, which the Windows lease never keeps (it has no lock file); std's File::try_lock also needs Rust 1.89 (MSRV 1.88)",
        ),
        NotMeasured::new(
            "uncontended_floor_verify",
            "uncontended floor + inode verify",
            "a named object has no inode to verify: the cold-cycle floor above includes the path resolution instead",
        ),
    ];
    Ok((rows, not))
}
