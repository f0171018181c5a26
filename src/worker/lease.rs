//! A received message held while its request runs: kept hidden by a heartbeat, then deleted, dead-lettered or given
//! back (at once, or after a retry delay). A held message dropped unsettled (its task panicked or was dropped) is
//! given back at once.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::contract::tier::Tier;
use crate::ports::{Queue, QueueError};
use crate::worker::lanes::Lease;

/// One received message, on the queue of its lane, until it is settled.
pub(super) struct HeldMessage<Q: Queue + ?Sized + 'static> {
    lease: Lease,
    queue: Arc<Q>,
    visibility_timeout: Duration,
    tier: Tier,
    /// Deleted, dead-lettered or given back: nothing is left to do on drop.
    settled: AtomicBool,
    /// When the message's visibility was last set (received, or a renewal asked): each heartbeat renews a third of
    /// the visibility timeout after it, however the request's phases (slot, inference, storing) cut the time.
    renewed: Mutex<Instant>,
}

impl<Q: Queue + ?Sized + 'static> HeldMessage<Q> {
    pub(super) fn new(lease: Lease, queue: Arc<Q>, visibility_timeout: Duration, tier: Tier) -> Self {
        let renewed = Mutex::new(Instant::now());
        HeldMessage { lease, queue, visibility_timeout, tier, settled: AtomicBool::new(false), renewed }
    }

    pub(super) fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Keeps the message invisible while `work` runs, renewing a third of the visibility timeout after the last
    /// renewal (at once when that is past: the phase before ran without a heartbeat).
    pub(super) async fn heartbeat<T>(&self, work: impl Future<Output = T>) -> T {
        let every = self.visibility_timeout / 3;
        tokio::pin!(work);
        loop {
            let due = *self.renewed.lock().unwrap_or_else(std::sync::PoisonError::into_inner) + every;
            tokio::select! {
                out = &mut work => return out,
                () = tokio::time::sleep_until(due) => {
                    // A failed renewal is tried again a third later, as a renewed one would be.
                    *self.renewed.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
                    if let Err(error) = self.queue.change_visibility(&self.lease.message.receipt, self.visibility_timeout).await {
                        tracing::warn!(tier = %self.tier, %error, "heartbeat failed");
                    }
                }
            }
        }
    }

    /// Gives the message back to the queue, visible again `after` this long (zero: at once, for another task).
    pub(super) async fn give_back(&self, after: Duration) {
        self.settled.store(true, Ordering::Relaxed);
        if let Err(error) = self.queue.change_visibility(&self.lease.message.receipt, after).await {
            tracing::warn!(tier = %self.tier, %error, "could not change the message's visibility; its visibility timeout applies");
        }
    }

    /// Deletes the message: its request has ended and whatever must outlive it is stored.
    pub(super) async fn delete(&self) {
        self.settled.store(true, Ordering::Relaxed);
        if let Err(error) = self.queue.delete(&self.lease.message.receipt).await {
            tracing::warn!(tier = %self.tier, %error, "delete failed; the message may be seen again (its result is stored)");
        }
    }

    /// Moves the message to the dead-letter queue with `reason`; held still when that fails.
    pub(super) async fn dead_letter(&self, reason: &str) -> Result<(), QueueError> {
        self.queue.dead_letter(&self.lease.message, reason).await?;
        self.settled.store(true, Ordering::Relaxed);
        Ok(())
    }
}

impl<Q: Queue + ?Sized + 'static> Drop for HeldMessage<Q> {
    fn drop(&mut self) {
        if self.settled.load(Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        tracing::warn!(tier = %self.tier, "a request ended without settling its message: giving it back");
        let (queue, receipt) = (Arc::clone(&self.queue), self.lease.message.receipt.clone());
        runtime.spawn(async move {
            if let Err(error) = queue.change_visibility(&receipt, Duration::ZERO).await {
                tracing::warn!(%error, "could not give the message back; its visibility timeout applies");
            }
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::HeldMessage;
    use crate::contract::tier::{Priority, Tier};
    use crate::local::LocalBackends;
    use crate::ports::Queue;
    use crate::worker::lanes::Lease;

    /// A request's phases need not all run under a heartbeat (looking for a result, marking its ending): the next
    /// heartbeat renews a third of the visibility timeout after the last renewal, at once when that is past, so a
    /// phase of most of a lease without one does not let the message lapse. On the embedded queue, in real time.
    #[tokio::test]
    async fn a_heartbeat_after_a_long_phase_without_one_renews_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let backends = LocalBackends::open(dir.path()).unwrap();
        let visibility = Duration::from_secs(6);
        let queue = backends.lane_queue(Tier::Small, Priority::Normal, visibility, 3);
        queue.send("{}").await.unwrap();
        let message = queue.receive(1, Duration::ZERO).await.unwrap().pop().expect("the message");
        let lease = Lease { lane: Priority::Normal, message, preemptible: false };
        let held = Arc::new(HeldMessage::new(lease, Arc::clone(&queue), visibility, Tier::Small));
        let holder = Arc::clone(&held);
        let request = tokio::spawn(async move {
            // 5 s without a heartbeat, then 3 s under one: the old schedule (a third after its own start) renewed
            // first at 7 s, after the message lapsed at 6 s.
            tokio::time::sleep(Duration::from_secs(5)).await;
            holder.heartbeat(tokio::time::sleep(Duration::from_secs(3))).await;
        });
        tokio::time::sleep(Duration::from_millis(6_500)).await;
        let stolen = queue.receive(1, Duration::ZERO).await.unwrap().len();
        assert_eq!(stolen, 0, "the message lapsed while it was held");
        request.await.unwrap();
        held.delete().await;
    }
}
