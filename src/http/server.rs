//! The local HTTP server: serves an axum Router over HTTP/1.1 with header, idle, body and write timeouts, a cap on
//! open connections, a refusal of requests giving both Transfer-Encoding and Content-Length, and a shutdown that
//! drops the connections still open at its deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::http::body_pace::{BodyPace, PacedBody};
use crate::http::both_lengths::{BothLengths, FollowedReads, RefuseBothLengths};
use crate::http::refusals::JsonRefusals;
use crate::http::write_deadline::WriteDeadline;

/// The server's limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HttpLimits {
    /// Longest wait for a request's headers, from the connection's opening or its previous response's end.
    pub(crate) header_timeout: Duration,
    /// Longest a request's body may pause, or come slower than `body_min_rate`, before it is cut off.
    pub(crate) body_timeout: Duration,
    /// Bytes a second a request's body must average (with `body_timeout` of slack); 0 for no rate.
    pub(crate) body_min_rate: u64,
    /// Longest a response may wait for the client to take a byte of it before its connection is dropped.
    pub(crate) write_timeout: Duration,
    /// Connections open at once; more wait in the listen backlog, unaccepted.
    pub(crate) max_connections: u32,
    /// Longest wait, once shutdown starts, for open requests to finish.
    pub(crate) shutdown_timeout: Duration,
}

/// The server's limits unless configured: `HttpLimits`'s fields, in the command line's units.
pub(crate) const DEFAULT_HEADER_TIMEOUT_SECONDS: u64 = 10;
pub(crate) const DEFAULT_BODY_TIMEOUT_SECONDS: u64 = 10;
pub(crate) const DEFAULT_BODY_MIN_BYTES_PER_SECOND: u64 = 64 * 1024;
pub(crate) const DEFAULT_WRITE_TIMEOUT_SECONDS: u64 = 30;
pub(crate) const DEFAULT_MAX_CONNECTIONS: u32 = 512;
pub(crate) const DEFAULT_SHUTDOWN_SECONDS: u64 = 10;

/// The least time between two warnings that the connection cap is reached.
const CAP_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// Serves `app` on `listener` until `shutdown`; then closes idle connections, lets requests in flight finish
/// for up to `limits.shutdown_timeout`, and drops the connections still open.
pub(crate) async fn serve(listener: TcpListener, app: Router, limits: HttpLimits, shutdown: CancellationToken) {
    let pace = BodyPace { timeout: limits.body_timeout, min_rate: limits.body_min_rate };
    let app = app.layer(axum::middleware::map_request(move |request: Request| async move {
        request.map(|body| Body::new(PacedBody::new(body, pace)))
    }));
    let service = TowerToHyperService::new(app);
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    let slots = Arc::new(Semaphore::new(limits.max_connections as usize));
    let mut cap_warned = None;
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    loop {
        let Some(slot) = shutdown.run_until_cancelled(free_slot(&slots, limits.max_connections, &mut cap_warned)).await
        else {
            break;
        };
        let Some(accepted) = shutdown.run_until_cancelled(listener.accept()).await else { break };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                accept_failed(error).await;
                continue;
            }
        };
        let both_lengths = BothLengths::new();
        let stream = WriteDeadline::new(FollowedReads::new(stream, Arc::clone(&both_lengths)), limits.write_timeout);
        let stream = TokioIo::new(JsonRefusals::new(stream));
        let service = RefuseBothLengths::new(service.clone(), both_lengths);
        let connection = graceful.watch(http.serve_connection(stream, service));
        connections.spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "HTTP connection closed on an error");
            }
            drop(slot);
        });
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_timeout, graceful.shutdown()).await.is_err() {
        while connections.try_join_next().is_some() {}
        tracing::warn!(
            connections = connections.len(),
            deadline_seconds = limits.shutdown_timeout.as_secs(),
            "HTTP shutdown deadline passed: dropping the connections still open"
        );
        connections.shutdown().await;
    }
}

/// A connection slot, waiting for one to free when all are taken (with a warning at most once a minute).
async fn free_slot(slots: &Arc<Semaphore>, max: u32, cap_warned: &mut Option<Instant>) -> OwnedSemaphorePermit {
    if let Ok(slot) = Arc::clone(slots).try_acquire_owned() {
        return slot;
    }
    if cap_warned.is_none_or(|at: Instant| at.elapsed() >= CAP_WARNING_INTERVAL) {
        tracing::warn!(max_connections = max, "HTTP connection cap reached: new connections wait until one closes");
        *cap_warned = Some(Instant::now());
    }
    Arc::clone(slots).acquire_owned().await.unwrap_or_else(|_| unreachable!("the semaphore is never closed"))
}

/// Skips a connection that failed before it was accepted; backs off from any other failure (such as running out
/// of file descriptors), which would otherwise repeat at once.
async fn accept_failed(error: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(error.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset) {
        return;
    }
    tracing::error!(%error, "cannot accept an HTTP connection; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
