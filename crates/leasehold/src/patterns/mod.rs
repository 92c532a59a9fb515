//! Patterns built on the [`Lease`](crate::Lease) primitive: durable files, a store-wide
//! single-writer authority, per-key operation leases and an append-only log.

pub mod append;
pub mod authority;
pub mod durable;
pub mod keyed;

/// Runs a blocking step (a durable write, a drain, a local open) on tokio's blocking pool and
/// waits for it without blocking the executor (feature `tokio`).
///
/// The step runs to completion even if the returned future is dropped: a write that started
/// is never cut off half-way. A panic in the step is resumed in the caller. If the runtime is
/// shutting down and never ran the step, the future never completes (it is about to be
/// dropped with the runtime).
///
/// On WASI (`wasm32-wasip1`, one thread, where tokio's blocking pool cannot start a thread)
/// the step runs inline on the executor thread: there is no other thread to run it on.
#[cfg(feature = "tokio")]
pub async fn offload<T, F>(step: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    #[cfg(target_os = "wasi")]
    return step();
    #[cfg(not(target_os = "wasi"))]
    match tokio::task::spawn_blocking(step).await {
        Ok(out) => out,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => std::future::pending().await,
        },
    }
}
