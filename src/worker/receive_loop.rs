//! The receive loop: fills free slots from a tier's lanes (high first, see `lanes`) while the engine answers, starts
//! a request run for each message, and at the end drains the runs in flight.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::contract::tier::Lanes;
use crate::ports::{Engine, MAX_MESSAGES_PER_CALL, Queue, ResultStore};
use crate::worker::assembly::{Disposition, RunParts};
use crate::worker::engine_watch::wait_until_answering;
use crate::worker::lanes::{LaneReceiver, Lease};
use crate::worker::lease::HeldMessage;
use crate::worker::request_run::RequestRun;

/// The loop's own state: the lanes it receives from and the request runs it started.
pub(super) struct ReceiveLoop<Q: Queue + ?Sized + 'static, S: ?Sized, E: ?Sized> {
    receiver: LaneReceiver<Q>,
    parts: Arc<RunParts<S, E>>,
    runs: JoinSet<Disposition>,
    /// Runs that gave their message back (engine lost, drain timeout), and messages given back unstarted.
    given_back: usize,
    /// Cancelled by shutdown, or by the engine watch when the engine is lost.
    receiving: CancellationToken,
    answering: watch::Receiver<bool>,
}

impl<Q, S, E> ReceiveLoop<Q, S, E>
where
    Q: Queue + ?Sized + 'static,
    S: ResultStore + ?Sized + 'static,
    E: Engine + ?Sized + 'static,
{
    pub(super) fn new(
        queues: Lanes<Arc<Q>>,
        parts: &Arc<RunParts<S, E>>,
        receiving: CancellationToken,
        answering: watch::Receiver<bool>,
    ) -> Self {
        let receiver = LaneReceiver::new(queues, parts.config.wait_time);
        let parts = Arc::clone(parts);
        ReceiveLoop { receiver, parts, runs: JoinSet::new(), given_back: 0, receiving, answering }
    }

    /// Receives until `receiving` is cancelled; then gives back, unstarted, whatever a receive brought after that.
    pub(super) async fn run(&mut self) {
        let tier = self.parts.config.tier;
        loop {
            self.reap_finished();
            if !wait_until_answering(&mut self.answering, &self.receiving).await {
                break;
            }
            let available = self.available();
            let free = self.receiver.unpromised(available);
            if free > 0 {
                // A zero-wait receive: let it finish, so a stop never drops messages it already took.
                let ready = self.receiver.take_ready(free).await;
                if self.receiving.is_cancelled() {
                    self.give_back_unstarted(ready.unwrap_or_default()).await;
                    break;
                }
                match ready {
                    Ok(leases) if !leases.is_empty() => {
                        self.start(leases);
                        continue;
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::warn!(%tier, %error, "receive failed; retrying in 1 s");
                        tokio::select! {
                            biased;
                            () = self.receiving.cancelled() => break,
                            () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        }
                    }
                }
            }
            let limit = &self.parts.limit;
            if available > 0 {
                self.receiver.poll_idle_lanes(free);
            } else if limit.high_waiting.load(Ordering::Relaxed) == 0 && limit.preemption().any_running() {
                // A high-priority request received now gets the next slot first, ahead of any lease waiting, or a
                // young normal or batch request's slot (see `RequestRun::wait_for_slot`). One at a time is held so.
                self.receiver.poll_high_lane();
            }
            let slots = Arc::clone(limit.slots());
            tokio::select! {
                biased;
                () = self.receiving.cancelled() => break,
                (lane, polled) = self.receiver.next_polled() => match polled {
                    Ok(leases) => self.start(leases),
                    Err(error) => tracing::warn!(%tier, %lane, %error, "long poll failed; polling again"),
                },
                Some(done) = self.runs.join_next(), if !self.runs.is_empty() => self.record(done),
                // A slot came free (the limit grew, or a request's engine call ended while it stores its result):
                // fill it now, not when a request's task next ends.
                () = slots.freed() => {}
            }
        }
        let unstarted = self.receiver.close().await;
        self.give_back_unstarted(unstarted).await;
    }

    /// Waits for every run in flight; how many messages were given back in all. After an engine loss the runs are
    /// already giving their messages back; on shutdown they may finish for the drain timeout, then the engine
    /// watch's `give_back` makes the rest give theirs back.
    pub(super) async fn drain(mut self) -> usize {
        let parts = Arc::clone(&self.parts);
        let (tier, give_back) = (parts.config.tier, parts.engine_watch.give_back());
        let unfinished = self.runs.len();
        parts.draining.cancel();
        if parts.engine_watch.is_lost() {
            tracing::warn!(%tier, in_flight = unfinished, "worker stopped receiving: giving back unfinished requests");
        } else {
            let drain_timeout_s = parts.config.drain_timeout.as_secs_f64();
            tracing::info!(%tier, in_flight = unfinished, drain_timeout_s, "worker draining: finishing requests in flight");
        }
        let drain_deadline = tokio::time::sleep(parts.config.drain_timeout);
        tokio::pin!(drain_deadline);
        loop {
            tokio::select! {
                done = self.runs.join_next() => match done {
                    Some(done) => self.record(done),
                    None => break,
                },
                () = &mut drain_deadline, if !give_back.is_cancelled() => {
                    tracing::warn!(%tier, unfinished = self.runs.len(), "drain timeout: giving the unfinished messages back to the queue");
                    give_back.cancel();
                }
            }
        }
        self.given_back
    }

    /// Slots to receive for: the free ones plus room for receiving ahead, less the leases already waiting for a
    /// slot; none while more results wait to be stored than the limit has slots.
    fn available(&self) -> usize {
        let (limit, slots) = (&self.parts.limit, self.parts.limit.slots());
        let storing = limit.storing.load(Ordering::Relaxed);
        let waiting = self.runs.len().saturating_sub(slots.in_flight() + storing);
        if storing > slots.limit() { 0 } else { (slots.free() + self.receive_ahead()).saturating_sub(waiting) }
    }

    /// Starts a run for each lease in its own task, in a free slot; a lease received beyond the free slots
    /// (received ahead, lanes answering at once, or a high-priority one while the slots are full) is checked at
    /// once (parsed, its result looked for) and then waits for a slot, as does a request that gave its slot up.
    fn start(&mut self, leases: Vec<Lease>) {
        let parts = &self.parts;
        if !leases.is_empty() {
            parts.endings.cold_start.request_received();
        }
        for lease in leases {
            let free_slot = parts.limit.slots().try_take();
            // Entered at once, so the receive loop knows a high-priority request could take this slot.
            let preemptible = (lease.preemptible && free_slot.is_some()).then(|| parts.limit.preemption().register());
            let run = RequestRun { parts: Arc::clone(parts), held: self.hold(lease) };
            self.runs.spawn(run.drive(free_slot, preemptible));
        }
    }

    fn hold(&self, lease: Lease) -> HeldMessage<Q> {
        let config = &self.parts.config;
        let queue = Arc::clone(self.receiver.queues().get(lease.lane));
        HeldMessage::new(lease, queue, config.lease.visibility_timeout, config.tier)
    }

    /// Messages to hold beyond the free slots, ready for the next slots that free: where a receive is a network
    /// round trip (SQS), as many as the limit, up to one receive's worth (`MAX_MESSAGES_PER_CALL`). Requests of like
    /// length started together end together, so a whole batch of slots can free at once: each is refilled at once,
    /// not after a receive. None on the embedded queue, where a receive takes microseconds. A high-priority request
    /// still takes the next free slot ahead of these.
    fn receive_ahead(&self) -> usize {
        let slots = self.parts.limit.slots();
        if self.receiver.queues().normal.receive_is_remote() {
            slots.limit().clamp(1, MAX_MESSAGES_PER_CALL)
        } else {
            0
        }
    }

    /// Gives back at once messages received as the worker stopped receiving.
    async fn give_back_unstarted(&mut self, leases: Vec<Lease>) {
        if !leases.is_empty() {
            tracing::info!(tier = %self.parts.config.tier, messages = leases.len(), "received while stopping: giving back unstarted");
        }
        self.given_back += leases.len();
        for lease in leases {
            self.hold(lease).give_back(Duration::ZERO).await;
        }
    }

    /// Counts a finished run; logs a panicked one (its message was given back as the run was dropped).
    fn record(&mut self, done: Result<Disposition, tokio::task::JoinError>) {
        match done {
            Ok(disposition) => self.given_back += usize::from(disposition == Disposition::GivenBack),
            Err(error) => tracing::error!(%error, "a request task panicked; its message was given back"),
        }
    }

    fn reap_finished(&mut self) {
        while let Some(done) = self.runs.try_join_next() {
            self.record(done);
        }
    }
}
