//! A throwaway single-node etcd for tests: the real server (Debian's `etcd-server`), on
//! loopback with free ports and a temporary data directory, stopped and removed on drop.
//!
//! Shared by the library, store and CLI test suites (`use testkit::etcd as support;`).
//! Readiness is a handshake: the server's `/health` endpoint is asked until it answers
//! healthy, within a deadline — and, where `/proc` tells, the socket listening on the port
//! asked must be this server's own.
//!
//! Ports: etcd 3.4 cannot be told to bind port 0, so a free port is found by binding one
//! and letting it go, and another test's server (on this machine: other suites, other
//! checkouts) can take it before this etcd binds it. Then this etcd exits at start ("address
//! already in use") and is started again on fresh ports; and since a `/health` answered on
//! the port could be the other server's (two tests once shared one server and its keys), a
//! server is ready only once its own process listens there.
//!
//! [`EtcdServer::start_tls`] serves the client URL over TLS instead (`https://`), with a
//! throwaway CA and server certificate made by the test (rcgen): the CA's PEM file is what a
//! client trusts through `SSL_CERT_FILE`. `/health` is then asked on a plain-HTTP metrics
//! URL, so readiness needs no TLS client in the helper.

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
    /// The client URL, `http://127.0.0.1:PORT` (`https://` when started with TLS).
    pub endpoint: String,
    tls: Option<Tls>,
}

/// The files of a TLS etcd (in its temporary directory) and its plain-HTTP metrics port.
struct Tls {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    metrics_port: u16,
}

/// Writes a fresh CA (`ca.pem`) and a server certificate signed by it for `names` (IP
/// addresses or DNS names, as subject alternative names) with its key into `dir`. (TLS
/// helpers exist where TLS is built: see leasehold's Cargo.toml.)
#[cfg(not(leasehold_etcd_without_tls))]
fn make_certificates(dir: &Path, names: &[&str]) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // A name of its own (the temporary directory's): two test CAs are two issuers.
    let label = dir
        .file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned());
    ca.distinguished_name
        .push(DnType::CommonName, format!("leasehold test CA {label}"));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate().expect("CA key");
    let ca_cert = ca.self_signed(&ca_key).expect("self-signed CA");
    let issuer = Issuer::new(ca, ca_key);
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut server = CertificateParams::new(names).expect("server certificate parameters");
    server
        .distinguished_name
        .push(DnType::CommonName, "leasehold test etcd");
    server.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_key = KeyPair::generate().expect("server key");
    let server_cert = server
        .signed_by(&server_key, &issuer)
        .expect("server certificate signed by the CA");
    let (ca, cert, key) = (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server-key.pem"),
    );
    std::fs::write(&ca, ca_cert.pem()).expect("write ca.pem");
    std::fs::write(&cert, server_cert.pem()).expect("write server.pem");
    std::fs::write(&key, server_key.serialize_pem()).expect("write server-key.pem");
    (ca, cert, key)
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

/// How many times a server is started on fresh ports when another took one first.
const PORT_TRIES: usize = 8;

/// Why etcd did not come up.
enum StartFailure {
    /// One of its ports was taken before it bound it (its log says so).
    PortTaken,
}

/// Whether process `pid` holds a socket listening on TCP `port` (any local address) — read
/// from the kernel: `/proc/net/tcp{,6}` for the listening sockets' inodes, then `pid`'s
/// descriptors. `true` where `/proc` does not tell (not Linux): health alone decides there.
fn listens(pid: u32, port: u16) -> bool {
    let tables: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|t| std::fs::read_to_string(t).ok())
        .collect();
    if tables.is_empty() {
        return true;
    }
    let suffix = format!(":{port:04X}");
    // Columns: sl local_address rem_address st ... inode (the tenth); 0A is LISTEN.
    let sockets: Vec<String> = tables
        .iter()
        .flat_map(|t| t.lines().skip(1))
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let listening = f.get(1)?.ends_with(&suffix) && *f.get(3)? == "0A";
            let inode = f.get(9)?;
            listening.then(|| format!("socket:[{inode}]"))
        })
        .collect();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|l| sockets.iter().any(|s| l.as_os_str() == s.as_str()))
    })
}

