//! The share that gives the normal lane its slots.

use super::{NORMAL_SHARE, Share};

#[test]
fn the_share_gives_normal_one_slot_in_five_and_nothing_it_cannot_use() {
    assert_eq!(NORMAL_SHARE, 5);
    let mut share = Share::default();
    let mut order = String::new();
    for _ in 0..10 {
        let high = share.high_allowance(1);
        order.push(if high == 1 { 'H' } else { 'N' });
        share.record(high, 1 - high, 0);
    }
    assert_eq!(order, "HHHHNHHHHN", "one slot at a time");
    let mut share = Share::default();
    let mut normals = 0;
    for _ in 0..10 {
        let high = share.high_allowance(4);
        normals += 4 - high;
        share.record(high, 4 - high, 0);
    }
    assert_eq!(normals, 8, "four slots freed at a time: still one in five of 40 starts (not one in eight)");
    let fresh = Share::default();
    assert_eq!((fresh.high_allowance(10), fresh.high_allowance(4), fresh.high_allowance(5)), (8, 4, 4));
    let mut idle_normal = Share::default();
    idle_normal.record(40, 0, 0);
    assert_eq!(idle_normal.high_allowance(10), 8, "a normal lane without work is owed nothing for the past");
    assert_eq!(idle_normal.high_allowance(1), 0, "…but its next slot");
}

/// A long poll on the embedded queue that took a message just before the worker stopped receiving: closing the
/// receiver returns that message for the worker to hand back, instead of dropping it invisible.
#[tokio::test]
async fn closing_returns_what_a_finished_poll_brought() {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::contract::tier::{Priority, Tier};
    use crate::local::LocalBackends;
    use crate::ports::Queue;

    use super::LaneReceiver;

    let dir = tempfile::tempdir().unwrap();
    let backends = LocalBackends::open(dir.path()).unwrap();
    let lanes = backends.tier_lanes(Tier::Small, Duration::from_secs(300), 3).map(|q| q as Arc<dyn Queue>);
    let mut receiver = LaneReceiver::new(lanes.clone(), Duration::from_secs(20));
    receiver.poll_idle_lanes(1);
    lanes.get(Priority::Normal).send("taken by the poll").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let brought = receiver.close().await;
    assert_eq!(brought.len(), 1, "the message the poll took comes back to the caller");
    assert_eq!(brought[0].message.body, "taken by the poll");
}

/// The batch lane gets only the slots the other lanes leave: with work waiting in every lane, free slots go to the
/// high and normal lanes first, and batch work starts once they run short.
#[tokio::test]
async fn the_batch_lane_gets_only_what_the_other_lanes_leave() {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::contract::tier::{Priority, Tier};
    use crate::local::LocalBackends;
    use crate::ports::Queue;

    use super::LaneReceiver;

    let dir = tempfile::tempdir().unwrap();
    let backends = LocalBackends::open(dir.path()).unwrap();
    let lanes = backends.tier_lanes(Tier::Small, Duration::from_secs(300), 3).map(|q| q as Arc<dyn Queue>);
    for lane in Priority::ALL {
        for i in 0..3 {
            lanes.get(lane).send(&format!("{lane} {i}")).await.unwrap();
        }
    }
    let mut receiver = LaneReceiver::new(lanes.clone(), Duration::from_secs(20));
    let started: Vec<Priority> = receiver.take_ready(5).await.unwrap().iter().map(|lease| lease.lane).collect();
    assert!(!started.contains(&Priority::Batch), "five slots, six interactive requests waiting: {started:?}");
    let started: Vec<Priority> = receiver.take_ready(4).await.unwrap().iter().map(|lease| lease.lane).collect();
    assert_eq!(started.iter().filter(|&&lane| lane == Priority::Batch).count(), 3, "{started:?}");
}

