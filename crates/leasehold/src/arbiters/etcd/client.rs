//! A small etcd v3 client of our own: the six RPCs the arbiter uses (`KV.Range`, `KV.Txn`,
//! `Lease.LeaseGrant`, `Lease.LeaseRevoke`, `Lease.LeaseKeepAlive`, `Watch.Watch`) over a
//! `tonic` channel, with the hand-declared messages of [`super::proto`] and `tonic-prost`'s
//! codec. No build script and no generated code, so the `etcd` feature builds with only a
//! Rust toolchain (a generated client needs `protoc` and etcd's `.proto` files at build time).
//!
//! Every call answers a [`tonic::Status`]: etcd's own refusals, and transport failures with
//! their cause kept as the status's [`source`](std::error::Error::source) (what
//! [`super::connect_failure`] reads to tell a TLS failure from a silent endpoint).
//!
//! Each endpoint has its own lazily connected HTTP/2 channel. A request goes to the endpoint
//! that answered last; when it cannot even connect there (refused, unreachable, no answer
//! within the connect timeout: nothing was sent), it goes to the next one, so a cluster
//! member that is down costs one failed connection, not a failed request. (tonic's balancer,
//! which spreads requests over the members, failed about every other request when one member
//! was down: each went to the dead member once, with its `connection refused`.) The
//! channels must be created inside the runtime they will run on.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::uri::PathAndQuery;
use std::future::Future;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status, Streaming};
use tonic_prost::ProstCodec;

use super::proto::{
    LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse,
    LeaseRevokeRequest, LeaseRevokeResponse, RangeRequest, RangeResponse, TxnRequest, TxnResponse,
    WatchCreateRequest, WatchRequest, WatchResponse, watch_request,
};

/// The gRPC paths: `/PACKAGE.SERVICE/METHOD` as in `rpc.proto` (package `etcdserverpb`).
const RANGE: &str = "/etcdserverpb.KV/Range";
const TXN: &str = "/etcdserverpb.KV/Txn";
const LEASE_GRANT: &str = "/etcdserverpb.Lease/LeaseGrant";
const LEASE_REVOKE: &str = "/etcdserverpb.Lease/LeaseRevoke";
const LEASE_KEEP_ALIVE: &str = "/etcdserverpb.Lease/LeaseKeepAlive";
const WATCH: &str = "/etcdserverpb.Watch/Watch";

/// The longest endpoint list accepted (the balancer's queue is sized to the list).
pub(super) const MAX_ENDPOINTS: usize = 64;

/// How the connection is made: the same for every endpoint of a list.
pub(super) struct Options {
    /// How long connecting to all the endpoints in turn may take (each gets its share, at
    /// least [`MIN_CONNECT`]), TCP and TLS together.
    pub connect_timeout: Duration,
    /// HTTP/2 pings every this often, also while idle, so that a dead peer is noticed
    /// within `keep_alive + keep_alive_timeout` even between requests.
    pub keep_alive: Duration,
    /// How long a ping may go unanswered before the connection counts as dead.
    pub keep_alive_timeout: Duration,
    /// TLS for `https://` endpoints (`None`: plain text).
    #[cfg(not(leasehold_etcd_without_tls))]
    pub tls: Option<tonic::transport::ClientTlsConfig>,
}

/// The shortest connect timeout an endpoint gets, however long the list.
const MIN_CONNECT: Duration = Duration::from_millis(500);

/// A connection to an etcd cluster; cloning shares it (every clone multiplexes over the same
/// HTTP/2 connections).
#[derive(Clone)]
pub(super) struct Client {
    /// One channel per endpoint, in the order given.
    members: Arc<[tonic::client::Grpc<Channel>]>,
    /// The member that answered last: where the next request goes first.
    current: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

/// A bidirectional stream (keep-alive, watch): requests go out through `send`, answers
/// come in through `message`. Dropping it ends the stream (etcd then drops its watches).
pub(super) struct Duplex<Q, R> {
    requests: mpsc::Sender<Q>,
    answers: Streaming<R>,
}

impl<Q, R> Duplex<Q, R> {
    /// Queues one more request on the stream.
    pub async fn send(&self, request: Q) -> Result<(), Status> {
        self.requests
            .send(request)
            .await
            .map_err(|_| Status::unavailable("the stream to etcd was closed"))
    }

