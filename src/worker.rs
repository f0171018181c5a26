//! The worker: lease a message → heartbeat → infer → store the result → delete; retry policy and drain.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::metrics::{self, Emf, Metric};
use crate::outcome::{ErrorCode, Processing, ResultDocument};
use crate::ports::{Engine, EngineError, Message, PutOutcome, Queue, ResultStore};
use crate::request::{InferenceRequest, RequestId};
use crate::routing::Tier;

/// Most messages one receive asks for (SQS's limit).
pub const MAX_BATCH: usize = 10;

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub tier: Tier,
    /// Requests in flight at once; never receives more messages than free slots.
    pub concurrency: usize,
    /// Long-poll wait of one receive.
    pub wait_time: Duration,
    /// Visibility the heartbeat keeps renewing while a request runs (renewed every third of it).
    pub visibility_timeout: Duration,
    /// The queue's maxReceiveCount: the attempt with this receive count is the last.
    pub max_receive_count: u32,
    /// Back-off after a transient failure: base × 2^(attempt−1), at most the visibility timeout.
    pub retry_base: Duration,
    /// How often to probe the engine's health before starting.
    pub health_interval: Duration,
    pub task_arn: String,
}

impl WorkerConfig {
    pub fn new(tier: Tier) -> Self {
        WorkerConfig {
            tier,
            concurrency: 8,
            wait_time: Duration::from_secs(20),
            visibility_timeout: Duration::from_secs(300),
            max_receive_count: 3,
            retry_base: Duration::from_secs(2),
            health_interval: Duration::from_secs(1),
            task_arn: "local".into(),
        }
    }

    /// Delay before a message that failed on attempt `receive_count` is seen again.
    pub fn retry_delay(&self, receive_count: u32) -> Duration {
        let exponent = receive_count.saturating_sub(1).min(16);
        self.retry_base.saturating_mul(1 << exponent).min(self.visibility_timeout)
    }
}

/// How one message ended, for logs and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    Succeeded,
    Failed(ErrorCode),
    AlreadyDone,
    DeadLettered,
    RetryLater,
}

pub struct Worker<Q: ?Sized, S: ?Sized, E: ?Sized> {
    queue: Arc<Q>,
    store: Arc<S>,
    engine: Arc<E>,
    config: WorkerConfig,
    metrics: Emf,
}

