//! A result store that refuses every call while switched to failing, counting the refusals (store outages), or
//! holds every write while stalled (a slow store); it counts the looks for documents and for the cancel mark.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use gpuinfer::{PutOutcome, RequestId, ResultStore, StoreError};
use tokio::sync::watch;

pub(crate) struct FaultyStore {
    inner: Arc<dyn ResultStore>,
    failing: AtomicBool,
    refused: AtomicU64,
    stalled: watch::Sender<bool>,
    /// `exists` calls (a HeadObject each on S3).
    looks: AtomicU64,
    /// `cancel_mark` calls (a HeadObject each on S3).
    mark_reads: AtomicU64,
}

impl FaultyStore {
    pub(crate) fn new(inner: Arc<dyn ResultStore>) -> Self {
        FaultyStore {
            inner,
            failing: AtomicBool::new(false),
            refused: AtomicU64::new(0),
            stalled: watch::channel(false).0,
            looks: AtomicU64::new(0),
            mark_reads: AtomicU64::new(0),
        }
    }

    /// While stalled, every write waits (then goes on once the stall ends).
    pub(crate) fn set_stalled(&self, stalled: bool) {
        self.stalled.send_replace(stalled);
    }

    pub(crate) fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    /// Calls refused so far.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }

    /// Looks for a document (`exists`) and reads of the cancel mark so far.
    pub(crate) fn looks(&self) -> (u64, u64) {
        (self.looks.load(Ordering::SeqCst), self.mark_reads.load(Ordering::SeqCst))
    }

    fn check(&self) -> Result<(), StoreError> {
        if self.failing.load(Ordering::SeqCst) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::unavailable("injected outage"));
        }
        Ok(())
    }
}

#[async_trait]
impl ResultStore for FaultyStore {
    async fn exists(&self, request_id: RequestId) -> Result<bool, StoreError> {
        self.looks.fetch_add(1, Ordering::SeqCst);
        self.check()?;
        self.inner.exists(request_id).await
    }

    async fn put_if_absent(&self, request_id: RequestId, document: &[u8]) -> Result<PutOutcome, StoreError> {
        self.check()?;
        self.stalled.subscribe().wait_for(|stalled| !stalled).await.ok();
        self.inner.put_if_absent(request_id, document).await
    }

    async fn get(&self, request_id: RequestId) -> Result<Option<Vec<u8>>, StoreError> {
        self.check()?;
        self.inner.get(request_id).await
    }

    async fn delete(&self, request_id: RequestId) -> Result<(), StoreError> {
        self.check()?;
        self.inner.delete(request_id).await
    }

    async fn record_acceptance(&self, request_id: RequestId, record: &[u8]) -> Result<PutOutcome, StoreError> {
        self.check()?;
        self.inner.record_acceptance(request_id, record).await
    }

    async fn acceptance(&self, request_id: RequestId) -> Result<Option<Vec<u8>>, StoreError> {
        self.check()?;
        self.inner.acceptance(request_id).await
    }

    async fn forget_acceptance(&self, request_id: RequestId) -> Result<(), StoreError> {
        self.check()?;
        self.inner.forget_acceptance(request_id).await
    }

    async fn mark_cancels(&self) -> Result<(), StoreError> {
        self.check()?;
        self.inner.mark_cancels().await
    }

    async fn cancel_mark(&self) -> Result<Option<String>, StoreError> {
        self.mark_reads.fetch_add(1, Ordering::SeqCst);
        self.check()?;
        self.inner.cancel_mark().await
    }
}
