//! The worker's parts, built once: its lanes, store and engine, and the state each of its jobs owns (the engine
//! watch, the in-flight limit, the cancel watch, what a request's ending reports to).

use std::sync::Arc;
use std::time::SystemTime;

use tokio_util::sync::CancellationToken;

use crate::callbacks::openai_events::OpenAiEvents;
use crate::callbacks::webhook::Webhooks;
use crate::contract::outcome::ErrorCode;
use crate::contract::tier::Lanes;
use crate::infra::metrics::Emf;
use crate::ports::{Engine, Queue, ResultStore};
use crate::worker::cancel_watch::CancelWatch;
use crate::worker::cold_start::{ColdStart, Start, StartedBy};
use crate::worker::config::WorkerConfig;
use crate::worker::endings::Endings;
use crate::worker::engine_watch::EngineWatch;
use crate::worker::limit_loop::InFlightLimit;
use crate::worker::pace::GenerationPace;
use crate::worker::slots::Slots;

/// How one message ended, for logs and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Disposition {
    Succeeded,
    Failed(ErrorCode),
    AlreadyDone,
    /// A document was stored while the request ran (a cancel): the engine call was dropped.
    Aborted,
    DeadLettered,
    RetryLater,
    /// Made visible again at once for another task: the engine was lost, or the drain ran out of time.
    GivenBack,
}

/// Why [`Worker::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Shutdown was requested; every request in flight finished, or was given back when the drain timed out.
    Drained,
    /// The engine failed its health probes for the whole loss window: the worker stopped receiving and
    /// gave back its `given_back` unfinished messages. The process should exit non-zero so it is replaced.
    EngineLost { given_back: usize },
}

/// One tier's worker: its lanes, and the parts its request runs use.
pub struct Worker<Q: ?Sized, S: ?Sized, E: ?Sized> {
    pub(super) lanes: Lanes<Arc<Q>>,
    pub(super) parts: RunParts<S, E>,
}

/// What a request run uses, shared with the worker's other jobs once it runs (each takes the parts it needs): the
/// store and engine, and the state each job owns. The lanes stay with the receive loop.
pub(super) struct RunParts<S: ?Sized, E: ?Sized> {
    pub(super) store: Arc<S>,
    pub(super) engine: Arc<E>,
    pub(super) config: WorkerConfig,
    pub(super) endings: Endings,
    pub(super) engine_watch: EngineWatch,
    pub(super) limit: InFlightLimit,
    /// The store's cancel mark, read once for every running request.
    pub(super) cancels: CancelWatch,
    /// Cancelled when the worker drains, receiving stopped (on shutdown, or engine loss): a result the store refuses
    /// is then given back, not held, and a request that cannot end within the drain gives its message back.
    pub(super) draining: CancellationToken,
    /// The engine's pace, by which a stopping worker judges which requests can end within its drain.
    pub(super) pace: GenerationPace,
}

impl<Q, S, E> Worker<Q, S, E>
where
    Q: Queue + ?Sized + 'static,
    S: ResultStore + ?Sized + 'static,
    E: Engine + ?Sized + 'static,
{
    pub fn new(lanes: Lanes<Arc<Q>>, store: Arc<S>, engine: Arc<E>, config: WorkerConfig, metrics: Emf) -> Self {
        let parts = RunParts {
            store,
            engine,
            limit: InFlightLimit::new(&config, metrics.clone()),
            config,
            endings: Endings {
                metrics,
                webhooks: None,
                events: None,
                cold_start: ColdStart::new(Start::new(SystemTime::now(), StartedBy::Worker)),
            },
            engine_watch: EngineWatch::new(),
            cancels: CancelWatch::new(),
            draining: CancellationToken::new(),
            pace: GenerationPace::default(),
        };
        Worker { lanes, parts }
    }

    /// Its requests in flight and in-flight limit, as they change.
    pub fn slots(&self) -> Arc<Slots> {
        Arc::clone(self.parts.limit.slots())
    }

    /// Declares the engine lost as soon as `gone` is cancelled (its process exited), giving every message back.
    pub(crate) fn with_engine_gone(mut self, gone: CancellationToken) -> Self {
        self.parts.engine_watch = self.parts.engine_watch.with_gone(gone);
        self
    }

    /// Measures its cold start from `start` (else from its own construction).
    pub fn with_start(mut self, start: Start) -> Self {
        self.parts.endings.cold_start = ColdStart::new(start);
        self
    }

    /// Sends a callback for every stored document whose request has a callbackUrl.
    pub fn with_webhooks(mut self, webhooks: Webhooks) -> Self {
        self.parts.endings.webhooks = Some(webhooks);
        self
    }

    /// Records the event of every response that ends (`response.completed`, …) and sends it.
    pub fn with_openai_events(mut self, events: Option<OpenAiEvents>) -> Self {
        self.parts.endings.events = events;
        self
    }
}
