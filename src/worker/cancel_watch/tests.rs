//! The cancel watch: a changed mark wakes every watcher at once, an unchanged one wakes nobody, no watcher means no
//! read, and a request looks at least every full look.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::{CancelWatch, FULL_LOOK, MarkSource, next_look};
use crate::local::store::FileStore;
use crate::ports::{ResultStore, StoreError};

#[tokio::test(start_paused = true)]
async fn a_changed_mark_wakes_every_watcher_and_an_unchanged_one_none() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FileStore::open(dir.path()).unwrap());
    let watch = Arc::new(CancelWatch::new());
    let poll = Duration::from_secs(5);
    let running = {
        let (watch, store) = (Arc::clone(&watch), Arc::clone(&store));
        tokio::spawn(async move { watch.run(store.as_ref(), poll, None).await })
    };
    let (mut first, second) = (watch.subscribe(), watch.subscribe());
    tokio::time::sleep(poll * 3).await;
    assert!(!first.has_changed().unwrap(), "no mark yet: nobody woken");
    store.mark_cancels().await.unwrap();
    tokio::time::sleep(poll + Duration::from_millis(1)).await;
    assert!(first.has_changed().unwrap() && second.has_changed().unwrap(), "a new mark wakes every watcher");
    first.mark_unchanged();
    tokio::time::sleep(poll * 3).await;
    assert!(!first.has_changed().unwrap(), "the same mark again wakes nobody");
    store.mark_cancels().await.unwrap();
    tokio::time::sleep(poll + Duration::from_millis(1)).await;
    assert!(first.has_changed().unwrap(), "each new mark differs from the last");
    running.abort();
}

/// A mark source that counts its reads and never has a mark.
struct Counted(Arc<AtomicU32>);

#[async_trait::async_trait]
impl MarkSource for Counted {
    async fn read_mark(&self) -> Result<Option<String>, StoreError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(None)
    }
}

#[tokio::test(start_paused = true)]
async fn the_mark_is_read_once_per_poll_and_only_while_a_request_watches() {
    let reads = Arc::new(AtomicU32::new(0));
    let watch = Arc::new(CancelWatch::new());
    let poll = Duration::from_secs(5);
    let running = {
        let (watch, reads) = (Arc::clone(&watch), Arc::clone(&reads));
        tokio::spawn(async move { watch.run(&Counted(reads), poll, None).await })
    };
    tokio::time::sleep(poll * 4 + Duration::from_millis(1)).await;
    assert_eq!(reads.load(Ordering::SeqCst), 0, "nobody running: no read");
    let watching: Vec<_> = (0..8).map(|_| watch.subscribe()).collect();
    tokio::time::sleep(poll * 4).await;
    assert_eq!(reads.load(Ordering::SeqCst), 4, "eight running: one read per poll, not eight");
    drop(watching);
    running.abort();
}

#[tokio::test(start_paused = true)]
async fn a_request_looks_at_least_every_full_look() {
    let watch = CancelWatch::new();
    let mut watching = watch.subscribe();
    let started = tokio::time::Instant::now();
    next_look(&mut watching).await;
    assert_eq!(started.elapsed(), FULL_LOOK);
}
