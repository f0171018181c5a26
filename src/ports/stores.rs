//! The store ports: result documents (first writer wins) and named objects beside them.

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::Stream;

use super::port_error::StoreError;
use crate::contract::request_id::RequestId;

/// Whether a conditional write created the document or found one already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    Created,
    AlreadyExists,
}

/// Where result documents live: `results/{requestId}.json`, first writer wins.
#[async_trait]
pub trait ResultStore: Send + Sync {
    async fn exists(&self, request_id: RequestId) -> Result<bool, StoreError>;
    async fn put_if_absent(&self, request_id: RequestId, document: &[u8]) -> Result<PutOutcome, StoreError>;
    async fn get(&self, request_id: RequestId) -> Result<Option<Vec<u8>>, StoreError>;
    /// Removes the document of `request_id` (a deleted OpenAI response's); none there is no error.
    async fn delete(&self, request_id: RequestId) -> Result<(), StoreError>;
    /// Records, first writer wins, that the router accepted `request_id` (the record says with which request and
    /// to which tier): how a reused id is told from a retry, and how a cancel knows the id exists. It expires
    /// with the results.
    async fn record_acceptance(&self, request_id: RequestId, record: &[u8]) -> Result<PutOutcome, StoreError>;
    async fn acceptance(&self, request_id: RequestId) -> Result<Option<Vec<u8>>, StoreError>;
    /// Removes the record of an acceptance whose enqueue failed, so that a retry can be accepted.
    async fn forget_acceptance(&self, request_id: RequestId) -> Result<(), StoreError>;
    /// Tells the workers that requests were canceled, once their canceled documents are stored: rewrites the one
    /// cancel mark beside the results, which each worker watches instead of every running request's document.
    async fn mark_cancels(&self) -> Result<(), StoreError>;
    /// The cancel mark's version, new at each `mark_cancels`; None while there is none.
    async fn cancel_mark(&self) -> Result<Option<String>, StoreError>;
    /// The same place seen as a store of named objects (files and batches of the Batch API), where it is one: a
    /// bucket or a folder, not a queue.
    fn objects(&self) -> Option<&dyn ObjectStore> {
        None
    }
}

/// An object's bytes, read or written a chunk at a time.
pub(crate) type ByteChunks<'a> = Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send + 'a>>;

/// Named objects beside the results (`files/…`, `batches/…`): what the Batch and Files API keep. Keys are relative
/// to the results' place, `/`-separated.
#[async_trait]
pub trait ObjectStore: Send + Sync {
    /// Writes the chunks at `key`, replacing any object there; a reader never sees a partial object. The bytes
    /// written. A chunk that is an error fails the write, and nothing is left at `key`.
    async fn put(&self, key: &str, chunks: ByteChunks<'_>) -> Result<u64, StoreError>;
    /// Writes `bytes` at `key` unless something is there: first writer wins.
    async fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<PutOutcome, StoreError>;
    /// The object's size and its bytes, or None when there is no object at `key`.
    async fn get(&self, key: &str) -> Result<Option<(u64, ByteChunks<'static>)>, StoreError> {
        self.get_from(key, 0).await
    }
    /// The object's bytes from offset `from` on (none past its end) and their count, or None when there is no
    /// object at `key`: where a long read stopped, read on.
    async fn get_from(&self, key: &str, from: u64) -> Result<Option<(u64, ByteChunks<'static>)>, StoreError>;
    /// The keys that start with `prefix`, in lexical order. Callers name a folder (`prefix` ends in `/`) holding
    /// objects only: the file adapter lists one folder level, S3 every key under the prefix.
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError>;
    /// Removes the object at `key`; no object there is no error.
    async fn delete(&self, key: &str) -> Result<(), StoreError>;
    /// A URL that reads the object without credentials for `valid_for`, where the store has such URLs (S3).
    async fn presigned_get(&self, _key: &str, _valid_for: Duration) -> Result<Option<String>, StoreError> {
        Ok(None)
    }
}
