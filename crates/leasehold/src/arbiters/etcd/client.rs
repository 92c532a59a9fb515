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
//! The channel connects lazily and balances over the endpoints (tonic's power-of-two-choices
//! balancer, as etcd's own Go client spreads over its endpoints); it must be created inside
//! the runtime it will run on, which spawns its workers.

use std::time::Duration;

use http::uri::PathAndQuery;
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
    /// How long a connection attempt (TCP, then TLS) may take.
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

/// A connection to an etcd cluster; cloning shares it (every clone multiplexes over the same
/// HTTP/2 connections).
#[derive(Clone)]
pub(super) struct Client {
    grpc: tonic::client::Grpc<Channel>,
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
        let (channel, changes) = Channel::balance_channel(endpoints.len().max(1));
        for url in endpoints {
            let endpoint = Endpoint::from_shared(url.clone())
                .map_err(|e| format!("{url:?} is not a usable URL: {e}"))?
                .connect_timeout(options.connect_timeout)
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
            changes
                .try_send(tonic::transport::channel::Change::Insert(
                    url.clone(),
                    endpoint,
                ))
                .map_err(|e| format!("{url:?}: cannot add the endpoint: {e}"))?;
        }
        Ok(Client {
            grpc: tonic::client::Grpc::new(channel),
        })
    }

    /// One request, one answer.
    async fn unary<Q, R>(&self, path: &'static str, request: Q) -> Result<R, Status>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = self.grpc.clone();
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

    /// Opens a bidirectional stream whose first request is `first`.
    ///
    /// The first request is queued *before* the call is awaited: the call returns once etcd
    /// sent its response headers, and etcd sends them only with its first answer — to a
    /// request it must have received. Queued after, it would never be sent (found by the
    /// prototype of this client: a keep-alive or watch opened that way hangs).
    async fn duplex<Q, R>(&self, path: &'static str, first: Q) -> Result<Duplex<Q, R>, Status>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let (requests, queue) = mpsc::channel(4);
        requests
            .try_send(first)
            .map_err(|_| Status::internal("cannot queue the stream's first request"))?;
        let mut grpc = self.grpc.clone();
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