impl EtcdServer {
    /// Starts etcd and waits until it is healthy; `None` (after a SKIP line) when etcd is not
    /// installed.
    pub fn start(test: &str) -> Option<EtcdServer> {
        Self::start_with(test, |_| None)
    }

    /// Starts etcd serving its client URL `https://127.0.0.1:PORT` with a certificate for
    /// `names` (say `["127.0.0.1", "localhost"]`) signed by a throwaway CA — see
    /// [`ca_file`](Self::ca_file) — and waits until it is healthy; `None` (after a SKIP line)
    /// when etcd is not installed.
    #[cfg(not(leasehold_etcd_without_tls))]
    pub fn start_tls(test: &str, names: &[&str]) -> Option<EtcdServer> {
        Self::start_with(test, |dir| {
            let (ca, cert, key) = make_certificates(dir, names);
            Some(Tls {
                ca,
                cert,
                key,
                metrics_port: free_port(),
            })
        })
    }

    /// Starts etcd with the TLS files `tls` writes into its directory (`None`: plain).
    fn start_with(test: &str, tls: impl FnOnce(&Path) -> Option<Tls>) -> Option<EtcdServer> {
        if !available(test) {
            return None;
        }
        Some(Self::start_on(tls, None))
    }

    /// Starts a plain etcd whose first try is on `client_port` — a port another server
    /// already has, to show that a taken port is never mistaken for this server's.
    pub fn start_colliding(test: &str, client_port: u16) -> Option<EtcdServer> {
        if !available(test) {
            return None;
        }
        Some(Self::start_on(|_| None, Some(client_port)))
    }

    /// Starts etcd on fresh ports (the first try's client port `first`, if given), again on
    /// others while one was taken before etcd bound it.
    fn start_on(tls: impl FnOnce(&Path) -> Option<Tls>, first: Option<u16>) -> EtcdServer {
        let dir = tempfile::tempdir().expect("temporary directory");
        let tls = tls(dir.path());
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut server = EtcdServer {
            child: None,
            dir,
            client_port: 0,
            peer_port: 0,
            endpoint: String::new(),
            tls,
        };
        for attempt in 0..PORT_TRIES {
            server.client_port = match (attempt, first) {
                (0, Some(port)) => port,
                _ => free_port(),
            };
            server.peer_port = free_port();
            if let Some(tls) = &mut server.tls
                && attempt > 0
            {
                tls.metrics_port = free_port();
            }
            server.endpoint = format!("{scheme}://127.0.0.1:{}", server.client_port);
            match server.spawn() {
                Ok(()) => return server,
                // A fresh start: nothing of the failed one's log or data is left.
                Err(StartFailure::PortTaken) => {
                    let _ = std::fs::remove_file(server.dir.path().join("etcd.log"));
                    let _ = std::fs::remove_dir_all(server.dir.path().join("data"));
                }
            }
        }
        panic!("etcd found one of its ports taken {PORT_TRIES} times in a row");
    }

