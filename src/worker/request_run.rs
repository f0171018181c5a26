//! One request's run: its message read and checked, the engine called under a heartbeat while cancels are watched
//! for, and what its answer (or its failure) becomes.

use std::sync::atomic::Ordering;
use std::time::Instant;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use crate::contract::outcome::{ErrorCode, Processing, ResultDocument};
use crate::contract::request::{InferenceRequest, Intake};
use crate::contract::request_id::RequestId;
use crate::ports::{Completion, Engine, EngineError, Message, Queue, ResultStore};
use crate::worker::cancel_watch;
use crate::worker::lanes::Lease;
use crate::worker::preemption::Preemptible;
use crate::worker::slots::Slot;

use super::{Disposition, Gauged, Worker, asked_for_slot};

impl<Q, S, E> Worker<Q, S, E>
where
    Q: Queue + ?Sized + 'static,
    S: ResultStore + ?Sized + 'static,
    E: Engine + ?Sized + 'static,
{
    /// Reads a received message: the request to run, or how the message ended (malformed: dead-lettered; a
    /// document already stored: deleted). Never panics on bad input.
    pub(super) async fn prepare(&self, lease: &Lease) -> Result<InferenceRequest, Disposition> {
        let tier = self.config.tier;
        let message = &lease.message;
        let sent_at = DateTime::from_timestamp_millis(message.sent_at_ms).unwrap_or_else(Utc::now);
        let request = match InferenceRequest::parse(message.body.as_bytes(), Intake::Queue(sent_at)) {
            Ok(request) => request,
            Err(error) => {
                let reason = error.to_string();
                tracing::warn!(%tier, lane = %lease.lane, bytes = message.body.len(), %reason, "malformed message; sending to the dead-letter queue");
                if let Err(e) = self.queue(lease).dead_letter(message, &reason).await {
                    tracing::warn!(%tier, error = %e, "dead-letter failed; the message will come back");
                    return Err(Disposition::RetryLater);
                }
                return Err(Disposition::DeadLettered);
            }
        };
        match self.ended_already(lease, &request).await {
            Some(ended) => Err(ended),
            None => Ok(request),
        }
    }

    /// How the message ends when a document (a result, or a cancel) is stored for its request already: checked
    /// before the request first reaches the engine, and again before it reaches it after waiting for a slot (it
    /// may have been canceled meanwhile). None: run it.
    pub(super) async fn ended_already(&self, lease: &Lease, request: &InferenceRequest) -> Option<Disposition> {
        let (id, tier) = (request.request_id, self.config.tier);
        match self.store.exists(id).await {
            Ok(true) => {
                tracing::info!(request_id = %id, %tier, "a document (result or cancel) is already stored; deleting the message");
                if let Err(why) = self.mark_ending(request, None).await {
                    tracing::warn!(request_id = %id, %tier, why, "the message is kept");
                    return Some(Disposition::RetryLater);
                }
                self.delete(lease).await;
                Some(Disposition::AlreadyDone)
            }
            Ok(false) => None,
            // Only a shortcut: the conditional write keeps a first result from being replaced anyway.
            Err(error) => {
                tracing::warn!(request_id = %id, %tier, %error, "cannot tell whether a result exists; running the request");
                None
            }
        }
    }

    /// Runs a prepared request to the end: deadline, inference in `slot` (given back as the engine answers, so the
    /// next request starts while this one stores its result), result, delete. None when it gave its slot up before
    /// the engine answered (only if `preemptible`; then it waits for another).
    pub(super) async fn run_request(
        &self,
        lease: &Lease,
        request: &InferenceRequest,
        slot: Slot,
        preemptible: Option<Preemptible>,
        cancels: &mut watch::Receiver<u64>,
    ) -> Option<Disposition> {
        let started = Instant::now();
        let (tier, id, message) = (self.config.tier, request.request_id, &lease.message);
        // Measured now, as processing starts: the time the message waited, not the time it took.
        let queue_wait_ms = queue_wait_ms(message);
        let processing = |started: Instant| Processing {
            request_id: id,
            tier,
            task_arn: self.config.task_arn.clone(),
            processing_time_ms: started.elapsed().as_millis() as u64,
            queue_wait_ms,
            attempts: message.receive_count,
        };
        if let Some(deadline) = request.deadline.filter(|_| request.expired_at(Utc::now())) {
            let reason = format!("the deadline {} passed before inference started", deadline.to_rfc3339());
            let document = ResultDocument::failure(processing(started), ErrorCode::Expired, reason);
            return Some(self.finish(lease, request, document).await);
        }
        let engine_started = Instant::now();
        let inference = self.infer(lease, request, preemptible, cancels).await;
        let _storing = Gauged::enter(&self.storing);
        drop(slot);
        let outcome = match inference {
            Inference::Done(outcome) => {
                if let Ok(completion) = &outcome {
                    self.generations.fetch_add(1, Ordering::Relaxed);
                    self.observe_latency(engine_started.elapsed(), completion.generation.usage.completion_tokens);
                }
                outcome
            }
            Inference::Superseded => {
                tracing::info!(request_id = %id, %tier, "a document was stored while the request ran (canceled): engine call aborted");
                // A canceled response's event (its cancel records it too; whichever comes first stands).
                if request.response
                    && let Err(why) = self.mark_ending(request, None).await
                {
                    return Some(self.retry_later(lease, why).await);
                }
                self.delete(lease).await;
                return Some(Disposition::Aborted);
            }
            Inference::HandBack => return Some(self.release(lease).await),
            Inference::GaveUpSlot => {
                tracing::info!(request_id = %id, %tier, "gave its slot up (to a high-priority request, or the engine queued it beyond the worker's share): runs again in the next free slot");
                return None;
            }
        };
        let processing = processing(started);
        let document = match outcome {
            Ok(completion) => ResultDocument::success(processing, completion.generation, completion.model),
            Err(EngineError::Permanent(detail)) => {
                ResultDocument::failure(processing, ErrorCode::EngineRejected, detail)
            }
            Err(error) if message.receive_count >= self.config.max_receive_count => ResultDocument::failure(
                processing,
                ErrorCode::AttemptsExhausted,
                format!("gave up after {} attempts; last error: {error}", message.receive_count),
            ),
            Err(error) => return Some(self.retry_later(lease, &error.to_string()).await),
        };
        Some(self.finish(lease, request, document).await)
    }

    /// Runs the request under a heartbeat. A failure while the engine does not answer its health probe is
    /// the engine's, not the request's: the message is held until the engine answers again (then the
    /// request is retried on the same lease) or is declared lost (then the message is handed back). A
    /// document stored meanwhile (a cancel), or a `preemptible` request asked for its slot, ends the run: the
    /// engine call is dropped, which aborts it.
    pub(super) async fn infer(
        &self,
        lease: &Lease,
        request: &InferenceRequest,
        mut preemptible: Option<Preemptible>,
        cancels: &mut watch::Receiver<u64>,
    ) -> Inference {
        let attempts = async {
            loop {
                match self.engine.generate(request).await {
                    Err(error) if !matches!(error, EngineError::Permanent(_)) && !self.engine.healthy().await => {
                        tracing::warn!(request_id = %request.request_id, tier = %self.config.tier, %error, "engine not answering: holding the request until it answers again or is declared lost");
                        self.wait_for_engine(&self.hand_back).await;
                    }
                    outcome => return outcome,
                }
            }
        };
        tokio::select! {
            biased;
            () = self.hand_back.cancelled() => Inference::HandBack,
            () = self.document_stored(request.request_id, cancels) => Inference::Superseded,
            outcome = self.with_heartbeat(lease, attempts) => Inference::Done(outcome),
            () = asked_for_slot(preemptible.as_mut()) => Inference::GaveUpSlot,
        }
    }

    /// Resolves once a document for `request_id` exists, looking when the cancel mark changed (see `cancel_watch`);
    /// a failed look is ignored (the next one may succeed, and the result write settles who was first anyway).
    pub(super) async fn document_stored(&self, request_id: RequestId, cancels: &mut watch::Receiver<u64>) {
        loop {
            cancel_watch::next_look(cancels).await;
            if let Ok(true) = self.store.exists(request_id).await {
                return;
            }
        }
    }
}

/// How a running request ended.
pub(super) enum Inference {
    Done(Result<Completion, EngineError>),
    /// A document appeared meanwhile (a cancel, or another worker finished first).
    Superseded,
    /// The engine was lost or the drain timed out: hand the message back.
    HandBack,
    /// The request gave its slot up (see `preemption`): it runs again in the next free slot.
    GaveUpSlot,
}

pub(super) fn queue_wait_ms(message: &Message) -> u64 {
    let now = chrono::Utc::now().timestamp_millis();
    u64::try_from(now - message.sent_at_ms).unwrap_or(0)
}
