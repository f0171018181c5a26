//! The traits the core is written against: queue, result store, engine, classifier, fleet readings, the wake on
//! arrival, API-key store; `object_io`: whole-object reads and writes over an `ObjectStore`; `classifier`: what every
//! classifier shares. Only the methods we call.

pub(crate) mod classifier;
pub mod object_io;

use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::Stream;
use serde::Serialize;

use crate::contract::engine_load::EngineLoad;
use crate::contract::outcome::Generation;
use crate::contract::request::InferenceRequest;
use crate::contract::request_id::RequestId;
use crate::contract::tier::Tier;

/// One received message, as the worker sees it.
#[derive(Debug, Clone)]
pub struct Message {
    pub body: String,
    /// Opaque handle for change-visibility and delete; valid for this receive only.
    pub receipt: String,
    /// How many times the message has been received, this time included.
    pub receive_count: u32,
    /// When the message was first sent, milliseconds since the Unix epoch.
    pub sent_at_ms: i64,
}

/// Approximate message counts of a queue, as SQS reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueCounts {
    pub visible: u64,
    pub in_flight: u64,
    pub delayed: u64,
}

impl std::ops::Add for QueueCounts {
    type Output = QueueCounts;

    /// The counts of two queues taken together (a tier's lanes).
    fn add(self, other: QueueCounts) -> QueueCounts {
        QueueCounts {
            visible: self.visible + other.visible,
            in_flight: self.in_flight + other.in_flight,
            delayed: self.delayed + other.delayed,
        }
    }
}

/// The error an adapter's call failed with (the SDK's, SQLite's, the file system's), kept as the port error's
/// source so nothing of its chain is lost; shared, so a batch call's one failure can fail every entry.
pub(crate) type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// The name a port's errors begin with.
pub(crate) trait PortName {
    const NAME: &'static str;
}

/// A call to port `P` that failed and may succeed if retried later: `context` says which call and why (followed
/// by its cause's whole chain, so a log line tells everything), `source` is the cause itself (so nothing is lost
/// to callers that look into it). The one error shape of every port.
#[derive(Debug, Clone)]
pub struct PortError<P> {
    pub(crate) context: String,
    pub(crate) source: Option<Cause>,
    port: PhantomData<fn() -> P>,
}

impl<P> PortError<P> {
    pub fn unavailable(context: impl Into<String>) -> Self {
        PortError { context: context.into(), source: None, port: PhantomData }
    }

    pub(crate) fn caused(context: &str, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        let context = format!("{context}: {}", crate::infra::error_chain::describe(&source));
        PortError { context, source: Some(Arc::new(source)), port: PhantomData }
    }

    /// `context` as given, with `source` kept as the cause (its chain not repeated in the text).
    pub(crate) fn with_source(context: String, source: Cause) -> Self {
        PortError { context, source: Some(source), port: PhantomData }
    }
}

impl<P: PortName> std::fmt::Display for PortError<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} unavailable: {}", P::NAME, self.context)
    }
}

impl<P: PortName + std::fmt::Debug> std::error::Error for PortError<P> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|cause| cause as &(dyn std::error::Error + 'static))
    }
}

/// The queue port ([`Queue`]).
#[derive(Debug, Clone, Copy)]
pub struct QueuePort;
impl PortName for QueuePort {
    const NAME: &'static str = "queue";
}

/// The store ports ([`ResultStore`], [`ObjectStore`]).
#[derive(Debug, Clone, Copy)]
pub struct StorePort;
impl PortName for StorePort {
    const NAME: &'static str = "result store";
}

/// The fleet-reading ports ([`ServiceTasks`], [`GpuUtilization`]).
#[derive(Debug, Clone, Copy)]
pub struct FleetPort;
impl PortName for FleetPort {
    const NAME: &'static str = "fleet readings";
}

/// The API-key store port ([`KeyStore`]).
#[derive(Debug, Clone, Copy)]
pub struct KeyStorePort;
impl PortName for KeyStorePort {
    const NAME: &'static str = "API key store";
}

pub type StoreError = PortError<StorePort>;
pub type FleetError = PortError<FleetPort>;
pub type KeyStoreError = PortError<KeyStorePort>;

#[derive(Debug, Clone, thiserror::Error)]
pub enum QueueError {
    /// Retry later: the call failed.
    #[error(transparent)]
    Unavailable(PortError<QueuePort>),
    #[error("receipt handle is no longer valid (the message was deleted or received again)")]
    ReceiptExpired,
}

impl QueueError {
    pub fn unavailable(context: impl Into<String>) -> Self {
        QueueError::Unavailable(PortError::unavailable(context))
    }

    pub(crate) fn caused(context: &str, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        QueueError::Unavailable(PortError::caused(context, source))
    }
}

