//! A request giving both Transfer-Encoding and Content-Length is refused (RFC 9112 §6.3: such a message may be
//! an attempt at request smuggling; a server may reject it, and must close the connection after it): a JSON 400,
//! and the connection closed. Hyper drops the Content-Length of such a request before the API sees it, so the
//! connection's bytes are followed as they are read (`RequestHeads`), and the service of that connection refuses
//! the request they point at.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use futures_util::future::{Either, Ready, ready as answer_now};
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::contract::error_body;
use crate::http::request_heads::RequestHeads;

/// The index of the first request on a connection whose head gives both lengths; `u64::MAX` while none has.
#[derive(Debug)]
pub(crate) struct BothLengths(AtomicU64);

impl BothLengths {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(BothLengths(AtomicU64::new(u64::MAX)))
    }
}

/// A connection whose bytes read are followed, to mark a request giving both lengths. Writes pass as they are.
pub(crate) struct FollowedReads<T> {
    inner: T,
    heads: RequestHeads,
    both_lengths: Arc<BothLengths>,
}

impl<T> FollowedReads<T> {
    pub(crate) fn new(inner: T, both_lengths: Arc<BothLengths>) -> Self {
        FollowedReads { inner, heads: RequestHeads::default(), both_lengths }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for FollowedReads<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        let this = self.get_mut();
        if let Some(index) = this.heads.follow(&buf.filled()[before..]) {
            this.both_lengths.0.store(index, Ordering::Relaxed);
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for FollowedReads<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// One connection's service: `inner`, but for the request the connection's bytes mark, which gets a 400.
pub(crate) struct RefuseBothLengths<S> {
    inner: S,
    both_lengths: Arc<BothLengths>,
    /// Requests this connection has had so far.
    requests: AtomicU64,
}

impl<S> RefuseBothLengths<S> {
    pub(crate) fn new(inner: S, both_lengths: Arc<BothLengths>) -> Self {
        RefuseBothLengths { inner, both_lengths, requests: AtomicU64::new(0) }
    }
}

/// The 400, which closes its connection.
fn refusal() -> Response<Body> {
    let error = "request: Transfer-Encoding and Content-Length given together; send one of them";
    let mut response = Response::new(Body::from(error_body::plain(error).to_string()));
    *response.status_mut() = StatusCode::BAD_REQUEST;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

impl<S> hyper::service::Service<Request<Incoming>> for RefuseBothLengths<S>
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<Body>>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Either<Ready<Result<Response<Body>, S::Error>>, S::Future>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let index = self.requests.fetch_add(1, Ordering::Relaxed);
        if index == self.both_lengths.0.load(Ordering::Relaxed) {
            return Either::Left(answer_now(Ok(refusal())));
        }
        Either::Right(self.inner.call(request))
    }
}
