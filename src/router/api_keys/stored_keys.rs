//! The keys of a key store (the stack's Secrets Manager secret), read again once older than the cache time: a key
//! added is accepted, and one revoked refused, within that time. A store that cannot be read, or holds no valid key
//! document, refuses every request (503) and lets none through.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use super::key_document::KeyDocument;
use super::keys::ApiKeys;
use crate::ports::{KeyStore, KeyStoreError};

/// How long the router keeps the keys it read unless configured: a revoked key stops working within this.
pub const DEFAULT_CACHE_SECONDS: u64 = 60;
/// The longest a read of the store may take before the request waiting on it is answered 503.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a failed read is kept (or the cache time, if shorter), so a burst of requests while the store is
/// unreachable is answered without a read each.
const FAILED_READ_KEPT: Duration = Duration::from_secs(1);

/// The store's keys as last read, and when.
struct Reading {
    at: Instant,
    keys: Result<ApiKeys, KeyStoreError>,
}

/// A key store and its cache: one read at a time, shared by every request waiting on it.
pub struct StoredKeys {
    store: Arc<dyn KeyStore>,
    fresh_for: Duration,
    last: Mutex<Option<Reading>>,
}

impl std::fmt::Debug for StoredKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredKeys").field("fresh_for", &self.fresh_for).finish_non_exhaustive()
    }
}

impl StoredKeys {
    /// The keys of `store`, read again after `fresh_for`.
    pub fn new(store: Arc<dyn KeyStore>, fresh_for: Duration) -> Self {
        StoredKeys { store, fresh_for, last: Mutex::new(None) }
    }

    /// The project of the key `token`, None when the store holds no such key; an error when the store could not
    /// be read.
    pub async fn project_of(&self, token: &str) -> Result<Option<String>, KeyStoreError> {
        let mut last = self.last.lock().await;
        let reading = match last.take() {
            Some(reading) if reading.at.elapsed() < self.kept_for(&reading) => reading,
            _ => Reading { keys: self.read().await, at: Instant::now() },
        };
        let project = match &reading.keys {
            Ok(keys) => Ok(keys.project_of(token).map(str::to_owned)),
            Err(error) => Err(error.clone()),
        };
        *last = Some(reading);
        project
    }

    /// How long `reading` is used before the store is read again.
    fn kept_for(&self, reading: &Reading) -> Duration {
        if reading.keys.is_ok() { self.fresh_for } else { self.fresh_for.min(FAILED_READ_KEPT) }
    }

    async fn read(&self) -> Result<ApiKeys, KeyStoreError> {
        let text = tokio::time::timeout(READ_TIMEOUT, self.store.read())
            .await
            .map_err(|_| KeyStoreError::unavailable(format!("no answer within {READ_TIMEOUT:?}")))??;
        let document = KeyDocument::parse(&text).map_err(KeyStoreError::unavailable)?;
        Ok(document.keys())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