/// Most messages one queue call carries: a receive, a batch send or a batch delete (SQS's limit for each of
/// ReceiveMessage, SendMessageBatch and DeleteMessageBatch, which the embedded queue keeps too).
pub const MAX_MESSAGES_PER_CALL: usize = 10;
/// Longest wait of one receive (SQS's longest long poll).
pub(crate) const MAX_RECEIVE_WAIT: Duration = Duration::from_secs(20);

/// The queues' maxReceiveCount unless one is configured (the template's redrive policy): the attempt with this
/// receive count is a message's last.
pub(crate) const DEFAULT_MAX_RECEIVE_COUNT: u32 = 3;

/// An SQS-like queue: at-least-once delivery, visibility timeout, dead-letter redrive.
#[async_trait]
pub trait Queue: Send + Sync {
    async fn send(&self, body: &str) -> Result<(), QueueError>;
    /// Sends every body in as few calls as the queue allows; one outcome per body, in order.
    async fn send_many(&self, bodies: &[String]) -> Vec<Result<(), QueueError>>;
    /// Waits up to `wait` for messages and returns at most `max` of them.
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Message>, QueueError>;
    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> Result<(), QueueError>;
    async fn delete(&self, receipt: &str) -> Result<(), QueueError>;
    /// Moves the message to the dead-letter queue with `ErrorReason` and `OriginalQueue`, then deletes it.
    async fn dead_letter(&self, message: &Message, reason: &str) -> Result<(), QueueError>;
    async fn counts(&self) -> Result<QueueCounts, QueueError>;
    /// Whether dropping a `receive` before it returns is harmless. Not for SQS: the response may already
    /// hold messages, which would then stay invisible for their visibility timeout. The worker lets such a
    /// receive finish when it stops, and hands back at once what it brought.
    fn receive_is_cancel_safe(&self) -> bool {
        false
    }

    /// Whether a receive is a network round trip (SQS) rather than a local call: a worker then receives a few
    /// messages ahead of its free slots.
    fn receive_is_remote(&self) -> bool {
        true
    }
}

/// Whether a conditional write created the document or found one already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    Created,
    AlreadyExists,
}

/// Where result documents live: `results/{requestId}.json`, first writer wins.
#[async_trait]
pub trait ResultStore: Send + Sync {
    async fn exists(&self, request_id: RequestId) -> Result<bool, StoreError>;
    async fn put_if_absent(&self, request_id: RequestId, document: &[u8]) -> Result<PutOutcome, StoreError>;
    async fn get(&self, request_id: RequestId) -> Result<Option<Vec<u8>>, StoreError>;
    /// Removes the document of `request_id` (a deleted OpenAI response's); none there is no error.
    async fn delete(&self, request_id: RequestId) -> Result<(), StoreError>;
    /// Records, first writer wins, that the router accepted `request_id` (the record says with which request and
    /// to which tier): how a reused id is told from a retry, and how a cancel knows the id exists. It expires
    /// with the results.
    async fn record_acceptance(&self, request_id: RequestId, record: &[u8]) -> Result<PutOutcome, StoreError>;
    async fn acceptance(&self, request_id: RequestId) -> Result<Option<Vec<u8>>, StoreError>;
    /// Removes the record of an acceptance whose enqueue failed, so that a retry can be accepted.
    async fn forget_acceptance(&self, request_id: RequestId) -> Result<(), StoreError>;
    /// Tells the workers that requests were canceled, once their canceled documents are stored: rewrites the one
    /// cancel mark beside the results, which each worker watches instead of every running request's document.
    async fn mark_cancels(&self) -> Result<(), StoreError>;
    /// The cancel mark's version, new at each `mark_cancels`; None while there is none.
    async fn cancel_mark(&self) -> Result<Option<String>, StoreError>;
    /// The same place seen as a store of named objects (files and batches of the Batch API), where it is one: a
    /// bucket or a folder, not a queue.
    fn objects(&self) -> Option<&dyn ObjectStore> {
        None
    }
}

/// An object's bytes, read or written a chunk at a time.
pub(crate) type ByteChunks<'a> = Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send + 'a>>;

