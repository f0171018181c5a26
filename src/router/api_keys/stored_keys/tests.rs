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
