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
    pub(crate) fn new(inner: T, timeout: Duration) -> Self {
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
mod tests {
    //! A write the client takes nothing of for the timeout fails; a client that reads slowly but keeps reading is
    //! served. On tokio's paused clock, over an in-memory pipe of 64 bytes.

    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::time::Instant;

    use super::WriteDeadline;

    const TIMEOUT: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_write_the_client_takes_nothing_of_fails_after_the_timeout() {
        let (server, _client) = tokio::io::duplex(64);
        let mut server = WriteDeadline::new(server, TIMEOUT);
        let started = Instant::now();
        let error = server.write_all(&[b'x'; 1024]).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), TIMEOUT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_reads_slowly_but_keeps_reading_is_served_whole() {
        let (server, mut client) = tokio::io::duplex(64);
        let mut server = WriteDeadline::new(server, TIMEOUT);
        let reader = tokio::spawn(async move {
            let mut received = Vec::new();
            let mut buffer = [0; 16];
            while let Ok(n @ 1..) = client.read(&mut buffer).await {
                received.extend_from_slice(&buffer[..n]);
                tokio::time::sleep(TIMEOUT / 2).await;
            }
            received.len()
        });
        let started = Instant::now();
        server.write_all(&[b'x'; 1024]).await.unwrap();
        server.shutdown().await.unwrap();
        assert!(started.elapsed() > TIMEOUT * 10, "the client took {:?}", started.elapsed());
        assert_eq!(reader.await.unwrap(), 1024);
    }
}
