//! Proof that an async wait blocked no executor thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A task that ticks every millisecond for as long as it lives: if it keeps ticking while
/// another task waits, no executor thread was blocked by that wait (on a current-thread
/// runtime a blocked thread would stop it entirely). Dropping the canary aborts the task.
pub struct Canary {
    ticks: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Canary {
    /// Starts ticking on the current runtime.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (as `tokio::spawn` does).
    pub fn start() -> Canary {
        let ticks = Arc::new(AtomicUsize::new(0));
        let t = ticks.clone();
        let task = tokio::spawn(async move {
            loop {
                t.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
        Canary { ticks, task }
    }

    /// Ticks so far.
    pub fn ticks(&self) -> usize {
        self.ticks.load(Ordering::SeqCst)
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        self.task.abort();
    }
}
