//! The worker's deletes go out in batches while earlier ones are on the wire, each caller gets its own
//! outcome, and every message is gone afterwards (on the embedded queue).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use gpuinfer::deletes::{DeleteBatcher, MAX_BATCH};
use gpuinfer::lanes::Priority;
use gpuinfer::local::LocalBackends;
use gpuinfer::local::queue::LocalQueue;
use gpuinfer::ports::{Message, Queue, QueueCounts, QueueError};
use gpuinfer::routing::Tier;

/// The embedded queue, with each batch call's size recorded and the call made slow enough for deletes to pile up.
struct Recording {
    queue: Arc<LocalQueue>,
    batches: Mutex<Vec<usize>>,
}

#[async_trait]
impl Queue for Recording {
    async fn send(&self, body: &str) -> Result<(), QueueError> {
        self.queue.send(body).await
    }
    async fn send_batch(&self, bodies: &[String]) -> Vec<Result<(), QueueError>> {
        self.queue.send_batch(bodies).await
    }
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Message>, QueueError> {
        self.queue.receive(max, wait).await
    }
    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> Result<(), QueueError> {
        self.queue.change_visibility(receipt, timeout).await
    }
    async fn delete(&self, receipt: &str) -> Result<(), QueueError> {
        self.delete_batch(&[receipt.to_owned()]).await.remove(0)
    }
    async fn delete_batch(&self, receipts: &[String]) -> Vec<Result<(), QueueError>> {
        self.batches.lock().unwrap().push(receipts.len());
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.queue.delete_batch(receipts).await
    }
    async fn dead_letter(&self, message: &Message, reason: &str) -> Result<(), QueueError> {
        self.queue.dead_letter(message, reason).await
    }
    async fn counts(&self) -> Result<QueueCounts, QueueError> {
        self.queue.counts().await
    }
}

fn recording(dir: &std::path::Path) -> Arc<Recording> {
    let backends = LocalBackends::open(dir).unwrap();
    let queue = backends.lane_queue(Tier::Small, Priority::Normal, Duration::from_secs(30), 3);
    Arc::new(Recording { queue, batches: Mutex::new(Vec::new()) })
}

async fn received(queue: &Recording, count: usize) -> Vec<String> {
    queue.send_batch(&(0..count).map(|i| format!("m{i}")).collect::<Vec<_>>()).await;
    queue.receive(count, Duration::ZERO).await.unwrap().into_iter().map(|m| m.receipt).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deletes_share_batch_calls_and_each_gets_its_own_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let queue = recording(dir.path());
    let mut receipts = received(&queue, 60).await;
    assert_eq!(receipts.len(), 60);
    receipts.push("not a receipt".into());
    let batcher = Arc::new(DeleteBatcher::new(Arc::clone(&queue)));
    let deletes: Vec<_> = receipts
        .into_iter()
        .map(|receipt| {
            let batcher = Arc::clone(&batcher);
            tokio::spawn(async move { (receipt.clone(), batcher.delete(&receipt).await) })
        })
        .collect();
    for delete in deletes {
        let (receipt, outcome) = delete.await.unwrap();
        match receipt.as_str() {
            "not a receipt" => assert!(matches!(outcome, Err(QueueError::ReceiptExpired)), "{outcome:?}"),
            _ => assert!(outcome.is_ok(), "{receipt}: {outcome:?}"),
        }
    }
    assert_eq!(queue.counts().await.unwrap(), QueueCounts::default());
    let batches = queue.batches.lock().unwrap().clone();
    println!("61 concurrent deletes went out in {} calls: {batches:?}", batches.len());
    assert_eq!(batches.iter().sum::<usize>(), 61);
    assert!(batches.iter().all(|&size| size <= MAX_BATCH), "{batches:?}");
    assert!(batches.len() <= 61 / 4, "deletes were not batched: {batches:?}");
}

#[tokio::test]
async fn a_lone_delete_goes_out_at_once_in_its_own_call() {
    let dir = tempfile::tempdir().unwrap();
    let queue = recording(dir.path());
    let batcher = DeleteBatcher::new(Arc::clone(&queue));
    for receipt in received(&queue, 3).await {
        batcher.delete(&receipt).await.unwrap();
    }
    assert_eq!(*queue.batches.lock().unwrap(), [1, 1, 1]);
    assert_eq!(queue.counts().await.unwrap(), QueueCounts::default());
}
