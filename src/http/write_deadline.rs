//! A connection whose writes fail once the client has taken no byte for the write timeout: a client that stops
//! reading a response (a download, say) loses its connection, and the slot it held under the connection cap,
//! instead of holding both for as long as it likes.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// Wraps a connection: a write (or flush, or shutdown) still waiting on the client `timeout` after the last one
/// that went through fails with `TimedOut`, which ends the connection. Reads pass as they are.
pub(crate) struct WriteDeadline<T> {
    inner: T,
    timeout: Duration,
    /// Running while the client takes nothing: since the first write it left waiting.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> WriteDeadline<T> {
    pub fn new(inner: T, timeout: Duration) -> Self {
        WriteDeadline { inner, timeout, stalled: None }
    }

    /// `poll`, what the connection answered now, unless the client has taken nothing for too long.
    fn within_deadline<R>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let timeout = self.timeout;
        let stalled = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client took no byte of the answer for {} s", timeout.as_secs()),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.within_deadline(cx, poll)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.within_deadline(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.within_deadline(cx, poll)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
