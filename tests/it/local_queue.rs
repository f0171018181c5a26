//! The embedded queue keeps the SQS semantics the worker relies on, across reopenings of its file.

use std::time::Duration;

use gpuinfer::{LocalBackends, Priority, Queue, QueueCounts, QueueError, Tier};

fn open(
    dir: &std::path::Path,
    visibility: Duration,
    max_receive_count: u32,
) -> (LocalBackends, std::sync::Arc<gpuinfer::LocalQueue>) {
    let backends = LocalBackends::open(dir).unwrap();
    let queue = backends.lane_queue(Tier::Small, Priority::Normal, visibility, max_receive_count);
    (backends, queue)
}

#[tokio::test]
async fn receive_hides_messages_until_the_visibility_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (_b, queue) = open(dir.path(), Duration::from_millis(300), 5);
    for i in 0..3 {
        queue.send(&format!("m{i}")).await.unwrap();
    }
    let first = queue.receive(2, Duration::ZERO).await.unwrap();
    assert_eq!(first.iter().map(|m| m.body.as_str()).collect::<Vec<_>>(), ["m0", "m1"]);
    assert!(first.iter().all(|m| m.receive_count == 1 && m.sent_at_ms > 0));
    assert_eq!(queue.counts().await.unwrap(), QueueCounts { visible: 1, in_flight: 2, delayed: 0 });
    let rest = queue.receive(10, Duration::ZERO).await.unwrap();
    assert_eq!(rest.len(), 1);
    assert!(queue.receive(10, Duration::ZERO).await.unwrap().is_empty());
    tokio::time::sleep(Duration::from_millis(350)).await;
    let again = queue.receive(10, Duration::ZERO).await.unwrap();
    assert_eq!(again.len(), 3);
    assert!(again.iter().all(|m| m.receive_count == 2));
}

/// In paused time, so the waits are exact and cost no real time.
#[tokio::test(start_paused = true)]
async fn long_poll_wakes_on_send_and_returns_empty_after_the_wait() {
    let dir = tempfile::tempdir().unwrap();
    let (_b, queue) = open(dir.path(), Duration::from_secs(30), 3);
    let started = tokio::time::Instant::now();
    assert!(queue.receive(1, Duration::from_millis(300)).await.unwrap().is_empty());
    assert_eq!(started.elapsed(), Duration::from_millis(300), "an empty long poll lasts its whole wait");

    let sender = std::sync::Arc::clone(&queue);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        sender.send("late").await.unwrap();
    });
    let started = tokio::time::Instant::now();
    let got = queue.receive(1, Duration::from_secs(10)).await.unwrap();
    assert_eq!(got[0].body, "late");
    assert_eq!(started.elapsed(), Duration::from_millis(100), "woken by the send, not the wait");
}

#[tokio::test]
async fn change_visibility_extends_or_gives_back_and_stale_receipts_fail() {
    let dir = tempfile::tempdir().unwrap();
    let (_b, queue) = open(dir.path(), Duration::from_millis(200), 5);
    queue.send("m").await.unwrap();
    let m = queue.receive(1, Duration::ZERO).await.unwrap().remove(0);
    queue.change_visibility(&m.receipt, Duration::from_secs(30)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(queue.receive(1, Duration::ZERO).await.unwrap().is_empty(), "extended past the original timeout");
    queue.change_visibility(&m.receipt, Duration::ZERO).await.unwrap();
    let again = queue.receive(1, Duration::ZERO).await.unwrap().remove(0);
    assert_eq!(again.receive_count, 2);
    assert!(matches!(queue.change_visibility(&m.receipt, Duration::ZERO).await, Err(QueueError::ReceiptExpired)));
    queue.delete(&again.receipt).await.unwrap();
    assert_eq!(queue.counts().await.unwrap(), QueueCounts::default());
}

#[tokio::test]
async fn messages_move_to_the_dead_letter_queue_after_max_receive_count() {
    let dir = tempfile::tempdir().unwrap();
    let (backends, queue) = open(dir.path(), Duration::ZERO, 3);
    queue.send("poison").await.unwrap();
    for attempt in 1..=3 {
        let got = queue.receive(1, Duration::ZERO).await.unwrap();
        assert_eq!(got[0].receive_count, attempt);
    }
    assert!(queue.receive(1, Duration::ZERO).await.unwrap().is_empty(), "the fourth receive redrives instead");
    let dead = backends.dead_letter_queue().peek_all().unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].0, "poison");
    assert!(dead[0].1.as_deref().unwrap().contains("maxReceiveCount"));
}

