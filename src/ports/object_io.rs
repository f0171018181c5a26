//! Whole-object helpers over `ObjectStore`: read an object into memory, write one from memory, as JSON or bytes.

use bytes::Bytes;
use futures_util::{StreamExt, stream};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::port_error::StoreError;
use super::stores::{ByteChunks, ObjectStore};

/// `bytes` as a one-chunk stream.
pub fn one_chunk(bytes: Vec<u8>) -> ByteChunks<'static> {
    Box::pin(stream::once(async move { Ok(Bytes::from(bytes)) }))
}

/// The whole object at `key`, or None.
pub(crate) async fn read_all(objects: &dyn ObjectStore, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
    let Some((size, mut chunks)) = objects.get(key).await? else {
        return Ok(None);
    };
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    while let Some(chunk) = chunks.next().await {
        bytes.extend_from_slice(&chunk.map_err(|e| StoreError::caused(&format!("reading {key}"), e))?);
    }
    Ok(Some(bytes))
}

/// The JSON document at `key`, or None; a document that does not parse is an error naming the key.
pub(crate) async fn read_json<T: DeserializeOwned>(
    objects: &dyn ObjectStore,
    key: &str,
) -> Result<Option<T>, StoreError> {
    let Some(bytes) = read_all(objects, key).await? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| StoreError::caused(&format!("{key} is not readable"), e))
}

/// Writes `value` as JSON at `key`, replacing what is there.
pub async fn write_json<T: Serialize>(objects: &dyn ObjectStore, key: &str, value: &T) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec(value).unwrap_or_else(|e| unreachable!("a record always serializes: {e}"));
    objects.put(key, one_chunk(bytes)).await.map(|_| ())
}