impl<Q, S, E> Worker<Q, S, E>
where
    Q: Queue + ?Sized + 'static,
    S: ResultStore + ?Sized + 'static,
    E: Engine + ?Sized + 'static,
{
    pub fn new(queue: Arc<Q>, store: Arc<S>, engine: Arc<E>, config: WorkerConfig, metrics: Emf) -> Self {
        Worker { queue, store, engine, config, metrics }
    }

    /// Runs until `shutdown`: then stops receiving and finishes every request in flight.
    pub async fn run(self, shutdown: CancellationToken) {
        let tier = self.config.tier;
        if !self.wait_for_engine(&shutdown).await {
            return;
        }
        tracing::info!(%tier, concurrency = self.config.concurrency, "worker polling");
        let worker = Arc::new(self);
        let slots = Arc::new(Semaphore::new(worker.config.concurrency));
        let mut in_flight = JoinSet::new();
        loop {
            while let Some(done) = in_flight.try_join_next() {
                log_panic(done);
            }
            let Some(permits) = acquire_free_slots(&slots, &shutdown).await else { break };
            let received = tokio::select! {
                received = worker.queue.receive(permits.len(), worker.config.wait_time) => received,
                () = shutdown.cancelled() => break,
            };
            let messages = match received {
                Ok(messages) => messages,
                Err(error) => {
                    tracing::warn!(%tier, %error, "receive failed; retrying in 1 s");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        () = shutdown.cancelled() => break,
                    }
                }
            };
            for (message, permit) in messages.into_iter().zip(permits) {
                let worker = Arc::clone(&worker);
                in_flight.spawn(async move {
                    let _slot: OwnedSemaphorePermit = permit;
                    worker.process(message).await
                });
            }
        }
        tracing::info!(%tier, in_flight = in_flight.len(), "worker draining: finishing requests in flight");
        while let Some(done) = in_flight.join_next().await {
            log_panic(done);
        }
        tracing::info!(%tier, "worker stopped");
    }

    /// Waits until the engine answers /health; false if shut down first.
    async fn wait_for_engine(&self, shutdown: &CancellationToken) -> bool {
        let started = Instant::now();
        let mut last_log = started;
        loop {
            if self.engine.healthy().await {
                return true;
            }
            if last_log.elapsed() >= Duration::from_secs(30) || last_log == started {
                tracing::info!(tier = %self.config.tier, waited_s = started.elapsed().as_secs(), "waiting for the engine to become healthy");
                last_log = Instant::now();
            }
            tokio::select! {
                () = tokio::time::sleep(self.config.health_interval) => {}
                () = shutdown.cancelled() => return false,
            }
        }
    }

    /// Handles one message to the end; never panics on bad input.
    pub async fn process(&self, message: Message) -> Disposition {
        let started = Instant::now();
        let tier = self.config.tier;
        let request = match InferenceRequest::parse(message.body.as_bytes(), RequestId::Require) {
            Ok(request) => request,
            Err(error) => {
                let reason = error.to_string();
                tracing::warn!(%tier, bytes = message.body.len(), %reason, "malformed message; sending to the dead-letter queue");
                if let Err(e) = self.queue.dead_letter(&message, &reason).await {
                    tracing::warn!(%tier, error = %e, "dead-letter failed; the message will come back");
                    return Disposition::RetryLater;
                }
                return Disposition::DeadLettered;
            }
        };
        let id = request.request_id;
        match self.store.exists(id).await {
            Ok(true) => {
                tracing::info!(request_id = %id, %tier, "result already stored; deleting the duplicate message");
                self.delete(&message).await;
                return Disposition::AlreadyDone;
            }
            Ok(false) => {}
            Err(error) => return self.retry_later(&message, &error.to_string()).await,
        }
        let outcome = self.with_heartbeat(&message, self.engine.generate(&request)).await;
        let processing = Processing {
            request_id: id,
            tier,
            task_arn: self.config.task_arn.clone(),
            processing_time_ms: started.elapsed().as_millis() as u64,
            queue_wait_ms: queue_wait_ms(&message),
            attempts: message.receive_count,
        };
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
            Err(error) => return self.retry_later(&message, &error.to_string()).await,
        };
        match self.store.put_if_absent(id, &document.to_json()).await {
            Ok(PutOutcome::Created) => {}
            Ok(PutOutcome::AlreadyExists) => {
                tracing::info!(request_id = %id, %tier, "another worker stored this result first");
            }
            Err(error) => return self.retry_later(&message, &error.to_string()).await,
        }
        self.delete(&message).await;
        self.record(&document);
        match document.error {
            None => Disposition::Succeeded,
            Some(error) => Disposition::Failed(error.code),
        }
    }

    /// Keeps the message invisible while `work` runs, renewing every third of the visibility timeout.
    async fn with_heartbeat<T>(&self, message: &Message, work: impl Future<Output = T>) -> T {
        let every = self.config.visibility_timeout / 3;
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return out,
                _ = ticks.tick() => {
                    if let Err(error) = self.queue.change_visibility(&message.receipt, self.config.visibility_timeout).await {
                        tracing::warn!(tier = %self.config.tier, %error, "heartbeat failed");
                    }
                }
            }
        }
    }

    async fn retry_later(&self, message: &Message, error: &str) -> Disposition {
        let delay = self.config.retry_delay(message.receive_count);
        tracing::warn!(tier = %self.config.tier, attempt = message.receive_count, retry_in_s = delay.as_secs_f64(), %error, "transient failure; the message will be retried");
        if let Err(e) = self.queue.change_visibility(&message.receipt, delay).await {
            tracing::warn!(tier = %self.config.tier, error = %e, "could not set the retry delay; the visibility timeout applies");
        }
        Disposition::RetryLater
    }

    async fn delete(&self, message: &Message) {
        if let Err(error) = self.queue.delete(&message.receipt).await {
            tracing::warn!(tier = %self.config.tier, %error, "delete failed; the message may be seen again (its result is stored)");
        }
    }

    fn record(&self, document: &ResultDocument) {
        let usage = document.result.as_ref().map(|r| r.usage).unwrap_or_default();
        let succeeded = document.error.is_none();
        tracing::info!(
            request_id = %document.request_id,
            tier = %document.tier,
            status = if succeeded { "success" } else { "error" },
            processing_ms = document.processing_time_ms,
            queue_wait_ms = document.queue_wait_ms,
            completion_tokens = usage.completion_tokens,
            attempts = document.attempts,
            "request finished"
        );
        self.metrics.emit(
            &[("Tier", document.tier.as_str())],
            &[
                Metric::millis(metrics::INFERENCE_LATENCY, document.processing_time_ms),
                Metric::millis(metrics::QUEUE_WAIT, document.queue_wait_ms),
                Metric::count(metrics::PROMPT_TOKENS, usage.prompt_tokens),
                Metric::count(metrics::COMPLETION_TOKENS, usage.completion_tokens),
                Metric::count(if succeeded { metrics::REQUESTS_SUCCEEDED } else { metrics::REQUESTS_FAILED }, 1),
            ],
        );
    }
}

/// Waits for one free slot, then takes every other free one up to a batch; None on shutdown.
async fn acquire_free_slots(slots: &Arc<Semaphore>, shutdown: &CancellationToken) -> Option<Vec<OwnedSemaphorePermit>> {
    let first = tokio::select! {
        permit = Arc::clone(slots).acquire_owned() => permit.ok()?,
        () = shutdown.cancelled() => return None,
    };
    let mut permits = vec![first];
    while permits.len() < MAX_BATCH {
        match Arc::clone(slots).try_acquire_owned() {
            Ok(permit) => permits.push(permit),
            Err(_) => break,
        }
    }
    Some(permits)
}

fn queue_wait_ms(message: &Message) -> u64 {
    let now = chrono::Utc::now().timestamp_millis();
    u64::try_from(now - message.sent_at_ms).unwrap_or(0)
}

fn log_panic(done: Result<Disposition, tokio::task::JoinError>) {
    if let Err(error) = done {
        tracing::error!(%error, "a request task panicked; its message will be retried after the visibility timeout");
    }
}
