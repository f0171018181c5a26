//! A Batch API line as the queue carries it: which batch and line a request is, the request id it runs under, and
//! the mark left beside the batch when the line has ended (how a batch counts its finished lines).

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::contract::outcome::{Ending, ErrorCode, Status};
use crate::contract::request_id::RequestId;

/// The batch (`batch_…`) and the line (from 0) a queued request comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchLine {
    pub id: String,
    pub line: u32,
}

/// How a line ended, as its mark's name says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineEnd {
    Succeeded,
    Failed,
    /// Canceled with its batch before it ran: in neither output file.
    Canceled,
}

impl LineEnd {
    fn suffix(self) -> &'static str {
        match self {
            LineEnd::Succeeded => "succeeded",
            LineEnd::Failed => "failed",
            LineEnd::Canceled => "canceled",
        }
    }

    /// How the request whose stored document is `document` ended.
    pub(crate) fn of_document(document: &[u8]) -> LineEnd {
        match Ending::read(document) {
            Some(Ending { status: Status::Success, .. }) => LineEnd::Succeeded,
            Some(ending) if ending.error.as_ref().is_some_and(|e| e.code == ErrorCode::Canceled) => LineEnd::Canceled,
            _ => LineEnd::Failed,
        }
    }
}

impl BatchLine {
    /// The line's request id: derived from the batch, the line and the batch's secret `key`, so that enqueueing a
    /// line twice runs it once and its result has one known place, while nobody who does not hold the key (another
    /// client who sees the batch's id) can name it, claim it with a request of their own or cancel it. None: a
    /// batch created before its lines had a key. A UUID with the v4 version and variant bits, as the contract
    /// requires.
    pub fn request_id(&self, key: Option<&[u8]>) -> RequestId {
        let digest: [u8; 32] = match key {
            Some(key) => {
                let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
                    .unwrap_or_else(|_| unreachable!("HMAC takes any key"));
                mac.update(self.id.as_bytes());
                mac.update(&self.line.to_be_bytes());
                mac.finalize().into_bytes().into()
            }
            None => {
                Sha256::new().chain_update(self.id.as_bytes()).chain_update(self.line.to_be_bytes()).finalize().into()
            }
        };
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest[..16]);
        uuid::Builder::from_random_bytes(bytes).into_uuid().into()
    }

    /// The key of the (empty) mark saying that this line ended as its stored `document` says: written once, beside
    /// the batch, by whoever ends the line (marking twice is harmless).
    pub(crate) fn end_mark(&self, document: &[u8]) -> String {
        mark_key(&self.id, self.line, LineEnd::of_document(document))
    }
}

/// Where the marks of every batch's ended lines are.
pub(crate) const MARKS_PREFIX: &str = "batch-lines/";

/// Where the marks of `batch`'s ended lines are.
pub(crate) fn marks_prefix(batch: &str) -> String {
    format!("{MARKS_PREFIX}{batch}/")
}

/// The mark of a line that ended as `end`.
pub(crate) fn mark_key(batch: &str, line: u32, end: LineEnd) -> String {
    format!("{}{line:08}.{}", marks_prefix(batch), end.suffix())
}

/// The line and its end a mark's key names, or None for another key.
pub(crate) fn read_mark(key: &str) -> Option<(u32, LineEnd)> {
    let name = key.rsplit('/').next()?;
    let (line, suffix) = name.split_once('.')?;
    let end = [LineEnd::Succeeded, LineEnd::Failed, LineEnd::Canceled].into_iter().find(|e| e.suffix() == suffix)?;
    Some((line.parse().ok()?, end))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Unit tests of `contract/batch_line.rs`.

    use super::*;

    #[test]
    fn a_lines_request_id_is_a_valid_v4_id_that_depends_on_batch_line_and_key() {
        let line = |id: &str, line| BatchLine { id: id.into(), line };
        let key = Some(&b"the batch's secret"[..]);
        let id = line("batch_a", 7).request_id(key);
        assert_eq!(RequestId::parse(&id.to_string()), Some(id), "the contract's UUID v4 rule");
        assert_eq!(id, line("batch_a", 7).request_id(key));
        assert_ne!(id, line("batch_a", 8).request_id(key));
        assert_ne!(id, line("batch_b", 7).request_id(key));
        assert_ne!(id, line("batch_a", 7).request_id(Some(b"another secret")), "who lacks the key cannot name it");
        assert_ne!(id, line("batch_a", 7).request_id(None), "nor derive it from the batch and line alone");
    }

    #[test]
    fn a_mark_names_its_line_and_end() {
        let key = mark_key("batch_a", 42, LineEnd::Failed);
        assert_eq!(key, "batch-lines/batch_a/00000042.failed");
        assert_eq!(read_mark(&key), Some((42, LineEnd::Failed)));
        assert_eq!(read_mark("batch-lines/batch_a/x.failed"), None);
        assert_eq!(read_mark("batch-lines/batch_a/00000001.other"), None);
    }
}
