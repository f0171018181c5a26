//! Priority lanes: each tier's high, normal and batch queue, the share that fills free slots from the high lane
//! first without starving the normal one, and the receiver that polls the lanes for the worker.
//!
//! # How free slots are filled
//!
//! - **Quick round.** For `n` free slots the receiver asks the high lane for all of them but the normal lane's due
//!   share, then the normal lane for whatever is left, then the high lane again for what the normal lane could not
//!   fill. No call waits, so no slot stays free while any lane holds a visible message.
//! - **The share.** While the high and normal lanes both have work, at least one slot in [`NORMAL_SHARE`] goes to
//!   the normal lane: the receiver counts the high starts since the last normal one, and the normal lane is due
//!   one slot for every `NORMAL_SHARE` slots counted (with one slot free at a time: high, high, high, high,
//!   normal, …). A normal lane without work owes nothing: the high lane then takes every slot.
//! - **The batch lane** gets what both other lanes leave: interactive requests overtake batch work.
//! - **Long polls.** Only when every lane looked empty does the receiver long-poll, and then every lane at once,
//!   each in its own task: a lane that answers is served at once and polled again while the others' polls are
//!   still waiting, so no lane waits behind another's long poll.
//! - **No receive that cannot bring anything.** A quick round skips a lane whose long poll is pending (that poll
//!   answers the moment a message arrives) and a lane whose last long poll brought fewer messages than it asked
//!   for (it had no more then; its next long poll looks again). At a steady trickle of requests a worker so makes
//!   about one receive per request, the long poll that brings it, instead of a quick round of every lane after
//!   each start and each end.
//! - **Slots.** A long poll asks for the lane's part of the free slots, at least one. When lanes answer
//!   together while only one slot was free, the worker holds the extra message (its visibility renewed) until
//!   the next slot frees: at most one message per lane beyond the free slots, and never more requests in the
//!   engine than slots.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::{JoinError, JoinHandle};

use crate::contract::tier::{Lanes, Priority};
use crate::ports::{MAX_MESSAGES_PER_CALL, Message, Queue, QueueError};

/// Of every this many slots filled while the high and normal lanes both have work, at least one goes to normal.
pub(crate) const NORMAL_SHARE: usize = 5;

/// A message received from one lane; its receipt is valid on that lane's queue only.
#[derive(Debug, Clone)]
pub(crate) struct Lease {
    pub(crate) lane: Priority,
    pub message: Message,
    /// Whether a high-priority request may take this one's slot (see `preemption`): a normal or batch message
    /// received while the high lane had nothing for it. One started by the normal lane's share is not, so the share
    /// holds under high-priority load.
    pub(crate) preemptible: bool,
}

/// Counts high-lane starts since the last normal one, to give the normal lane its share.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Share {
    /// High-lane starts the normal lane has not yet had its slot for: each normal start settles
    /// `NORMAL_SHARE - 1` of them, so slots freed several at a time keep the same one-in-five share.
    high_unpaid: usize,
}

impl Share {
    /// How many of `free` slots the high lane may take; the rest are the normal lane's due.
    pub(crate) fn high_allowance(&self, free: usize) -> usize {
        let normal_due = ((self.high_unpaid + free) / NORMAL_SHARE).min(free);
        free - normal_due
    }

    /// Records one round: `high` started first, then `normal`, then `high_after` when the normal lane ran short.
    pub(crate) fn record(&mut self, high: usize, normal: usize, high_after: usize) {
        let unpaid = (self.high_unpaid + high + high_after).saturating_sub(normal * (NORMAL_SHARE - 1));
        // A normal lane without work is owed nothing beyond its next slot.
        self.high_unpaid = if normal > 0 { unpaid } else { unpaid.min(NORMAL_SHARE - 1) };
    }
}

/// A lane's pending long poll and how many messages it asked for.
struct Poll {
    ask: usize,
    task: JoinHandle<Result<Vec<Message>, QueueError>>,
}

