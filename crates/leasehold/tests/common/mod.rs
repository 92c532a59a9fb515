//! Helpers shared by the library's integration tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{PoisonError, RwLock, RwLockReadGuard};

/// A spawned child shares this process's descriptors — and so the locks on them — from fork
/// until exec (close-on-exec acts at exec). Tests that check lock states right after a release
/// hold [`quiet`] so that no process is spawned meanwhile; [`FlockHolder::hold`] spawns only
/// while holding the write side.
static SPAWNS: RwLock<()> = RwLock::new(());

/// Keeps this test binary from spawning processes while the guard lives (see [`SPAWNS`]).
pub fn quiet() -> RwLockReadGuard<'static, ()> {
    SPAWNS.read().unwrap_or_else(PoisonError::into_inner)
}

/// A real holder process: util-linux `flock` holding the same kind of lock the library takes,
/// in its own process group. Returns once the child has printed that it holds the lock.
pub struct FlockHolder(Child);

impl FlockHolder {
    /// Creates `lock` if missing and holds it from another process.
    pub fn hold(lock: &Path) -> FlockHolder {
        if !lock.exists() {
            std::fs::File::create(lock).unwrap();
        }
        let mut child = {
            let _spawning = SPAWNS.write().unwrap_or_else(PoisonError::into_inner);
            Command::new("flock")
                .arg(lock)
                .args(["-c", "echo locked; exec sleep 600"])
                .stdout(Stdio::piped())
                .process_group(0)
                .spawn()
                .expect("util-linux flock")
        };
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "locked");
        FlockHolder(child)
    }

    /// SIGKILLs the holder's whole process group and reaps it: a crash, not a release.
    pub fn kill(mut self) {
        self.kill_group();
    }

    fn kill_group(&mut self) {
        let pgid = rustix::process::Pid::from_raw(self.0.id() as i32).unwrap();
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        let _ = self.0.wait();
    }
}

impl Drop for FlockHolder {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            self.kill_group();
        }
    }
}

/// A task that ticks every millisecond for as long as it lives: if it keeps ticking while
/// another task waits, no executor thread was blocked by that wait.
pub struct Canary {
    ticks: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Canary {
    /// Starts ticking on the current runtime.
    pub fn start() -> Canary {
        let ticks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let t = ticks.clone();
        let task = tokio::spawn(async move {
            loop {
                t.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        });
        Canary { ticks, task }
    }

    /// Ticks so far.
    pub fn ticks(&self) -> usize {
        self.ticks.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        self.task.abort();
    }
}