    /// The PEM file of the CA that signed a TLS server's certificate (what `SSL_CERT_FILE`
    /// names to trust it); `None` for a plain server.
    pub fn ca_file(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.ca.as_path())
    }

    /// Starts etcd on this server's data directory and ports and waits until it is
    /// healthy; `Err` when a port was taken first (etcd exited saying so).
    fn spawn(&mut self) -> Result<(), StartFailure> {
        let data = self.dir.path().join("data");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .expect("etcd log file");
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut etcd = Command::new("etcd");
        if let Some(tls) = &self.tls {
            etcd.arg(format!("--cert-file={}", tls.cert.display()))
                .arg(format!("--key-file={}", tls.key.display()))
                .arg(format!(
                    "--listen-metrics-urls=http://127.0.0.1:{}",
                    tls.metrics_port
                ));
        }
        let child = etcd
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
        self.wait_healthy()
    }

    /// Asks `/health` until it answers healthy and this server's own process listens on
    /// the port asked (a readiness handshake, bounded by 30 s): another server's answer on
    /// a port taken before this one bound it is not this server's health.
    fn wait_healthy(&mut self) -> Result<(), StartFailure> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                let log = self.log();
                if log.contains("address already in use") {
                    return Err(StartFailure::PortTaken);
                }
                panic!("etcd exited at start ({status}); log: {log}");
            }
            let ours = |port| self.child.as_ref().is_some_and(|c| listens(c.id(), port));
            if self.healthy() && ours(self.client_port) && ours(self.http_port()) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("etcd not healthy within 30 s; log: {}", self.log());
    }

    /// The port `/health` and `/metrics` are asked on: the client port, or a TLS server's
    /// plain-HTTP metrics port.
    fn http_port(&self) -> u16 {
        self.tls
            .as_ref()
            .map_or(self.client_port, |t| t.metrics_port)
    }

    fn healthy(&self) -> bool {
        self.http_get("/health")
            .is_some_and(|answer| answer.contains("\"health\":\"true\""))
    }

    /// GETs `path` in plain HTTP (a TLS server answers /health and /metrics on its metrics
    /// URL); `None` when etcd does not answer.
    fn http_get(&self, path: &str) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.http_port())).ok()?;
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
            .ok()?;
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        Some(answer)
    }

    /// The current value of etcd's Prometheus metric `name` (one without labels, such as
    /// `etcd_debugging_mvcc_watcher_total`): what the server itself counts.
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.http_get("/metrics").expect("etcd answers /metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or_else(|| panic!("etcd has no metric {name}"))
    }

    /// The etcd process (what [`pause`](Self::pause) stops).
    pub fn pid(&self) -> Pid {
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
        if self.spawn().is_err() {
            panic!(
                "etcd could not restart: another process took its port {} or {} while it was down; log: {}",
                self.client_port,
                self.peer_port,
                self.log()
            );
        }
    }

    /// SIGKILLs etcd, removes its data directory and starts it again on the same ports: a
    /// wiped etcd, revisions counting from 1 again (the same member name, peer URL and
    /// cluster token, so the same cluster ID).
    pub fn wipe(&mut self) {
        self.kill();
        std::fs::remove_dir_all(self.dir.path().join("data")).expect("remove etcd's data");
        if self.spawn().is_err() {
            panic!(
                "etcd could not start on an empty data directory; log: {}",
                self.log()
            );
        }
    }

    /// Saves a snapshot of etcd's data to `path` (`etcdctl snapshot save`); `false` without
    /// etcdctl.
    pub fn snapshot(&self, path: &Path) -> bool {
        let Some(out) = self.etcdctl(&["snapshot", "save", &path.to_string_lossy()]) else {
            return false;
        };
        assert!(out.status.success(), "snapshot save: {out:?}");
        true
    }

    /// SIGKILLs etcd, replaces its data with `snapshot` (`etcdctl snapshot restore`: what
    /// restoring a backup does, revisions after the snapshot lost) and starts it again on
    /// the same ports.
    pub fn restore(&mut self, snapshot: &Path) {
        self.kill();
        let data = self.dir.path().join("data");
        std::fs::remove_dir_all(&data).expect("remove etcd's data");
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let out = Command::new(etcdctl_path().expect("etcdctl"))
            .env("ETCDCTL_API", "3")
            .args(["snapshot", "restore"])
            .arg(snapshot)
            .arg("--name=test")
            .arg(format!("--data-dir={}", data.display()))
            .arg(format!("--initial-cluster=test={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .output()
            .expect("etcdctl snapshot restore");
        assert!(out.status.success(), "snapshot restore: {out:?}");
        if self.spawn().is_err() {
            panic!(
                "etcd could not start on its restored data; log: {}",
                self.log()
            );
        }
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
        let mut etcdctl = Command::new(etcdctl_path()?);
        if let Some(tls) = &self.tls {
            etcdctl.arg(format!("--cacert={}", tls.ca.display()));
        }
        etcdctl
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