/// Receives from every lane of a tier: quick rounds by the share, long polls when all look empty.
pub(crate) struct LaneReceiver<Q: ?Sized> {
    lanes: Lanes<Arc<Q>>,
    wait: Duration,
    share: Share,
    polls: Lanes<Option<Poll>>,
    /// Lanes whose last long poll brought fewer messages than it asked for: none left then, so no quick receive.
    drained: Lanes<bool>,
}

impl<Q: ?Sized> Drop for LaneReceiver<Q> {
    /// A long poll left running would receive messages nobody starts.
    fn drop(&mut self) {
        for poll in self.polls.all().into_iter().flatten() {
            poll.task.abort();
        }
    }
}

impl<Q: Queue + ?Sized + 'static> LaneReceiver<Q> {
    pub(crate) fn new(lanes: Lanes<Arc<Q>>, wait: Duration) -> Self {
        LaneReceiver {
            lanes,
            wait,
            share: Share::default(),
            polls: Lanes::from_fn(|_| None),
            drained: Lanes::from_fn(|_| false),
        }
    }

    /// Each lane's queue, which a message it brought is settled on.
    pub(crate) fn queues(&self) -> &Lanes<Arc<Q>> {
        &self.lanes
    }

    /// Free slots not promised to a pending long poll.
    pub(crate) fn unpromised(&self, available: usize) -> usize {
        let promised: usize = self.polls.all().into_iter().flatten().map(|p| p.ask).sum();
        available.saturating_sub(promised)
    }

    /// The quick round for `free` slots (see the module documentation); waits for nothing. A lane that fails does
    /// not cost what earlier lanes of the round brought: those are returned (the failure is logged), and the error
    /// only when nothing was received.
    pub(crate) async fn take_ready(&mut self, free: usize) -> Result<Vec<Lease>, QueueError> {
        let mut taken = Vec::new();
        match self.fill(free, &mut taken).await {
            Err(error) if taken.is_empty() => Err(error),
            Err(error) => {
                tracing::warn!(%error, started = taken.len(), "a lane's receive failed; starting what the others brought");
                Ok(taken)
            }
            Ok(()) => Ok(taken),
        }
    }

    /// The quick round's receives, each lane's messages added to `taken` as they come.
    async fn fill(&mut self, free: usize, taken: &mut Vec<Lease>) -> Result<(), QueueError> {
        let high_ask = self.share.high_allowance(free);
        let high = self.take(Priority::High, high_ask, taken).await?;
        // Normal and batch messages of a round in which the high lane ran short may give their slot up.
        let mut high_ran_short = high < high_ask;
        let normal = match self.take(Priority::Normal, free - high, taken).await {
            Ok(normal) => normal,
            Err(error) => {
                self.share.record(high, 0, 0);
                return Err(error);
            }
        };
        let left = free - high - normal;
        let high_after = if left > 0 && !high_ran_short {
            let high_after = self.take(Priority::High, left, taken).await;
            high_ran_short = high_after.as_ref().is_ok_and(|&after| after < left);
            high_after
        } else {
            Ok(0)
        };
        self.share.record(high, normal, *high_after.as_ref().unwrap_or(&0));
        let high_after = high_after?;
        self.take(Priority::Batch, left - high_after, taken).await?;
        for lease in taken.iter_mut().filter(|lease| lease.lane != Priority::High) {
            lease.preemptible = high_ran_short;
        }
        Ok(())
    }

    /// Receives up to `max` messages of `lane` at once into `taken`; how many came. None are asked of a lane whose
    /// long poll is pending or that its last long poll drained (see the module documentation).
    async fn take(&self, lane: Priority, max: usize, taken: &mut Vec<Lease>) -> Result<usize, QueueError> {
        if self.polls.get(lane).is_some() || *self.drained.get(lane) {
            return Ok(0);
        }
        let messages = self.receive_now(lane, max).await?;
        let count = messages.len();
        taken.extend(leases(lane, messages));
        Ok(count)
    }

    /// Starts a long poll on every lane that has none pending; `free` unpromised slots are split between them,
    /// each asking for at least one message.
    pub(crate) fn poll_idle_lanes(&mut self, free: usize) {
        self.poll_idle(&Priority::ALL, free);
    }

    /// Long-polls the high lane for one message while no slot is free (unless a poll is pending): a high-priority
    /// request may take a normal or batch request's slot (see `preemption`).
    pub(crate) fn poll_high_lane(&mut self) {
        self.poll_idle(&[Priority::High], 1);
    }

    fn poll_idle(&mut self, lanes: &[Priority], free: usize) {
        let idle: Vec<Priority> = lanes.iter().copied().filter(|&lane| self.polls.get(lane).is_none()).collect();
        let mut remaining = free;
        for (i, &lane) in idle.iter().enumerate() {
            let part = remaining.div_ceil(idle.len() - i);
            remaining -= part;
            let ask = part.clamp(1, MAX_MESSAGES_PER_CALL);
            let queue = Arc::clone(self.lanes.get(lane));
            let wait = self.wait;
            let task = tokio::spawn(async move {
                let received = queue.receive(ask, wait).await;
                if received.is_err() {
                    // A failing queue is asked again after a pause, not in a tight loop.
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                received
            });
            *self.polls.get_mut(lane) = Some(Poll { ask, task });
            *self.drained.get_mut(lane) = false;
        }
    }

    /// The next long poll to answer, with its lane; never resolves while none is pending. Cancel-safe: a poll
    /// not yet answered keeps running.
    pub(crate) async fn next_polled(&mut self) -> (Priority, Result<Vec<Lease>, QueueError>) {
        let (lane, joined) = tokio::select! {
            joined = join(&mut self.polls.high) => (Priority::High, joined),
            joined = join(&mut self.polls.normal) => (Priority::Normal, joined),
            joined = join(&mut self.polls.batch) => (Priority::Batch, joined),
        };
        let asked = self.polls.get_mut(lane).take().map_or(0, |poll| poll.ask);
        let received = joined.unwrap_or_else(|e| Err(QueueError::caused("long-poll task failed", e)));
        *self.drained.get_mut(lane) = received.as_ref().is_ok_and(|messages| messages.len() < asked);
        if let Ok(messages) = &received {
            match lane {
                Priority::High => self.share.record(messages.len(), 0, 0),
                Priority::Normal => self.share.record(0, messages.len(), 0),
                Priority::Batch => {}
            }
        }
        (lane, received.map(|messages| leases(lane, messages).collect()))
    }

    /// Ends the pending long polls. A poll on a queue whose receive is safe to drop is aborted; any other poll is
    /// let finish (at most the long-poll wait). What a poll brought before it ended (an aborted one may have
    /// finished first) is returned for the caller to give back.
    pub(crate) async fn close(&mut self) -> Vec<Lease> {
        let mut brought = Vec::new();
        for lane in Priority::ALL {
            let Some(poll) = self.polls.get_mut(lane).take() else { continue };
            if self.lanes.get(lane).receive_is_cancel_safe() {
                poll.task.abort();
            }
            // A poll that finished before the abort took its messages: they are given back, not dropped.
            if let Ok(Ok(messages)) = poll.task.await {
                brought.extend(leases(lane, messages));
            }
        }
        brought
    }

    async fn receive_now(&self, lane: Priority, max: usize) -> Result<Vec<Message>, QueueError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        self.lanes.get(lane).receive(max.min(MAX_MESSAGES_PER_CALL), Duration::ZERO).await
    }
}

/// Leases of `lane`; a normal or batch one may give its slot up (the high lane was idle when it came by long poll).
fn leases(lane: Priority, messages: Vec<Message>) -> impl Iterator<Item = Lease> {
    messages.into_iter().map(move |message| Lease { lane, message, preemptible: lane != Priority::High })
}

/// Waits for a lane's pending poll; never resolves when there is none.
async fn join(poll: &mut Option<Poll>) -> Result<Result<Vec<Message>, QueueError>, JoinError> {
    match poll {
        Some(poll) => (&mut poll.task).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
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
    /// receiver returns that message for the worker to give back, instead of dropping it invisible.
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
}