#[tokio::test]
async fn dead_letter_records_the_reason_and_removes_the_message() {
    let dir = tempfile::tempdir().unwrap();
    let (backends, queue) = open(dir.path(), Duration::from_secs(30), 3);
    queue.send("{bad").await.unwrap();
    let m = queue.receive(1, Duration::ZERO).await.unwrap().remove(0);
    queue.dead_letter(&m, "body: not valid JSON").await.unwrap();
    assert_eq!(queue.counts().await.unwrap(), QueueCounts::default());
    assert_eq!(
        backends.dead_letter_queue().peek_all().unwrap(),
        [("{bad".to_string(), Some("body: not valid JSON".to_string()))]
    );
}

#[tokio::test]
async fn messages_survive_closing_and_reopening_the_database() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_b, queue) = open(dir.path(), Duration::from_millis(100), 3);
        queue.send("kept").await.unwrap();
        queue.send("in flight").await.unwrap();
        queue.receive(1, Duration::ZERO).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    let (_b, queue) = open(dir.path(), Duration::from_millis(100), 3);
    let mut bodies: Vec<String> =
        queue.receive(10, Duration::ZERO).await.unwrap().into_iter().map(|m| m.body).collect();
    bodies.sort();
    assert_eq!(bodies, ["in flight", "kept"]);
}

#[tokio::test]
async fn a_message_given_back_queues_behind_those_already_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let (_b, queue) = open(dir.path(), Duration::from_secs(30), 5);
    for i in 0..3 {
        queue.send(&format!("m{i}")).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    let first = queue.receive(1, Duration::ZERO).await.unwrap();
    queue.change_visibility(&first[0].receipt, Duration::ZERO).await.unwrap();
    let order: Vec<String> = queue.receive(10, Duration::ZERO).await.unwrap().into_iter().map(|m| m.body).collect();
    assert_eq!(order, ["m1", "m2", "m0"]);
}

/// The data directory holds prompts and results: one gpuinfer creates is its owner's alone.
#[cfg(unix)]
#[test]
fn a_data_directory_it_creates_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("data");
    let _backends = LocalBackends::open(&dir).unwrap();
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
}

/// A prompt does not outlive its message: once deleted, its bytes are in neither the database file nor its
/// write-ahead log after the queue next comes up empty.
#[tokio::test]
async fn a_deleted_message_leaves_no_trace_of_its_body_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let (_b, queue) = open(dir.path(), Duration::from_secs(30), 3);
    let secret = "the-prompt-nobody-should-find-7f3a9c";
    queue.send(secret).await.unwrap();
    queue.send("another message still queued").await.unwrap();
    let received = queue.receive(1, Duration::ZERO).await.unwrap();
    queue.delete(&received[0].receipt).await.unwrap();
    let on_disk = || {
        ["queue.db", "queue.db-wal"]
            .iter()
            .filter_map(|file| std::fs::read(dir.path().join(file)).ok())
            .any(|bytes| bytes.windows(secret.len()).any(|w| w == secret.as_bytes()))
    };
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let rest = queue.receive(10, Duration::ZERO).await.unwrap();
    assert_eq!(rest.len(), 1, "the other message is still there");
    assert!(queue.receive(10, Duration::ZERO).await.unwrap().is_empty());
    assert!(!on_disk(), "the deleted message's body is still on disk");
}

/// A `gpuinfer dev` killed with messages leased leaves them invisible for their whole visibility timeout; the next
/// one, holding the data directory's lock, takes them back at once: every lane's leased messages are visible again,
/// their receive counts kept (a poison message still reaches the dead-letter queue), nothing else moved.
#[tokio::test]
async fn a_restarted_dev_takes_back_the_leases_of_the_one_that_stopped() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (backends, queue) = open(dir.path(), Duration::from_secs(300), 5);
        let high = backends.lane_queue(Tier::Large, Priority::High, Duration::from_secs(300), 5);
        for body in ["leased", "waiting"] {
            queue.send(body).await.unwrap();
        }
        high.send("leased-high").await.unwrap();
        assert_eq!(queue.receive(1, Duration::ZERO).await.unwrap()[0].body, "leased");
        assert_eq!(high.receive(1, Duration::ZERO).await.unwrap().len(), 1);
    }
    let (backends, queue) = open(dir.path(), Duration::from_secs(300), 5);
    assert_eq!(queue.counts().await.unwrap(), QueueCounts { visible: 1, in_flight: 1, delayed: 0 }, "the lease holds");
    assert_eq!(backends.take_back_leases().unwrap(), 2, "one a lane");
    let again = queue.receive(10, Duration::ZERO).await.unwrap();
    let mut bodies: Vec<(&str, u32)> = again.iter().map(|m| (m.body.as_str(), m.receive_count)).collect();
    bodies.sort_unstable();
    assert_eq!(bodies, [("leased", 2), ("waiting", 1)]);
    let high = backends.lane_queue(Tier::Large, Priority::High, Duration::from_secs(300), 5);
    assert_eq!(high.receive(10, Duration::ZERO).await.unwrap()[0].receive_count, 2);
    assert_eq!(
        backends.take_back_leases().unwrap(),
        3,
        "what is leased now is this process's own only by the caller's word"
    );
}
