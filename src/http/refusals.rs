//! The refusals hyper answers itself, before a request reaches the API (400 for a malformed request or two
//! Content-Lengths, 414, 431), are written with an empty body; this wrapper of a connection gives them the API's
//! JSON error body on the way out, so every refusal a client gets is JSON.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::contract::error_body;

/// A connection whose bodiless 400, 414 and 431 answers get a JSON body. The API's own answers always have one,
/// so only hyper's are rewritten.
pub(crate) struct JsonRefusals<T> {
    inner: T,
    /// A rewritten answer still being written: its bytes, how many are out, and the length hyper asked to write.
    pending: Option<(Vec<u8>, usize, usize)>,
}

impl<T> JsonRefusals<T> {
    pub(crate) fn new(inner: T) -> Self {
        JsonRefusals { inner, pending: None }
    }
}

/// The answer `head` with a JSON body, if it is one of hyper's bodiless refusals.
fn with_json_body(head: &[u8]) -> Option<Vec<u8>> {
    let head = std::str::from_utf8(head).ok()?;
    let status = head.strip_prefix("HTTP/1.1 ")?.get(..3)?;
    let error = match status {
        "400" => "request: not a valid HTTP/1.1 request (its request line or headers, or Content-Length given twice)",
        "414" => "path: the request target is too long",
        "431" => "headers: too large or too many",
        _ => return None,
    };
    let fields = head.strip_suffix("\r\n\r\n")?;
    if !fields.lines().any(|line| line.eq_ignore_ascii_case("content-length: 0")) {
        return None;
    }
    let body = error_body::plain(error).to_string();
    let fields: Vec<&str> =
        fields.lines().filter(|line| !line.to_ascii_lowercase().starts_with("content-length:")).collect();
    let head =
        format!("{}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", fields.join("\r\n"), body.len());
    Some([head.as_bytes(), body.as_bytes()].concat())
}

impl<T: AsyncRead + Unpin> AsyncRead for JsonRefusals<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> JsonRefusals<T> {
    /// Writes out a rewritten answer; ready with the length hyper asked to write once all of it is out.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        while let Some((bytes, written, asked)) = &mut self.pending {
            if *written == bytes.len() {
                let asked = *asked;
                self.pending = None;
                return Poll::Ready(Ok(asked));
            }
            *written += ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]))?;
        }
        Poll::Ready(Ok(0))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for JsonRefusals<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.pending.is_none() {
            match with_json_body(buf) {
                Some(answer) => self.pending = Some((answer, 0, buf.len())),
                None => return Pin::new(&mut self.inner).poll_write(cx, buf),
            }
        }
        self.poll_pending(cx)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Only hyper's bodiless refusals are rewritten; every other answer passes as it is.

    use super::with_json_body;

    #[test]
    fn a_bodiless_refusal_gets_the_apis_json_error() {
        let head =
            b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let answer = String::from_utf8(with_json_body(head).unwrap()).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\n"));
        assert!(
            head.contains("content-type: application/json")
                && head.contains(&format!("content-length: {}", body.len()))
        );
        assert_eq!(body, r#"{"error":"headers: too large or too many"}"#);
    }

    #[test]
    fn answers_with_a_body_or_another_status_pass_unchanged() {
        let api_refusal = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n";
        assert_eq!(with_json_body(api_refusal), None, "the API's own 400 has a body already");
        assert_eq!(with_json_body(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n"), None);
        assert_eq!(with_json_body(b"{\"status\":\"ok\"}"), None, "a body written on its own");
    }
}
