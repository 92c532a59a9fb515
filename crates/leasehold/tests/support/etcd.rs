//! A throwaway single-node etcd for tests: the real server (Debian's `etcd-server`), on
//! loopback with free ports and a temporary data directory, stopped and removed on drop.
//!
//! Shared by the library, store and CLI test suites (`#[path]`-included, so there is one
//! copy). Readiness is a handshake: the server's `/health` endpoint is asked until it answers
//! healthy, within a deadline.

#![allow(dead_code)] // each suite uses a different part

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};

/// A running (or paused) etcd.
pub struct EtcdServer {
    child: Option<Child>,
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    /// The client URL, `http://127.0.0.1:PORT`.
    pub endpoint: String,
}

/// Whether the `etcd` binary is installed; prints a SKIP line when it is not.
pub fn available(test: &str) -> bool {
    let found = Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        eprintln!("SKIP: {test}: etcd is not installed (Debian: apt-get install etcd-server)");
    }
    found
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free loopback port");
    l.local_addr().expect("local address").port()
}

impl EtcdServer {
    /// Starts etcd and waits until it is healthy; `None` (after a SKIP line) when etcd is not
    /// installed.
    pub fn start(test: &str) -> Option<EtcdServer> {
        if !available(test) {
            return None;
        }
        let dir = tempfile::tempdir().expect("temporary directory");
        let (client_port, peer_port) = (free_port(), free_port());
        let mut server = EtcdServer {
            child: None,
            dir,
            client_port,
            peer_port,
            endpoint: format!("http://127.0.0.1:{client_port}"),
        };
        server.spawn();
        Some(server)
    }

    fn spawn(&mut self) {
        let data = self.dir.path().join("data");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .expect("etcd log file");
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let child = Command::new("etcd")
            .arg("--name=test")
            .arg(format!("--data-dir={}", data.display()))
            .arg(format!("--listen-client-urls={}", self.endpoint))
            .arg(format!("--advertise-client-urls={}", self.endpoint))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=test={peer}"))
            .arg("--logger=zap")
            .arg("--log-level=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start etcd");
        self.child = Some(child);
        self.wait_healthy();
    }

    /// Asks `/health` until it answers healthy (a readiness handshake, bounded by 30 s).
    fn wait_healthy(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!("etcd exited at start ({status}); log: {}", self.log());
            }
            if self.healthy() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("etcd not healthy within 30 s; log: {}", self.log());
    }

    fn healthy(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.client_port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        if s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .is_err()
        {
            return false;
        }
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        answer.contains("\"health\":\"true\"")
    }

    fn pid(&self) -> Pid {
        let child = self.child.as_ref().expect("etcd is running");
        Pid::from_raw(child.id() as i32).expect("a positive pid")
    }

    /// SIGSTOP: etcd stops answering (and stops expiring leases) until [`resume`](Self::resume).
    pub fn pause(&self) {
        kill_process(self.pid(), Signal::STOP).expect("SIGSTOP etcd");
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self) {
        kill_process(self.pid(), Signal::CONT).expect("SIGCONT etcd");
    }

    /// SIGKILLs etcd and starts it again on the same data directory and ports.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Some(pid) = Pid::from_raw(c.id() as i32) {
                let _ = kill_process(pid, Signal::CONT);
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The data directory's parent (etcd's log is `etcd.log` in it).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// etcd's log so far, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    /// Runs `etcdctl` (API v3) against this server; `None` when etcdctl is not installed.
    pub fn etcdctl(&self, args: &[&str]) -> Option<std::process::Output> {
        Command::new(etcdctl_path()?)
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoint))
            .args(args)
            .output()
            .ok()
    }
}

impl EtcdServer {
    /// Waits (at most 10 s) until at least `n` keys exist under `prefix` — the handshake that
    /// a waiter has queued behind a holder (each waiter creates its key before it waits).
    /// Without etcdctl it waits half a second instead, which queues on any machine.
    pub fn queued(&self, prefix: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let Some(out) = self.etcdctl(&["get", "--prefix", "--keys-only", prefix]) else {
                std::thread::sleep(Duration::from_millis(500));
                return;
            };
            let text = String::from_utf8_lossy(&out.stdout);
            if text.lines().filter(|l| !l.is_empty()).count() >= n {
                return;
            }
            assert!(Instant::now() < deadline, "nothing queued under {prefix}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Where `etcdctl` is, if installed.
pub fn etcdctl_path() -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_string_lossy()
        .split(':')
        .map(|d| Path::new(d).join("etcdctl"))
        .find(|p| p.is_file())
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}