    /// The next answer; `None` when etcd ended the stream.
    pub async fn message(&mut self) -> Result<Option<R>, Status> {
        self.answers.message().await
    }
}

impl Client {
    /// A client for `endpoints` (URLs with their scheme, all `https://` when `options.tls` is
    /// set, at most [`MAX_ENDPOINTS`]). Connects lazily: the first request connects, and
    /// fails if no endpoint can be reached. Must run inside the client's runtime.
    ///
    /// # Errors
    ///
    /// A URL that does not parse, or a TLS configuration tonic refuses, as a sentence.
    pub fn new(endpoints: &[String], options: Options) -> Result<Client, String> {
        if endpoints.len() > MAX_ENDPOINTS {
            return Err(format!(
                "{} endpoints given; at most {MAX_ENDPOINTS} are accepted",
                endpoints.len()
            ));
        }
        let share = u32::try_from(endpoints.len().max(1)).unwrap_or(u32::MAX);
        let connect_timeout = (options.connect_timeout / share).max(MIN_CONNECT);
        let mut members = Vec::with_capacity(endpoints.len());
        for url in endpoints {
            let endpoint = Endpoint::from_shared(url.clone())
                .map_err(|e| format!("{url:?} is not a usable URL: {e}"))?
                .connect_timeout(connect_timeout)
                .http2_keep_alive_interval(options.keep_alive)
                .keep_alive_timeout(options.keep_alive_timeout)
                .keep_alive_while_idle(true)
                .tcp_nodelay(true);
            #[cfg(not(leasehold_etcd_without_tls))]
            let endpoint = match &options.tls {
                Some(tls) => endpoint
                    .tls_config(tls.clone())
                    .map_err(|e| format!("{url:?}: TLS: {e}"))?,
                None => endpoint,
            };
            members.push(tonic::client::Grpc::new(endpoint.connect_lazy()));
        }
        if members.is_empty() {
            return Err("no endpoint given".into());
        }
        Ok(Client {
            members: members.into(),
            current: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Runs `call` on the member that answered last, and on the next ones in turn while a
    /// member cannot be connected to (see [`never_sent`]); the member that answers becomes
    /// the first for the next request. Any other failure is the answer: the request may
    /// have reached etcd, and sending it twice is the caller's decision.
    async fn on_a_member<T, F>(
        &self,
        mut call: impl FnMut(tonic::client::Grpc<Channel>) -> F,
    ) -> Result<T, Status>
    where
        F: Future<Output = Result<T, Status>>,
    {
        let n = self.members.len();
        let first = self.current.load(Ordering::Relaxed) % n;
        let mut failed = None;
        for k in (0..n).map(|i| (first + i) % n) {
            match call(self.members[k].clone()).await {
                Err(e) if never_sent(&e) => failed = Some(e),
                answer => {
                    if answer.is_ok() {
                        self.current.store(k, Ordering::Relaxed);
                    }
                    return answer;
                }
            }
        }
        Err(failed.unwrap_or_else(|| Status::unavailable("no endpoint")))
    }

    /// One request, one answer.
    async fn unary<Q, R>(&self, path: &'static str, request: Q) -> Result<R, Status>
    where
        Q: prost::Message + Clone + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        self.on_a_member(|mut grpc| {
            let request = request.clone();
            async move {
                grpc.ready()
                    .await
                    .map_err(|e| Status::from_error(Box::new(e)))?;
                let answer = grpc
                    .unary(
                        Request::new(request),
                        PathAndQuery::from_static(path),
                        ProstCodec::<Q, R>::default(),
                    )
                    .await?;
                Ok(answer.into_inner())
            }
        })
        .await
    }

    /// Opens a bidirectional stream whose first request is `first`.
    ///
    /// The first request is queued *before* the call is awaited: the call returns once etcd
    /// sent its response headers, and etcd sends them only with its first answer — to a
    /// request it must have received. Queued after, it would never be sent (found by the
    /// prototype of this client: a keep-alive or watch opened that way hangs).
    async fn duplex<Q, R>(&self, path: &'static str, first: Q) -> Result<Duplex<Q, R>, Status>
    where
        Q: prost::Message + Clone + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        self.on_a_member(|mut grpc| {
            let first = first.clone();
            async move {
                let (requests, queue) = mpsc::channel(4);
                requests
                    .try_send(first)
                    .map_err(|_| Status::internal("cannot queue the stream's first request"))?;
                grpc.ready()
                    .await
                    .map_err(|e| Status::from_error(Box::new(e)))?;
                let answers = grpc
                    .streaming(
                        Request::new(ReceiverStream::new(queue)),
                        PathAndQuery::from_static(path),
                        ProstCodec::<Q, R>::default(),
                    )
                    .await?
                    .into_inner();
                Ok(Duplex { requests, answers })
            }
        })
        .await
    }

    /// `KV.Range`: the keys a range request selects, read linearizably unless it asks for a
    /// serializable read.
    pub async fn range(&self, request: RangeRequest) -> Result<RangeResponse, Status> {
        self.unary(RANGE, request).await
    }

    /// `KV.Txn`: one atomic transaction.
    pub async fn txn(&self, request: TxnRequest) -> Result<TxnResponse, Status> {
        self.unary(TXN, request).await
    }

    /// `Lease.LeaseGrant`: a new lease of `ttl` seconds, its ID chosen by etcd.
    pub async fn lease_grant(&self, ttl: i64) -> Result<LeaseGrantResponse, Status> {
        self.unary(LEASE_GRANT, LeaseGrantRequest { ttl, id: 0 })
            .await
    }

    /// `Lease.LeaseRevoke`: ends lease `id` and deletes every key attached to it.
    pub async fn lease_revoke(&self, id: i64) -> Result<LeaseRevokeResponse, Status> {
        self.unary(LEASE_REVOKE, LeaseRevokeRequest { id }).await
    }

    /// `Lease.LeaseKeepAlive`: a stream on which each request for lease `id` renews it and
    /// is answered with its new TTL (≤ 0: the lease is gone). The first request is sent.
    pub async fn lease_keep_alive(
        &self,
        id: i64,
    ) -> Result<Duplex<LeaseKeepAliveRequest, LeaseKeepAliveResponse>, Status> {
        self.duplex(LEASE_KEEP_ALIVE, LeaseKeepAliveRequest { id })
            .await
    }

    /// `Watch.Watch`: a stream reporting the changes `create` selects; its first answer
    /// says the watch was created.
    pub async fn watch(
        &self,
        create: WatchCreateRequest,
    ) -> Result<Duplex<WatchRequest, WatchResponse>, Status> {
        let first = WatchRequest {
            request_union: Some(watch_request::RequestUnion::CreateRequest(create)),
        };
        self.duplex(WATCH, first).await
    }
}

/// Whether a call failed before anything was sent: the connection to the member could not
/// be made (hyper's connector says `tcp connect error` — refused, unreachable, timed out —
/// or `dns error`), so another member may be asked the same. The cause is read from the
/// status's chain of sources, where the transport keeps it.
fn never_sent(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(s) = source {
        let text = s.to_string();
        if text.starts_with("tcp connect error") || text.starts_with("dns error") {
            return true;
        }
        source = s.source();
    }
    false
}

/// The end of the range of keys that start with `prefix` (etcd's convention: the prefix
/// with its last byte below 0xff incremented and what follows dropped; `\0`, all keys,
/// when every byte is 0xff).
pub(super) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn the_end_of_a_prefix_range_is_the_next_key_after_every_key_with_that_prefix() {
        assert_eq!(prefix_end(b"a/b/"), b"a/b0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), b"\0");
        assert_eq!(prefix_end(b""), b"\0");
    }
}
