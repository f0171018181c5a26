//! A received message's lease on the queue: kept hidden by a heartbeat while its request runs, handed back (now or
//! after a retry delay), or deleted.

use std::future::Future;
use std::time::Duration;

use crate::ports::{Engine, Queue, ResultStore};
use crate::worker::lanes::Lease;

use super::{Disposition, Worker};

impl<Q, S, E> Worker<Q, S, E>
where
    Q: Queue + ?Sized + 'static,
    S: ResultStore + ?Sized + 'static,
    E: Engine + ?Sized + 'static,
{
    /// Keeps the message invisible while `work` runs, renewing every third of the visibility timeout.
    pub(super) async fn with_heartbeat<T>(&self, lease: &Lease, work: impl Future<Output = T>) -> T {
        let every = self.config.visibility_timeout / 3;
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return out,
                _ = ticks.tick() => {
                    if let Err(error) = self.queue(lease).change_visibility(&lease.message.receipt, self.config.visibility_timeout).await {
                        tracing::warn!(tier = %self.config.tier, %error, "heartbeat failed");
                    }
                }
            }
        }
    }

    pub(super) async fn retry_later(&self, lease: &Lease, error: &str) -> Disposition {
        let attempt = lease.message.receive_count;
        let delay = self.config.retry_delay(attempt);
        tracing::warn!(tier = %self.config.tier, attempt, retry_in_s = delay.as_secs_f64(), %error, "transient failure; the message will be retried");
        self.set_visibility(lease, delay).await;
        Disposition::RetryLater
    }

    /// Makes the message visible again after `delay` (zero: at once).
    pub(super) async fn set_visibility(&self, lease: &Lease, delay: Duration) {
        if let Err(error) = self.queue(lease).change_visibility(&lease.message.receipt, delay).await {
            tracing::warn!(tier = %self.config.tier, %error, "could not change the message's visibility; its visibility timeout applies");
        }
    }

    pub(super) async fn delete(&self, lease: &Lease) {
        if let Err(error) = self.queue(lease).delete(&lease.message.receipt).await {
            tracing::warn!(tier = %self.config.tier, %error, "delete failed; the message may be seen again (its result is stored)");
        }
    }

    /// Hands the message back at once, for another task (or this one's successor) to run.
    pub(super) async fn release(&self, lease: &Lease) -> Disposition {
        let reason = if self.engine_lost.is_cancelled() { "engine lost" } else { "drain timeout" };
        tracing::warn!(tier = %self.config.tier, reason, "message handed back for another task");
        self.set_visibility(lease, Duration::ZERO).await;
        Disposition::Released
    }

    pub(super) fn queue(&self, lease: &Lease) -> &Q {
        self.lanes.get(lease.lane)
    }

    /// Makes messages received as the worker stopped receiving visible again at once; how many.
    pub(super) async fn hand_back_unstarted(&self, messages: Vec<Lease>) -> usize {
        if !messages.is_empty() {
            tracing::info!(tier = %self.config.tier, messages = messages.len(), "received while stopping: handing back unstarted");
        }
        for lease in &messages {
            self.set_visibility(lease, Duration::ZERO).await;
        }
        messages.len()
    }
}