/// A lane whose receive fails (an outage, or a queue the role may not read) does not cost what the other lanes
/// brought in the same round: those messages start; the error comes back only when nothing was received.
#[tokio::test]
async fn a_failing_lane_does_not_drop_what_the_other_lanes_brought() {
    use std::sync::Arc;
    use std::time::Duration;

    use async_trait::async_trait;

    use crate::contract::tier::Tier;
    use crate::local::LocalBackends;
    use crate::ports::{Message, Queue, QueueCounts, QueueError};

    use super::LaneReceiver;

    struct Failing;

    #[async_trait]
    impl Queue for Failing {
        async fn send(&self, _body: &str) -> Result<(), QueueError> {
            Err(QueueError::unavailable("down"))
        }
        async fn send_many(&self, bodies: &[String]) -> Vec<Result<(), QueueError>> {
            bodies.iter().map(|_| Err(QueueError::unavailable("down"))).collect()
        }
        async fn receive(&self, _max: usize, _wait: Duration) -> Result<Vec<Message>, QueueError> {
            Err(QueueError::unavailable("down"))
        }
        async fn change_visibility(&self, _receipt: &str, _timeout: Duration) -> Result<(), QueueError> {
            Err(QueueError::unavailable("down"))
        }
        async fn delete(&self, _receipt: &str) -> Result<(), QueueError> {
            Err(QueueError::unavailable("down"))
        }
        async fn dead_letter(&self, _message: &Message, _reason: &str) -> Result<(), QueueError> {
            Err(QueueError::unavailable("down"))
        }
        async fn counts(&self) -> Result<QueueCounts, QueueError> {
            Err(QueueError::unavailable("down"))
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let backends = LocalBackends::open(dir.path()).unwrap();
    let mut lanes = backends.tier_lanes(Tier::Small, Duration::from_secs(300), 3).map(|q| q as Arc<dyn Queue>);
    lanes.batch = Arc::new(Failing);
    lanes.high.send("urgent").await.unwrap();
    let mut receiver = LaneReceiver::new(lanes.clone(), Duration::from_secs(20));
    let started = receiver.take_ready(3).await.unwrap();
    assert_eq!(started.len(), 1, "the high message is started, not dropped invisible");
    assert_eq!(started[0].message.body, "urgent");
    assert!(receiver.take_ready(3).await.is_err(), "nothing received: the lane's error");
}

/// No receive that cannot bring anything: a quick round asks nothing of a lane whose long poll is pending or that
/// its last long poll drained (it brought fewer than it asked for); the lane's next long poll brings what came
/// meanwhile, and a poll that brought all it asked for leaves its lane to the quick round.
#[tokio::test]
async fn a_quick_round_skips_lanes_a_pending_or_draining_long_poll_covers() {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::contract::tier::{Priority, Tier};
    use crate::local::LocalBackends;
    use crate::ports::Queue;

    use super::LaneReceiver;

    let dir = tempfile::tempdir().unwrap();
    let backends = LocalBackends::open(dir.path()).unwrap();
    let lanes = backends.tier_lanes(Tier::Small, Duration::from_secs(300), 3).map(|q| q as Arc<dyn Queue>);
    let mut receiver = LaneReceiver::new(lanes.clone(), Duration::from_secs(20));
    receiver.poll_idle_lanes(9);
    let normal = lanes.get(Priority::Normal);
    normal.send("first").await.unwrap();
    let (lane, brought) = receiver.next_polled().await;
    assert_eq!((lane, brought.unwrap().len()), (Priority::Normal, 1), "one of the three it asked for: drained");
    normal.send("second").await.unwrap();
    lanes.get(Priority::High).send("high").await.unwrap();
    let quick = receiver.take_ready(5).await.unwrap();
    assert!(quick.is_empty(), "high's poll is pending, normal is drained, batch's poll is pending: {quick:?}");
    let (lane, brought) = receiver.next_polled().await;
    assert_eq!((lane, brought.unwrap().len()), (Priority::High, 1), "the pending poll brings what came");
    receiver.poll_idle_lanes(5);
    let (lane, brought) = tokio::time::timeout(Duration::from_secs(5), receiver.next_polled()).await.unwrap();
    let brought = brought.unwrap();
    assert_eq!((lane, brought[0].message.body.as_str()), (Priority::Normal, "second"), "its next poll looks again");
    drop(receiver.close().await);
}
