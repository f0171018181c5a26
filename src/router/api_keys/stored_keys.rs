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
pub(crate) const DEFAULT_CACHE_SECONDS: u64 = 60;
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
mod tests {
    //! Unit tests of `router/api_keys/stored_keys.rs`: the cache time, a key added and one revoked, a store that fails.

    use std::sync::Mutex as StdMutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;

    use super::*;
    use crate::router::api_keys::keys::digest;

    /// A key store in memory that counts its reads; `None` for a store that cannot be read.
    #[derive(Default)]
    struct MemoryStore {
        document: StdMutex<Option<String>>,
        reads: AtomicUsize,
    }

    impl MemoryStore {
        fn holding(keys: &[(&str, &str)]) -> Arc<Self> {
            let store = Arc::new(MemoryStore::default());
            store.hold(keys);
            store
        }

        fn hold(&self, keys: &[(&str, &str)]) {
            let mut document = KeyDocument::default();
            for (project, key) in keys {
                document.add(project, key).unwrap();
            }
            self.set(Some(document.to_json()));
        }

        fn set(&self, document: Option<String>) {
            *self.document.lock().unwrap() = document;
        }

        fn reads(&self) -> usize {
            self.reads.load(Ordering::SeqCst)
        }
    }

    #[async_trait]
    impl KeyStore for MemoryStore {
        async fn read(&self) -> Result<String, KeyStoreError> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            self.document.lock().unwrap().clone().ok_or_else(|| KeyStoreError::unavailable("AccessDenied"))
        }

        async fn write(&self, document: &str) -> Result<(), KeyStoreError> {
            self.set(Some(document.to_owned()));
            Ok(())
        }
    }

    const CACHE: Duration = Duration::from_secs(60);

    #[tokio::test(start_paused = true)]
    async fn keys_are_read_once_per_cache_time_and_a_change_is_seen_after_it() {
        let store = MemoryStore::holding(&[("team-a", "sk-first")]);
        let keys = StoredKeys::new(store.clone(), CACHE);
        assert_eq!(keys.project_of("sk-first").await.unwrap().as_deref(), Some("team-a"));
        assert_eq!(keys.project_of("sk-other").await.unwrap(), None);
        assert_eq!(store.reads(), 1, "one read for both requests");

        store.hold(&[("team-a", "sk-second")]);
        tokio::time::advance(CACHE - Duration::from_secs(1)).await;
        assert_eq!(keys.project_of("sk-first").await.unwrap().as_deref(), Some("team-a"), "still cached");
        assert_eq!(keys.project_of("sk-second").await.unwrap(), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(keys.project_of("sk-second").await.unwrap().as_deref(), Some("team-a"), "the key added");
        assert_eq!(keys.project_of("sk-first").await.unwrap(), None, "the key revoked");
        assert_eq!(store.reads(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_that_cannot_be_read_refuses_every_key_and_is_asked_again_a_second_later() {
        let store = MemoryStore::holding(&[("team-a", "sk-first")]);
        let keys = StoredKeys::new(store.clone(), CACHE);
        assert!(keys.project_of("sk-first").await.unwrap().is_some());
        store.set(None);
        tokio::time::advance(CACHE).await;
        for _ in 0..3 {
            let error = keys.project_of("sk-first").await.unwrap_err();
            assert!(error.to_string().contains("AccessDenied"), "{error}");
        }
        assert_eq!(store.reads(), 2, "a failed read is kept a moment, not read again for each request");
        store.hold(&[("team-a", "sk-first")]);
        tokio::time::advance(FAILED_READ_KEPT).await;
        assert!(keys.project_of("sk-first").await.unwrap().is_some(), "readable again: accepted again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_document_that_is_not_a_key_document_refuses_every_key() {
        let store = MemoryStore::holding(&[]);
        store.set(Some(r#"{"keys": [{"project": "team-a", "sha256": "not-hex"}]}"#.into()));
        let keys = StoredKeys::new(store.clone(), CACHE);
        let error = keys.project_of("sk-first").await.unwrap_err().to_string();
        assert!(error.contains("keys[0].sha256"), "{error}");
        store.set(Some(format!(
            r#"{{"keys": [{{"project": "team-a", "sha256": "{}"}}]}}"#,
            hex::encode(digest("sk-first"))
        )));
        tokio::time::advance(FAILED_READ_KEPT).await;
        assert_eq!(keys.project_of("sk-first").await.unwrap().as_deref(), Some("team-a"));
        store.set(Some(r#"{"keys": []}"#.into()));
        tokio::time::advance(CACHE).await;
        assert_eq!(keys.project_of("sk-first").await.unwrap(), None, "an empty store accepts no key");
    }

    /// A store that never answers.
    struct SilentStore;

    #[async_trait]
    impl KeyStore for SilentStore {
        async fn read(&self) -> Result<String, KeyStoreError> {
            std::future::pending().await
        }

        async fn write(&self, _: &str) -> Result<(), KeyStoreError> {
            std::future::pending().await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_that_does_not_answer_is_an_error_after_the_read_timeout() {
        let keys = StoredKeys::new(Arc::new(SilentStore), CACHE);
        let started = Instant::now();
        let error = keys.project_of("sk-first").await.unwrap_err();
        assert_eq!(started.elapsed(), READ_TIMEOUT);
        assert!(error.to_string().contains("no answer"), "{error}");
    }
}
