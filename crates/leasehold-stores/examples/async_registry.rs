//! An async service that takes the workspace registry's authority at start — waiting
//! asynchronously while another process holds it — serves a few mutations, and hands the
//! registry over on shutdown with an orderly async teardown.
//!
//! ```text
//! cargo run -p leasehold-stores --example async_registry --features tokio [HOME]
//! ```
//!
//! Without `HOME` it uses a fresh temporary home. In one process it runs two services on one
//! home: `first` takes the registry at once; `second` starts while `first` is serving and
//! waits for the authority — without blocking an executor thread: a heartbeat task keeps
//! ticking throughout — then takes over at `first`'s teardown and sees its last write. Give
//! the same `HOME` to two invocations at once to watch the same hand-over between processes.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold::Budget;
use leasehold_stores::registry::{Registry, RegistryError, RegistryPaths};

/// One service's life: take the registry (waiting up to a minute), grant `extra` to
/// `workspace`, then hand over. `started` is told once the authority is ours.
async fn service(
    name: &str,
    home: &Path,
    started: Option<tokio::sync::oneshot::Sender<()>>,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> Result<(), RegistryError> {
    let registry = Registry::new(RegistryPaths::in_home(home, None));
    println!("{name}: waiting for the registry authority");
    registry
        .acquire_async(&Budget::timeout(Duration::from_secs(60)))
        .await?;
    println!("{name}: active; registry holds {:?}", registry.scope());
    if let Some(started) = started {
        let _ = started.send(());
    }
    let workspace = home.join("workspace");
    let extra = home.join(format!("extra-{name}"));
    for dir in [&workspace, &extra] {
        std::fs::create_dir_all(dir).map_err(|e| RegistryError::InvalidRoot {
            path: dir.clone(),
            reason: e.to_string(),
        })?;
    }
    registry.add_async(&workspace, &extra).await?;
    println!(
        "{name}: granted {} -> {}",
        extra.display(),
        registry.grants(&workspace, &extra.join("notes.txt"))
    );
    // Serve until told to stop (a real service would await a shutdown signal here).
    let _ = stop.await;
    registry.teardown_async().await;
    println!("{name}: handed over");
    Ok(())
}

/// Runs the two services on `home`; returns the heartbeat's tick count.
async fn run(home: &Path) -> Result<usize, RegistryError> {
    let ticks = Arc::new(AtomicUsize::new(0));
    let heartbeat = {
        let ticks = ticks.clone();
        tokio::spawn(async move {
            loop {
                ticks.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let (stop_first, first_stop) = tokio::sync::oneshot::channel();
    let (stop_second, second_stop) = tokio::sync::oneshot::channel();
    let home_first: PathBuf = home.to_path_buf();
    let first =
        tokio::spawn(
            async move { service("first", &home_first, Some(started_tx), first_stop).await },
        );
    let _ = started.await;
    let home_second = home.to_path_buf();
    let second =
        tokio::spawn(async move { service("second", &home_second, None, second_stop).await });
    // Let the second service wait for a while, then shut the first down.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = stop_first.send(());
    first.await.expect("first service task")?;
    let _ = stop_second.send(());
    second.await.expect("second service task")?;
    heartbeat.abort();
    Ok(ticks.load(Ordering::SeqCst))
}

#[tokio::main]
async fn main() -> ExitCode {
    let temp;
    let home = match std::env::args_os().nth(1) {
        Some(home) => PathBuf::from(home),
        None => match tempfile::tempdir() {
            Ok(dir) => {
                temp = dir;
                temp.path().to_path_buf()
            }
            Err(e) => {
                eprintln!("async_registry: cannot create a temporary home: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    match run(&home).await {
        Ok(ticks) => {
            println!("heartbeat ticked {ticks} times: no executor thread was blocked");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("async_registry: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    /// The example runs to the end on a fresh home: the second service takes over at the
    /// first's teardown, and the heartbeat kept ticking meanwhile.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_and_hands_over() {
        let home = tempfile::tempdir().expect("temporary home");
        let ticks = super::run(home.path()).await.expect("example");
        assert!(ticks > 0);
    }
}
