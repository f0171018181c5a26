//! One request's run, from its received message to its ending: the message read and checked, a slot waited for,
//! the engine called under a heartbeat while cancels are watched for, and what its answer (or failure) becomes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use crate::contract::outcome::{ErrorCode, Generation, Processing, ResultDocument};
use crate::contract::request::{InferenceRequest, Intake};
use crate::contract::request_id::RequestId;
use crate::contract::tier::Priority;
use crate::ports::{Completion, Engine, EngineError, Message, Queue, ResultStore};
use crate::worker::assembly::{Disposition, RunParts};
use crate::worker::cancel_watch;
use crate::worker::engine_watch::wait_until_healthy;
use crate::worker::lease::HeldMessage;
use crate::worker::limit_loop::Gauged;
use crate::worker::preemption::{GiveUp, Preemptible};
use crate::worker::slots::Slot;

/// A request's run: the worker's parts it runs with and the message it holds until it ends.
pub(super) struct RequestRun<Q: Queue + ?Sized + 'static, S: ?Sized, E: ?Sized> {
    pub(super) parts: Arc<RunParts<S, E>>,
    pub(super) held: HeldMessage<Q>,
}

impl<Q, S, E> RequestRun<Q, S, E>
where
    Q: Queue + ?Sized + 'static,
    S: ResultStore + ?Sized + 'static,
    E: Engine + ?Sized + 'static,
{
    /// Runs the request to its ending, in `free_slot` when it got one at once (else it waits for one). `preemptible`
    /// is entered already when it holds a slot, so the receive loop knows a high-priority request could take it.
    pub(super) async fn drive(self, mut free_slot: Option<Slot>, mut preemptible: Option<Preemptible>) -> Disposition {
        let parts = &self.parts;
        // Before its first look at its document (in `prepare`): no cancel falls between the two.
        let mut cancels = parts.cancels.subscribe();
        let request = match self.prepare().await {
            Ok(request) => request,
            Err(ended) => return ended,
        };
        // A request gives its slot up to a high-priority one at most once (pulled back from the engine's queue, it
        // lost nothing).
        let mut may_give_up = self.held.lease().preemptible;
        loop {
            let slot = match free_slot.take() {
                Some(slot) => slot,
                None => match self.wait_for_slot().await {
                    // Canceled (or done elsewhere) while it waited: it never reaches the engine again.
                    Some(_slot) if let Some(ended) = self.ended_already(&request).await => return ended,
                    Some(slot) => {
                        preemptible = may_give_up.then(|| parts.limit.preemption().register());
                        slot
                    }
                    None => return self.give_back(self.give_back_reason()).await,
                },
            };
            match self.run_request(&request, slot, preemptible.take(), &mut cancels).await {
                Ok(ended) => return ended,
                Err(why) => may_give_up &= why == GiveUp::PulledBack,
            }
        }
    }

    /// Reads the received message: the request to run, or how the message ended (malformed: dead-lettered; a
    /// document already stored: deleted). Never panics on bad input.
    async fn prepare(&self) -> Result<InferenceRequest, Disposition> {
        let (lease, tier) = (self.held.lease(), self.parts.config.tier);
        let message = &lease.message;
        let sent_at = DateTime::from_timestamp_millis(message.sent_at_ms).unwrap_or_else(Utc::now);
        let request = match InferenceRequest::parse(message.body.as_bytes(), Intake::Queue(sent_at)) {
            Ok(request) => request,
            Err(error) => {
                let reason = error.to_string();
                tracing::warn!(%tier, lane = %lease.lane, bytes = message.body.len(), %reason, "malformed message; sending to the dead-letter queue");
                if let Err(e) = self.held.dead_letter(&reason).await {
                    return Err(self.retry_later(&format!("dead-letter failed: {e}")).await);
                }
                return Err(Disposition::DeadLettered);
            }
        };
        match self.ended_already(&request).await {
            Some(ended) => Err(ended),
            None => Ok(request),
        }
    }

    /// How the message ends when a document (a result, or a cancel) is stored for its request already: checked
    /// before the request first reaches the engine, and again before it reaches it after waiting for a slot (it
    /// may have been canceled meanwhile). None: run it.
    async fn ended_already(&self, request: &InferenceRequest) -> Option<Disposition> {
        let (id, tier) = (request.request_id, self.parts.config.tier);
        match self.parts.store.exists(id).await {
            Ok(true) => {
                tracing::info!(request_id = %id, %tier, "a document (result or cancel) is already stored; deleting the message");
                if let Err(why) = self.mark_ending(request, None).await {
                    tracing::warn!(request_id = %id, %tier, why, "the message is kept");
                    return Some(self.retry_later(why).await);
                }
                self.held.delete().await;
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

    /// Waits for a slot with the message's visibility renewed; None if the engine is lost (or the drain times out)
    /// first. A high-priority request gets the next slot ahead of the others and, once it has waited its patience,
    /// takes the youngest normal or batch request's slot (see `preemption`).
    async fn wait_for_slot(&self) -> Option<Slot> {
        let limit = &self.parts.limit;
        let slot = async {
            if self.held.lease().lane != Priority::High {
                return limit.slots().take().await;
            }
            let _waiting = Gauged::enter(&limit.high_waiting);
            let first = limit.slots().take_first();
            tokio::pin!(first);
            if limit.may_preempt() && limit.move_ahead_of_queued() > 0 {
                return first.await;
            }
            tokio::select! {
                biased;
                slot = &mut first => return slot,
                () = tokio::time::sleep(limit.preemption().patience()) => {}
            }
            if limit.may_preempt() && limit.preemption().for_high_priority() {
                tracing::info!(tier = %self.parts.config.tier, "high-priority request takes the slot of the youngest normal request");
            }
            first.await
        };
        self.held
            .heartbeat(async {
                tokio::select! {
                    biased;
                    () = self.parts.engine_watch.give_back().cancelled() => None,
                    slot = slot => Some(slot),
                }
            })
            .await
    }

    /// Runs a prepared request to the end: deadline, inference in `slot` (given back as the engine answers, so the
    /// next request starts while this one stores its result), result, delete. Why it gave its slot up, when it did
    /// before the engine answered (only if `preemptible`; then it waits for another).
    async fn run_request(
        &self,
        request: &InferenceRequest,
        slot: Slot,
        preemptible: Option<Preemptible>,
        cancels: &mut watch::Receiver<u64>,
    ) -> Result<Disposition, GiveUp> {
        let started = Instant::now();
        let parts = &self.parts;
        let (tier, id, message) = (parts.config.tier, request.request_id, &self.held.lease().message);
        // Measured now, as processing starts: the time the message waited, not the time it took.
        let queue_wait_ms = queue_wait_ms(message);
        let processing = |started: Instant| Processing {
            request_id: id,
            tier,
            task_arn: parts.config.task.arn.clone(),
            processing_time_ms: started.elapsed().as_millis() as u64,
            queue_wait_ms,
            attempts: message.receive_count,
        };
        if let Some(deadline) = request.deadline.filter(|_| request.expired_at(Utc::now())) {
            let reason = format!("the deadline {} passed before inference started", deadline.to_rfc3339());
            let document = ResultDocument::failure(processing(started), ErrorCode::Expired, reason);
            return Ok(self.finish(request, document).await);
        }
        let engine_started = Instant::now();
        let inference = self.infer(request, engine_started, preemptible, cancels).await;
        let _storing = Gauged::enter(&parts.limit.storing);
        drop(slot);
        let outcome = match inference {
            Inference::Done(outcome) => {
                if let Ok(completion) = &outcome {
                    parts.engine_watch.generation_done();
                    let (engine_time, tokens) =
                        (engine_started.elapsed(), completion.generation.usage.completion_tokens);
                    parts.limit.observe_latency(engine_time, tokens);
                    parts.pace.observe(engine_time, tokens);
                }
                outcome
            }
            Inference::Superseded => {
                tracing::info!(request_id = %id, %tier, "a document was stored while the request ran (canceled): engine call aborted");
                // A canceled response's event (its cancel records it too; whichever comes first stands).
                if request.origin.is_response()
                    && let Err(why) = self.mark_ending(request, None).await
                {
                    return Ok(self.retry_later(why).await);
                }
                self.held.delete().await;
                return Ok(Disposition::Aborted);
            }
            Inference::GiveBack => return Ok(self.give_back(self.give_back_reason()).await),
            Inference::OutlastsDrain => return Ok(self.give_back("its token budget outlasts the drain").await),
            Inference::GaveUpSlot(why) => {
                tracing::info!(request_id = %id, %tier, ?why, "gave its slot up: runs again in the next free slot");
                return Err(why);
            }
        };
        let processing = processing(started);
        let document = match outcome {
            Ok(completion) => match answer_as_asked(request, &completion.generation) {
                Ok(()) => ResultDocument::success(processing, completion.generation, completion.model),
                Err(why) => ResultDocument::failure(processing, ErrorCode::InvalidOutput, why),
            },
            Err(EngineError::Permanent(detail)) => {
                ResultDocument::failure(processing, ErrorCode::EngineRejected, detail)
            }
            Err(error) if message.receive_count >= parts.config.lease.max_receive_count => ResultDocument::failure(
                processing,
                ErrorCode::AttemptsExhausted,
                format!("gave up after {} attempts; last error: {error}", message.receive_count),
            ),
            Err(error) => return Ok(self.retry_later(&error.to_string()).await),
        };
        Ok(self.finish(request, document).await)
    }

    /// Runs the request under a heartbeat. A failure while the engine does not answer its health probe is
    /// the engine's, not the request's: the message is held until the engine answers again (then the
    /// request is retried on the same lease) or is declared lost (then the message is given back). A
    /// document stored meanwhile (a cancel), or a `preemptible` request asked for its slot, ends the run: the
    /// engine call is dropped, which aborts it.
    async fn infer(
        &self,
        request: &InferenceRequest,
        started: Instant,
        mut preemptible: Option<Preemptible>,
        cancels: &mut watch::Receiver<u64>,
    ) -> Inference {
        let parts = &self.parts;
        let (engine, config, give_back) = (parts.engine.as_ref(), &parts.config, parts.engine_watch.give_back());
        let attempts = async {
            loop {
                match engine.generate(request).await {
                    Err(error) if !matches!(error, EngineError::Permanent(_)) && !engine.healthy().await => {
                        tracing::warn!(request_id = %request.request_id, tier = %config.tier, %error, "engine not answering: holding the request until it answers again or is declared lost");
                        wait_until_healthy(engine, config.tier, config.health.interval, give_back).await;
                    }
                    outcome => return outcome,
                }
            }
        };
        tokio::select! {
            biased;
            () = give_back.cancelled() => Inference::GiveBack,
            () = self.outlasts_the_drain(request, started) => Inference::OutlastsDrain,
            () = self.document_stored(request.request_id, cancels) => Inference::Superseded,
            outcome = self.held.heartbeat(attempts) => Inference::Done(outcome),
            why = asked_for_slot(preemptible.as_mut()) => Inference::GaveUpSlot(why),
        }
    }

    /// Resolves when the worker starts draining (a stop, or a Spot instance's notice) and this request's token budget,
    /// at the engine's pace, would end after the drain does: it is then given back at once, its engine call
    /// aborted, for a task that will still be there. Pending otherwise: it runs on, and the drain's timeout gives it
    /// back if the pace was wrong.
    async fn outlasts_the_drain(&self, request: &InferenceRequest, started: Instant) {
        let parts = &self.parts;
        // On its last attempt a message given back would be dead-lettered with no result: it runs on instead.
        if self.held.lease().message.receive_count >= parts.config.lease.max_receive_count {
            return std::future::pending().await;
        }
        parts.draining.cancelled().await;
        let drain_ends = Instant::now() + parts.config.drain_timeout;
        match parts.pace.time_for(request.sampling.max_tokens) {
            Some(budget) if started + budget > drain_ends => {}
            _ => std::future::pending().await,
        }
    }

    /// Resolves once a document for `request_id` exists, looking when the cancel mark changed (see `cancel_watch`);
    /// a failed look is ignored (the next one may succeed, and the result write settles who was first anyway).
    async fn document_stored(&self, request_id: RequestId, cancels: &mut watch::Receiver<u64>) {
        loop {
            cancel_watch::next_look(cancels).await;
            if let Ok(true) = self.parts.store.exists(request_id).await {
                return;
            }
        }
    }

    /// Gives the message back after its attempt's retry delay: a transient failure.
    pub(super) async fn retry_later(&self, error: &str) -> Disposition {
        let attempt = self.held.lease().message.receive_count;
        let delay = self.parts.config.lease.retry_delay(attempt);
        tracing::warn!(tier = %self.parts.config.tier, attempt, retry_in_s = delay.as_secs_f64(), %error, "transient failure; the message will be retried");
        self.held.give_back(delay).await;
        Disposition::RetryLater
    }

    /// Why every request in flight gives its message back: the engine was lost, or the drain ran out.
    fn give_back_reason(&self) -> &'static str {
        if self.parts.engine_watch.is_lost() { "engine lost" } else { "drain timeout" }
    }

    /// Gives the message back at once, for another task (or this one's successor) to run.
    async fn give_back(&self, reason: &str) -> Disposition {
        tracing::warn!(tier = %self.parts.config.tier, reason, "message given back for another task");
        self.held.give_back(Duration::ZERO).await;
        Disposition::GivenBack
    }
}

/// How a running request ended.
enum Inference {
    Done(Result<Completion, EngineError>),
    /// A document appeared meanwhile (a cancel, or another worker finished first).
    Superseded,
    /// The engine was lost or the drain timed out: give the message back.
    GiveBack,
    /// The worker is draining and the request's budget would end after the drain: give the message back now.
    OutlastsDrain,
    /// The request gave its slot up (see `preemption`): it runs again in the next free slot.
    GaveUpSlot(GiveUp),
}

/// Resolves when a preemptible request is asked for its slot, with why; never for another (None).
async fn asked_for_slot(preemptible: Option<&mut Preemptible>) -> GiveUp {
    match preemptible {
        Some(preemptible) => preemptible.asked().await,
        None => std::future::pending().await,
    }
}

/// Whether a generation is what its request asked for (`Output::check_answer`). A tool call is held to its tools by
/// the engine, not here; an OpenAI response cut at its length limit stays a generation, which the Responses API
/// reports `incomplete` as OpenAI does.
fn answer_as_asked(request: &InferenceRequest, generation: &Generation) -> Result<(), String> {
    let cut = generation.finish_reason == "length";
    if generation.tool_calls.is_some() || (cut && request.origin.is_response()) {
        return Ok(());
    }
    request.output.check_answer(&generation.text).map_err(|why| {
        if cut {
            format!("{why}; the engine stopped at maxTokens ({}): allow more", request.sampling.max_tokens)
        } else {
            why
        }
    })
}

fn queue_wait_ms(message: &Message) -> u64 {
    let now = chrono::Utc::now().timestamp_millis();
    u64::try_from(now - message.sent_at_ms).unwrap_or(0)
}