/// Named objects beside the results (`files/…`, `batches/…`): what the Batch and Files API keep. Keys are relative
/// to the results' place, `/`-separated.
#[async_trait]
pub trait ObjectStore: Send + Sync {
    /// Writes the chunks at `key`, replacing any object there; a reader never sees a partial object. The bytes
    /// written. A chunk that is an error fails the write, and nothing is left at `key`.
    async fn put(&self, key: &str, chunks: ByteChunks<'_>) -> Result<u64, StoreError>;
    /// Writes `bytes` at `key` unless something is there: first writer wins.
    async fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<PutOutcome, StoreError>;
    /// The object's size and its bytes, or None when there is no object at `key`.
    async fn get(&self, key: &str) -> Result<Option<(u64, ByteChunks<'static>)>, StoreError>;
    /// The keys that start with `prefix`, in lexical order. Callers name a folder (`prefix` ends in `/`) holding
    /// objects only: the file adapter lists one folder level, S3 every key under the prefix.
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError>;
    /// Removes the object at `key`; no object there is no error.
    async fn delete(&self, key: &str) -> Result<(), StoreError>;
    /// A URL that reads the object without credentials for `valid_for`, where the store has such URLs (S3).
    async fn presigned_get(&self, _key: &str, _valid_for: Duration) -> Result<Option<String>, StoreError> {
        Ok(None)
    }
}

/// Engine failures, typed by what the worker must do about them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The engine cannot be reached at all (process gone, GPU lost): retry elsewhere.
    #[error("engine unavailable: {0}")]
    Unavailable(String),
    /// 5xx, 429, timeout, unreadable answer: back off and retry.
    #[error("engine failed transiently: {0}")]
    Retryable(String),
    /// 4xx such as a prompt longer than the context: retrying cannot help.
    #[error("engine rejected the request: {0}")]
    Permanent(String),
}

/// A generation together with the model that produced it.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub generation: Generation,
    pub model: Option<String>,
}

/// An OpenAI-compatible inference engine (vLLM, llama.cpp, SGLang, …).
#[async_trait]
pub trait Engine: Send + Sync {
    async fn generate(&self, request: &InferenceRequest) -> Result<Completion, EngineError>;
    async fn healthy(&self) -> bool;
    /// Requests running and queued inside the engine, from its own gauges; None when it exposes none.
    async fn load(&self) -> Option<EngineLoad> {
        None
    }
}

#[derive(Debug, thiserror::Error)]
#[error("classifier failed: {0}")]
pub struct ClassifyError(pub String);

/// Where the digests of the API keys a deployed router accepts are kept, as one JSON document (the stack's Secrets
/// Manager secret): the router reads it, `gpuinfer api-key` rewrites it.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// The document as it stands.
    async fn read(&self) -> Result<String, KeyStoreError>;
    /// Replaces the document with `document`.
    async fn write(&self, document: &str) -> Result<(), KeyStoreError>;
}

/// Decides the tier of a request in the ambiguous zone.
#[async_trait]
pub trait Classifier: Send + Sync {
    async fn classify(&self, text: &str) -> Result<Tier, ClassifyError>;
}

/// The cluster's name unless configured (locally).
pub(crate) const DEFAULT_CLUSTER_NAME: &str = "local";
/// The name pattern of a tier's service unless configured; `{tier}` stands for the tier's name.
pub(crate) const DEFAULT_SERVICE_NAME: &str = "gpuinfer-{tier}";

/// The ECS service that runs one tier's tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    pub cluster: String,
    pub name: String,
}

impl Service {
    /// `tier`'s service in `cluster`, its name from `pattern` (`{tier}` replaced by the tier's name).
    pub fn of_tier(cluster: &str, pattern: &str, tier: Tier) -> Service {
        Service { cluster: cluster.to_owned(), name: pattern.replace("{tier}", tier.as_str()) }
    }
}

/// Task counts of a service, as ECS DescribeServices reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct TaskCounts {
    #[serde(rename = "runningTasks")]
    pub running: u32,
    #[serde(rename = "desiredTasks")]
    pub desired: u32,
    /// Tasks of the current deployment that failed to start in a row (ECS `failedTasks`: an image that cannot
    /// be pulled, a container that exits during start); back to 0 once one runs or a new deployment begins.
    #[serde(rename = "failedTaskStarts")]
    pub failed_starts: u32,
}

/// Failed task starts in a row, with no task running, after which no capacity is asked for: neither by the scaler
/// nor by the wake on arrival (as ECS's deployment circuit breaker, whose smallest threshold is 3).
pub(crate) const START_FAILURES_TO_STOP: u32 = 3;

/// How many tasks a service runs and is asked to run (ECS DescribeServices).
#[async_trait]
pub trait ServiceTasks: Send + Sync {
    async fn task_counts(&self, service: &Service) -> Result<TaskCounts, FleetError>;
}

/// Asks a service for its first task, at once (ECS UpdateService with a desired count of 1): the wake on arrival of
/// a tier at zero. Called only when the desired count was read as 0, so it never lowers a count.
#[async_trait]
pub trait FirstTask: Send + Sync {
    async fn ask_for_first_task(&self, service: &Service) -> Result<(), FleetError>;
}

/// Wakes a tier at zero: when work is enqueued for it, its first task is asked for at once (`scaler::wake`).
#[async_trait]
pub trait ArrivalWake: Send + Sync {
    /// Work was just enqueued for `tier`.
    async fn enqueued(&self, tier: Tier);
}

/// GPU compute (not memory) utilization of a service's tasks (Container Insights `TaskGPUUtilization`).
#[async_trait]
pub trait GpuUtilization: Send + Sync {
    /// Average over the service's tasks for the last minute, in percent; None when there is no data.
    async fn compute_utilization(&self, service: &Service) -> Result<Option<f64>, FleetError>;
}
