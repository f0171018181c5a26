//! The checks a batch input file passes as it streams in, before any of it is kept: at most 200 MB and 50,000
//! requests (OpenAI's limits), and each non-blank line a JSON object. A refusal stops the stream, and says why.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use futures_util::{Stream, StreamExt, stream};

use crate::ports::ByteChunks;

/// Largest file (OpenAI's limit for a batch input file).
pub(crate) const MAX_FILE_BYTES: u64 = 200 * 1024 * 1024;
/// Most requests in one file (OpenAI's limit for a batch).
pub(crate) const MAX_FILE_LINES: u64 = 50_000;
/// Longest line: a request is at most one queue message (1 MiB) once converted, and a line carries a little more.
const MAX_LINE_BYTES: usize = 2 * 1024 * 1024;

/// Why a file was refused, set when the stream stops on it.
pub(crate) type Refusal = Arc<Mutex<Option<String>>>;

/// Counts and checks lines as chunks pass.
#[derive(Debug, Default)]
struct Check {
    bytes: u64,
    /// Lines seen so far, blank ones included (errors name lines as an editor numbers them).
    lines: u64,
    requests: u64,
    partial: Vec<u8>,
}

impl Check {
    fn feed(&mut self, chunk: &[u8]) -> Result<(), String> {
        self.bytes += chunk.len() as u64;
        if self.bytes > MAX_FILE_BYTES {
            return Err(format!("the file is larger than the {MAX_FILE_BYTES}-byte limit of a batch input file"));
        }
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            self.partial.extend_from_slice(&rest[..end]);
            rest = &rest[end + 1..];
            self.line_ended()?;
        }
        self.partial.extend_from_slice(rest);
        if self.partial.len() > MAX_LINE_BYTES {
            return Err(format!("line {}: longer than {MAX_LINE_BYTES} bytes", self.lines + 1));
        }
        Ok(())
    }

    fn line_ended(&mut self) -> Result<(), String> {
        self.lines += 1;
        let line = std::mem::take(&mut self.partial);
        if line.trim_ascii().is_empty() {
            return Ok(());
        }
        self.requests += 1;
        if self.requests > MAX_FILE_LINES {
            return Err(format!("the file has more than {MAX_FILE_LINES} requests, the limit of one batch"));
        }
        match serde_json::from_slice::<serde_json::Value>(&line) {
            Ok(serde_json::Value::Object(_)) => Ok(()),
            Ok(_) => {
                Err(format!("line {}: not a JSON object; a batch input file has one request object a line", self.lines))
            }
            Err(e) => Err(format!("line {}: not valid JSON ({e}); a batch input file is JSONL", self.lines)),
        }
    }

    fn finish(&mut self) -> Result<(), String> {
        if !self.partial.is_empty() {
            self.line_ended()?;
        }
        if self.requests == 0 {
            return Err("the file holds no request: a batch input file has one JSON request a line".into());
        }
        Ok(())
    }
}

/// `chunks`, checked as they pass: the stream ends in an error at the first refusal, whose reason is then in the
/// returned `Refusal`.
pub(crate) fn checked<'a, E>(chunks: impl Stream<Item = Result<Bytes, E>> + Send + 'a) -> (ByteChunks<'a>, Refusal)
where
    E: std::fmt::Display + 'a,
{
    let refusal: Refusal = Arc::default();
    let refused = Arc::clone(&refusal);
    let refuse = move |reason: String| {
        *refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.clone());
        Err(std::io::Error::new(std::io::ErrorKind::InvalidData, reason))
    };
    let state = (Box::pin(chunks), Check::default(), false, refuse);
    let stream = stream::unfold(state, |(mut chunks, mut check, ended, refuse)| async move {
        if ended {
            return None;
        }
        let item = match chunks.next().await {
            Some(Ok(chunk)) => match check.feed(&chunk) {
                Ok(()) => Ok(chunk),
                Err(reason) => refuse(reason),
            },
            Some(Err(e)) => refuse(format!("the file could not be read to its end ({e})")),
            None => match check.finish() {
                Ok(()) => return None,
                Err(reason) => refuse(reason),
            },
        };
        let ended = item.is_err();
        Some((item, (chunks, check, ended, refuse)))
    });
    (Box::pin(stream), refusal)
}

/// The reason in `refusal`, if the stream was refused.
pub(crate) fn reason(refusal: &Refusal) -> Option<String> {
    refusal.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Unit tests of `router/openai/jsonl_check.rs`.

    use super::*;

    async fn check(chunks: Vec<&'static str>) -> Result<Vec<u8>, String> {
        let source =
            stream::iter(chunks.into_iter().map(|c| Ok::<_, std::io::Error>(Bytes::from_static(c.as_bytes()))));
        let (mut checked, refusal) = checked(source);
        let mut passed = Vec::new();
        while let Some(chunk) = checked.next().await {
            match chunk {
                Ok(chunk) => passed.extend_from_slice(&chunk),
                Err(_) => return Err(reason(&refusal).unwrap_or_default()),
            }
        }
        Ok(passed)
    }

    #[tokio::test]
    async fn lines_split_across_chunks_pass_whole() {
        let passed = check(vec!["{\"a\":", "1}\n\n{\"b\":2}"]).await;
        assert_eq!(passed.as_deref(), Ok(&b"{\"a\":1}\n\n{\"b\":2}"[..]));
    }

    #[tokio::test]
    async fn a_bad_line_is_refused_by_its_number() {
        let refused = check(vec!["{\"a\":1}\n\n", "[1]\n"]).await.unwrap_err();
        assert!(refused.starts_with("line 3: not a JSON object"), "{refused}");
        let refused = check(vec!["{\"a\":1}\n{oops"]).await.unwrap_err();
        assert!(refused.starts_with("line 2: not valid JSON"), "{refused}");
        let refused = check(vec!["\n \n"]).await.unwrap_err();
        assert!(refused.contains("holds no request"), "{refused}");
    }
}
