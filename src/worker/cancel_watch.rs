//! One look for every running request's cancel: while any request runs, the worker reads the store's cancel mark
//! (one HeadObject on S3) every `cancel_poll`, and only when the mark changed does each running request look at its
//! own document. The router rewrites the mark after it stores canceled documents (DELETE /results/{id}, a batch's
//! cancel or expiry), so a cancel still stops its request within about one `cancel_poll`, at one call per worker
//! per poll instead of one per running request. A request also looks every [`FULL_LOOK`] whatever the mark says, in
//! case a mark was not written (the router's write failed after the cancel was stored).

use std::time::Duration;

use tokio::sync::watch;

use async_trait::async_trait;

use crate::ports::{ResultStore, StoreError};

/// How often a running request looks at its document even when the cancel mark has not changed.
pub(crate) const FULL_LOOK: Duration = Duration::from_secs(60);

/// Where the cancel mark is read: a result store's `cancel_mark`.
#[async_trait]
pub(crate) trait MarkSource: Send + Sync {
    async fn read_mark(&self) -> Result<Option<String>, StoreError>;
}

#[async_trait]
impl<S: ResultStore + ?Sized> MarkSource for S {
    async fn read_mark(&self) -> Result<Option<String>, StoreError> {
        self.cancel_mark().await
    }
}

/// The cancel mark as the worker last read it, and the requests watching it.
pub(crate) struct CancelWatch {
    /// Bumped at each change of the mark; each running request holds a receiver.
    changes: watch::Sender<u64>,
}

impl CancelWatch {
    pub(crate) fn new() -> Self {
        CancelWatch { changes: watch::Sender::new(0) }
    }

    /// A receiver that sees every change of the mark from now on; taken before the request's first look at its
    /// document, so no cancel falls between that look and the watch.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Reads the mark from `marks` every `poll` while a request watches, starting from `last` (read before the
    /// worker received anything); a changed mark wakes every watcher. Runs until aborted. A failed read is tried
    /// again at the next poll (the full look covers a long failure).
    pub(crate) async fn run<M: MarkSource + ?Sized>(&self, marks: &M, poll: Duration, mut last: Option<String>) {
        let mut failing = false;
        loop {
            tokio::time::sleep(poll).await;
            if self.changes.receiver_count() == 0 {
                continue;
            }
            let read = marks.read_mark().await;
            let failed = read.is_err();
            match read {
                Ok(mark) if mark != last => {
                    last = mark;
                    self.changes.send_modify(|changes| *changes += 1);
                }
                Ok(_) => {}
                // Once per run of failures: each poll tries again.
                Err(error) if !failing => {
                    tracing::warn!(%error, "cannot read the cancel mark: running requests look at their documents once a minute until it reads again")
                }
                Err(_) => {}
            }
            failing = failed;
        }
    }
}

/// Resolves when the mark changed since `watch` last saw it, or after [`FULL_LOOK`]: the moment for a running
/// request to look at its document.
pub(crate) async fn next_look(watch: &mut watch::Receiver<u64>) {
    match tokio::time::timeout(FULL_LOOK, watch.changed()).await {
        Ok(Ok(())) | Err(_) => {}
        // The worker is gone (it holds the sender while any request runs): only the full look is left.
        Ok(Err(_)) => tokio::time::sleep(FULL_LOOK).await,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
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
}
