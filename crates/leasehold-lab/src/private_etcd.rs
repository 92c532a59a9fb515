//! A private single-node etcd on free loopback ports, for `bench --etcd-server` and
//! `torture --etcd-server`: started with its data in a directory of theirs, ready once it
//! answers a request, stopped when dropped.

use std::time::{Duration, Instant};

use leasehold::arbiters::etcd::EtcdArbiter;

use crate::exit::Failure;

/// A private single-node etcd on free loopback ports, stopped when dropped.
pub struct PrivateEtcd {
    child: std::process::Child,
    /// Its client URL.
    pub endpoint: String,
}

impl PrivateEtcd {
    /// The server's process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts etcd with its data under `dir` and waits until it answers.
    pub fn start(dir: &std::path::Path) -> Result<PrivateEtcd, Failure> {
        let port = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .map_err(|e| Failure::failed(format!("no free loopback port: {e}")))
        };
        let (client, peer) = (port()?, port()?);
        let endpoint = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(dir.join("etcd.log"))
            .map_err(|e| Failure::failed(format!("etcd log: {e}")))?;
        let log2 = log
            .try_clone()
            .map_err(|e| Failure::failed(format!("etcd log: {e}")))?;
        let child = std::process::Command::new("etcd")
            .arg("--name=leasehold")
            .arg(format!("--data-dir={}", dir.join("etcd-data").display()))
            .arg(format!("--listen-client-urls={endpoint}"))
            .arg(format!("--advertise-client-urls={endpoint}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=leasehold={peer_url}"))
            .arg("--logger=zap")
            .arg("--log-level=warn")
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| {
                Failure::failed(format!(
                    "cannot start etcd ({e}); install it (Debian: etcd-server) or pass --etcd ENDPOINTS"
                ))
            })?;
        let mut etcd = PrivateEtcd { child, endpoint };
        // Readiness handshake: connecting succeeds once etcd answers a request.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = etcd.child.try_wait() {
                return Err(Failure::failed(format!("etcd exited at start: {status}")));
            }
            match EtcdArbiter::connect(
                &etcd.endpoint,
                "leasehold/ready",
                leasehold::arbiters::etcd::MIN_TTL,
            ) {
                Ok(_) => return Ok(etcd),
                Err(e) if Instant::now() >= deadline => {
                    let _ = etcd.child.kill();
                    return Err(Failure::failed(format!("etcd never became ready: {e}")));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

impl Drop for PrivateEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
