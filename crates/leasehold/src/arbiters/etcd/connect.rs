//! Connecting: the endpoint list (all TLS or all plain), one request that proves an
//! endpoint answers, the round trip measured for the keep-alive schedule, and what a
//! failure to connect is called.

use std::time::Duration;

use super::client::{self, Client};
use super::ctx::status_text;
use super::proto::RangeRequest;
use super::timing::CONNECT_TIMEOUT;
use crate::{Error, Result};

/// How connecting ended.
pub(super) enum Connecting {
    /// An endpoint answered a request: the client works; the slower of two more requests'
    /// round trips.
    Answered(Client, Duration),
    /// A URL cannot be used (it does not parse): nothing was contacted.
    Unusable(String),
    /// The request failed: refused, reset, or a failed TLS handshake.
    Failed(tonic::Status),
    /// No answer within [`CONNECT_TIMEOUT`].
    Silent,
}

impl Connecting {
    /// Makes the client (on the runtime, whose tasks its balancer uses) and proves with one
    /// real request that an endpoint answers: the channel itself connects lazily.
    pub(super) async fn attempt(list: &[String], options: client::Options) -> Connecting {
        let client = match Client::new(list, options) {
            Ok(c) => c,
            Err(reason) => return Connecting::Unusable(reason),
        };
        let probe = RangeRequest {
            key: vec![0],
            count_only: true,
            ..RangeRequest::default()
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, client.range(probe.clone())).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Connecting::Failed(e),
            Err(_) => return Connecting::Silent,
        }
        // The round trip, once connected (the first request paid for the connection): the
        // slower of two, which plans the keep-alives ([`keep_alive_period`]).
        let mut round_trip = Duration::ZERO;
        for _ in 0..2 {
            let sent = tokio::time::Instant::now();
            let answered = tokio::time::timeout(CONNECT_TIMEOUT, client.range(probe.clone()))
                .await
                .is_ok_and(|r| r.is_ok());
            if answered {
                round_trip = round_trip.max(sent.elapsed());
            }
        }
        Connecting::Answered(client, round_trip)
    }
}

/// Splits a comma-separated endpoint list and checks it is all `https://` or all plain: the
/// one place the choice between TLS and plain text is made. A URL's scheme is matched
/// case-insensitively and passed on in lower case; a URL without one is `http://`, as with
/// etcdctl.
pub(super) fn parse_endpoints(endpoints: &str) -> Result<Vec<String>> {
    let bad = |reason: &str| Error::BadEndpoints {
        endpoints: endpoints.to_string(),
        reason: reason.to_string(),
    };
    let list: Vec<String> = endpoints
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| match e.split_once("://") {
            Some((scheme, rest)) => format!("{}://{rest}", scheme.to_ascii_lowercase()),
            None => format!("http://{e}"),
        })
        .collect();
    if list.is_empty() {
        return Err(bad("no endpoint given"));
    }
    if let Some(odd) = list
        .iter()
        .find(|e| !e.starts_with("http://") && !e.starts_with("https://"))
    {
        return Err(bad(&format!(
            "{odd}: only http:// and https:// URLs are supported"
        )));
    }
    let https = list.iter().filter(|e| e.starts_with("https://")).count();
    if https != 0 && https != list.len() {
        return Err(bad(
            "mixes https:// and http:// endpoints, which would send some requests in the clear; use https:// for all of them",
        ));
    }
    Ok(list)
}

/// TLS for `https://` endpoints: rustls with ring, trusting the system's store, or instead
/// the certificates in SSL_CERT_FILE / SSL_CERT_DIR (rustls-native-certs, as OpenSSL). Without
/// roots of its own tonic's TLS would trust no root at all.
#[cfg(not(leasehold_etcd_without_tls))]
pub(super) fn with_tls(
    options: client::Options,
) -> std::result::Result<client::Options, &'static str> {
    let tls = tonic::transport::ClientTlsConfig::new()
        .with_native_roots()
        .timeout(CONNECT_TIMEOUT);
    Ok(client::Options {
        tls: Some(tls),
        ..options
    })
}

/// A build for linting only (`--cfg leasehold_etcd_without_tls`, see Cargo.toml) has no TLS.
#[cfg(leasehold_etcd_without_tls)]
pub(super) fn with_tls(_: client::Options) -> std::result::Result<client::Options, &'static str> {
    Err(
        "this leasehold was built without TLS (--cfg leasehold_etcd_without_tls); rebuild it without that flag",
    )
}

/// Why connecting failed, in words a user can act on. A failed TLS handshake (rustls says
/// why: an unknown issuer, a name the certificate does not cover, no root certificates at
/// all) is told apart from an endpoint that does not answer, and says what to do.
pub(super) fn connect_failure(e: &tonic::Status, tls: bool) -> String {
    // A status carries the transport's reason as its message ("invalid peer certificate:
    // UnknownIssuer") or in its chain of sources; its Display adds a Debug dump of the chain.
    let what = status_text(e);
    let mut chain = String::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        chain.push(' ');
        chain.push_str(&s.to_string());
        source = s.source();
    }
    // What to match on: the Display too, which for a status includes its source's Debug.
    let lower = format!("{e} {chain}").to_ascii_lowercase();
    if tls && lower.contains("no native certs") {
        return format!(
            "TLS: no trusted root certificates ({what}); install the system's CA certificates (Debian: ca-certificates), or set SSL_CERT_FILE to a PEM file holding the CA that signed etcd's certificate"
        );
    }
    if tls && lower.contains("not valid for name") {
        return format!(
            "TLS handshake failed: {what}; use a URL whose host the certificate names, or have etcd's certificate reissued for this host"
        );
    }
    if tls
        && (lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake"))
    {
        return format!(
            "TLS handshake failed: {what}; if etcd's certificate is signed by a private CA, set SSL_CERT_FILE to that CA's PEM file (or SSL_CERT_DIR to a directory of them)"
        );
    }
    if !tls && (lower.contains("broken pipe") || lower.contains("connection reset")) {
        return format!("unreachable: {what} (if this etcd serves TLS, its URLs are https://)");
    }
    format!("unreachable: {what}")
}
