//! A received message held while its request runs: kept hidden by a heartbeat, then deleted, dead-lettered or given
//! back (at once, or after a retry delay). A held message dropped unsettled (its task panicked or was dropped) is
//! given back at once.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

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
}

impl<Q: Queue + ?Sized + 'static> HeldMessage<Q> {
    pub(super) fn new(lease: Lease, queue: Arc<Q>, visibility_timeout: Duration, tier: Tier) -> Self {
        HeldMessage { lease, queue, visibility_timeout, tier, settled: AtomicBool::new(false) }
    }

    pub(super) fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Keeps the message invisible while `work` runs, renewing every third of the visibility timeout.
    pub(super) async fn heartbeat<T>(&self, work: impl Future<Output = T>) -> T {
        let every = self.visibility_timeout / 3;
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return out,
                _ = ticks.tick() => {
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
