//! Deletes go out in calls while earlier ones are on the wire, each caller gets its own outcome, and a lone
//! delete goes out at once. The many-message call here deletes from the embedded queue, slowly, like a network call.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use gpuinfer::{
    DeleteMany, LocalBackends, LocalQueue, MAX_MESSAGES_PER_CALL, Priority, Queue, QueueCounts, QueueError,
    SharedDeletes, Tier,
};

/// Deletes from the embedded queue, 20 ms per call, recording each call's size.
struct SlowDeletes {
    queue: Arc<LocalQueue>,
    calls: Arc<Mutex<Vec<usize>>>,
}

#[async_trait]
impl DeleteMany for SlowDeletes {
    async fn delete_many(&self, receipts: &[String]) -> Vec<Result<(), QueueError>> {
        self.calls.lock().unwrap().push(receipts.len());
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut outcomes = Vec::new();
        for receipt in receipts {
            outcomes.push(self.queue.delete(receipt).await);
        }
        outcomes
    }
}

/// A queue holding `count` received messages, and a deletes deleting from it.
async fn received(
    dir: &std::path::Path,
    count: usize,
) -> (Arc<LocalQueue>, Vec<String>, SharedDeletes<SlowDeletes>, Arc<Mutex<Vec<usize>>>) {
    let backends = LocalBackends::open(dir).unwrap();
    let queue = backends.lane_queue(Tier::Small, Priority::Normal, Duration::from_secs(30), 3);
    queue.send_many(&(0..count).map(|i| format!("m{i}")).collect::<Vec<_>>()).await;
    let receipts = queue.receive(count, Duration::ZERO).await.unwrap().into_iter().map(|m| m.receipt).collect();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let deletes = SharedDeletes::new(SlowDeletes { queue: Arc::clone(&queue), calls: Arc::clone(&calls) });
    (queue, receipts, deletes, calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deletes_share_many_message_calls_and_each_gets_its_own_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let (queue, mut receipts, deletes, calls) = received(dir.path(), 60).await;
    assert_eq!(receipts.len(), 60);
    receipts.push("not a receipt".into());
    let deletes = Arc::new(deletes);
    let deletes: Vec<_> = receipts
        .into_iter()
        .map(|receipt| {
            let deletes = Arc::clone(&deletes);
            tokio::spawn(async move { (receipt.clone(), deletes.delete(&receipt).await) })
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
    let calls = calls.lock().unwrap().clone();
    println!("61 concurrent deletes went out in {} calls: {calls:?}", calls.len());
    assert_eq!(calls.iter().sum::<usize>(), 61);
    assert!(calls.iter().all(|&size| size <= MAX_MESSAGES_PER_CALL), "{calls:?}");
    assert!(calls.len() <= 61 / 4, "deletes did not share calls: {calls:?}");
}

#[tokio::test]
async fn a_lone_delete_goes_out_at_once_in_its_own_call() {
    let dir = tempfile::tempdir().unwrap();
    let (queue, receipts, deletes, calls) = received(dir.path(), 3).await;
    for receipt in receipts {
        deletes.delete(&receipt).await.unwrap();
    }
    assert_eq!(*calls.lock().unwrap(), [1, 1, 1]);
    assert_eq!(queue.counts().await.unwrap(), QueueCounts::default());
}
