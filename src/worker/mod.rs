//! The worker: lease a message from a tier's lanes → heartbeat → infer → store the result → delete, then the
//! callback; retry policy, deadlines, cancels, drain, engine loss.

pub mod adaptive_limit;
pub mod callbacks;
mod cancel_watch;
pub mod cold_start;
mod config;
mod engine_watch;
mod finish;
pub mod lanes;
mod lease;
mod limit_loop;
pub mod preemption;
mod request_run;
pub mod saturation_report;
pub(crate) mod shared_lane;
pub mod slots;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::contract::outcome::ErrorCode;
use crate::contract::tier::{Lanes, Priority};
use crate::infra::metrics::Emf;
use crate::ports::{Engine, MAX_MESSAGES_PER_CALL, Queue, ResultStore};
use crate::worker::adaptive_limit::AdaptiveLimit;
use crate::worker::callbacks::openai_events::OpenAiEvents;
use crate::worker::callbacks::webhook::{DRAIN_GRACE, Webhooks};
use crate::worker::cancel_watch::CancelWatch;
use crate::worker::cold_start::{ColdStart, Start, StartedBy};
use crate::worker::lanes::{LaneReceiver, Lease};
use crate::worker::preemption::{Preemptible, Preemption};
use crate::worker::slots::{Slot, Slots};
pub use config::WorkerConfig;
pub(crate) use config::{
    DEFAULT_CANCEL_POLL_SECONDS, DEFAULT_CONCURRENCY, DEFAULT_DRAIN_TIMEOUT_SECONDS,
    DEFAULT_ENGINE_LOSS_WINDOW_SECONDS, DEFAULT_RETRY_BASE_SECONDS, DEFAULT_TASK_ARN, DEFAULT_WAIT_TIME_SECONDS,
    HEALTH_INTERVAL,
};
use engine_watch::wait_until_answering;
use limit_loop::LimitState;

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
    Released,
}

/// Why [`Worker::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Shutdown was requested; every request in flight finished, or was handed back when the drain timed out.
    Drained,
    /// The engine failed its health probes for the whole loss window: the worker stopped receiving and
    /// released its `released` unfinished messages. The process should exit non-zero so it is replaced.
    EngineLost { released: usize },
}

pub struct Worker<Q: ?Sized, S: ?Sized, E: ?Sized> {
    lanes: Lanes<Arc<Q>>,
    store: Arc<S>,
    engine: Arc<E>,
    config: WorkerConfig,
    metrics: Emf,
    /// Sends result callbacks; without it, callbackUrl is ignored.
    webhooks: Option<Webhooks>,
    /// Records and sends the OpenAI-shaped event of every response that ends; None where no endpoint is set.
    events: Option<OpenAiEvents>,
    /// Cancelled when the engine is declared lost (then `hand_back` is cancelled too, as its child).
    engine_lost: CancellationToken,
    /// Cancelled when requests in flight must hand their messages back at once: the engine was lost, or a
    /// drain reached its timeout.
    hand_back: CancellationToken,
    /// Cancelled when shutdown is requested: a result the store refuses is then handed back, not held.
    draining: CancellationToken,
    /// Cancelled by whoever runs the engine when its process is known to be gone: the engine is then declared
    /// lost at once, without waiting for the loss window.
    engine_gone: CancellationToken,
    /// Slots for requests in flight, as many as the adaptive limit allows.
    slots: Arc<Slots>,
    /// Normal and batch requests in the engine, for a high-priority request (or a lowered limit) to take a slot from.
    preemption: Arc<Preemption>,
    limit: Mutex<LimitState>,
    /// Whether the engine's last load reading had gauges (else the limit follows finished requests' latency).
    engine_gauges: AtomicBool,
    /// Whether the engine, as its last load reading named it, drops a request whose client hung up: only then does
    /// a request give its slot up (see `preemption`), as another engine would keep running it.
    engine_drops_abandoned: AtomicBool,
    /// Requests the engine held waiting at its last load reading (at most ours in flight, less those pulled back
    /// since), on an engine that drops abandoned requests: a high-priority request moves ahead of them at once.
    engine_queued_ours: AtomicU64,
    /// High-priority requests waiting for a slot (see `wait_for_slot`).
    high_waiting: AtomicUsize,
    /// Requests storing their result after the engine answered: they gave their slot back to the next request. More
    /// of them than the limit (a slow store) pause receiving.
    storing: AtomicUsize,
    /// Generations the engine completed: one completed since the last health probe means the engine answers, even
    /// when the probe itself timed out (an engine busy at its full batch, such as llama.cpp on a CPU).
    generations: AtomicU64,
    /// The instants of its start, reported once with its first result.
    cold_start: ColdStart,
    /// The store's cancel mark, read once for every running request.
    cancels: CancelWatch,
}

impl<Q, S, E> Worker<Q, S, E>
where
    Q: Queue + ?Sized + 'static,
    S: ResultStore + ?Sized + 'static,
    E: Engine + ?Sized + 'static,
{
    pub fn new(lanes: Lanes<Arc<Q>>, store: Arc<S>, engine: Arc<E>, config: WorkerConfig, metrics: Emf) -> Self {
        let engine_lost = CancellationToken::new();
        let limit = if config.adaptive {
            AdaptiveLimit::new(config.concurrency)
        } else {
            AdaptiveLimit::fixed(config.concurrency)
        };
        Worker {
            lanes,
            store,
            engine,
            config,
            metrics,
            webhooks: None,
            events: None,
            hand_back: engine_lost.child_token(),
            engine_lost,
            draining: CancellationToken::new(),
            engine_gone: CancellationToken::new(),
            slots: Slots::new(limit.limit()),
            preemption: Preemption::new(),
            limit: Mutex::new(LimitState { limit, reported: None }),
            engine_gauges: AtomicBool::new(false),
            engine_drops_abandoned: AtomicBool::new(false),
            engine_queued_ours: AtomicU64::new(0),
            high_waiting: AtomicUsize::new(0),
            storing: AtomicUsize::new(0),
            generations: AtomicU64::new(0),
            cold_start: ColdStart::new(Start::new(SystemTime::now(), StartedBy::Worker)),
            cancels: CancelWatch::new(),
        }
    }

    /// Its requests in flight and in-flight limit, as they change.
    pub fn slots(&self) -> Arc<Slots> {
        Arc::clone(&self.slots)
    }

    /// Declares the engine lost as soon as `gone` is cancelled (its process exited), releasing every message.
    pub(crate) fn with_engine_gone(mut self, gone: CancellationToken) -> Self {
        self.engine_gone = gone;
        self
    }

    /// Measures its cold start from `start` (else from its own construction).
    pub fn with_start(mut self, start: Start) -> Self {
        self.cold_start = ColdStart::new(start);
        self
    }

    /// Sends a callback for every stored document whose request has a callbackUrl.
    pub fn with_webhooks(mut self, webhooks: Webhooks) -> Self {
        self.webhooks = Some(webhooks);
        self
    }

    /// Records the event of every response that ends (`response.completed`, …) and sends it.
    pub fn with_openai_events(mut self, events: Option<OpenAiEvents>) -> Self {
        self.events = events;
        self
    }

    /// Runs until `shutdown` (then stops receiving and finishes the requests in flight, handing back what is
    /// unfinished after the drain timeout) or until the engine is lost (then stops receiving and releases every
    /// message it holds).
    pub async fn run(mut self, shutdown: CancellationToken) -> Stopped {
        let tier = self.config.tier;
        let answered = tokio::select! {
            answered = self.wait_for_engine(&shutdown) => answered,
            () = self.engine_gone.cancelled() => {
                tracing::error!(%tier, "engine process exited before the worker started");
                return Stopped::EngineLost { released: 0 };
            }
        };
        if !answered {
            return Stopped::Drained;
        }
        self.cold_start.engine_healthy();
        if self.config.adaptive {
            self.first_limit().await;
        }
        tracing::info!(%tier, in_flight_limit = self.slots.limit(), ceiling = self.config.concurrency, "worker polling");
        self.draining = shutdown.clone();
        // Read before anything is received: a cancel after this is a change of the mark.
        let mark = self.store.cancel_mark().await.unwrap_or_else(|error| {
            tracing::warn!(%tier, %error, "cannot read the cancel mark; the next poll reads it again");
            None
        });
        let worker = Arc::new(self);
        // Receiving stops when this is cancelled: by shutdown (its parent), or by the watchdog on engine loss.
        let receiving = shutdown.child_token();
        let (answering_tx, answering) = watch::channel(true);
        let watchdog = tokio::spawn(Arc::clone(&worker).watch_engine(answering_tx, receiving.clone()));
        let adapting = worker.config.adaptive.then(|| tokio::spawn(Arc::clone(&worker).adapt_limit()));
        let reporting = tokio::spawn(saturation_report::run(
            Arc::clone(&worker.slots),
            worker.config.service.clone(),
            worker.metrics.clone(),
        ));
        let watching = {
            let worker = Arc::clone(&worker);
            tokio::spawn(
                async move { worker.cancels.run(worker.store.as_ref(), worker.config.cancel_poll, mark).await },
            )
        };
        let mut in_flight = InFlight::default();
        worker.receive_until_stopped(&mut in_flight, &receiving, answering).await;
        if let Some(adapting) = adapting {
            adapting.abort();
        }
        reporting.abort();
        worker.finish_in_flight(&mut in_flight).await;
        watching.abort();
        watchdog.abort();
        if let Some(webhooks) = &worker.webhooks {
            webhooks.finish(DRAIN_GRACE).await;
        }
        if let Some(events) = &worker.events {
            events.finish(DRAIN_GRACE).await;
        }
        if worker.engine_lost.is_cancelled() {
            let released = in_flight.released;
            tracing::error!(%tier, released, "worker stopped: engine lost; its messages are back in the queue");
            Stopped::EngineLost { released }
        } else {
            tracing::info!(%tier, "worker stopped");
            Stopped::Drained
        }
    }

    /// Fills free slots from the lanes (high first, see `lanes`) while the engine answers, until `receiving` is
    /// cancelled; then hands back, unstarted, whatever a receive brought after that.
    async fn receive_until_stopped(
        self: &Arc<Self>,
        in_flight: &mut InFlight,
        receiving: &CancellationToken,
        mut answering: watch::Receiver<bool>,
    ) {
        let tier = self.config.tier;
        let mut lanes = LaneReceiver::new(self.lanes.clone(), self.config.wait_time);
        loop {
            in_flight.reap_finished();
            if !wait_until_answering(&mut answering, receiving).await {
                break;
            }
            // Free slots, plus room for receiving ahead, less the leases already waiting for a slot; none while more
            // results wait to be stored than the limit has slots.
            let storing = self.storing.load(Ordering::Relaxed);
            let waiting = in_flight.tasks.len().saturating_sub(self.slots.in_flight() + storing);
            let available = if storing > self.slots.limit() {
                0
            } else {
                (self.slots.free() + self.receive_ahead()).saturating_sub(waiting)
            };
            let free = lanes.unpromised(available);
            if free > 0 {
                // A zero-wait receive: let it finish, so a stop never drops messages it already took.
                let ready = lanes.take_ready(free).await;
                if receiving.is_cancelled() {
                    in_flight.released += self.hand_back_unstarted(ready.unwrap_or_default()).await;
                    break;
                }
                match ready {
                    Ok(leases) if !leases.is_empty() => {
                        self.start(&mut in_flight.tasks, leases);
                        continue;
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::warn!(%tier, %error, "receive failed; retrying in 1 s");
                        tokio::select! {
                            biased;
                            () = receiving.cancelled() => break,
                            () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        }
                    }
                }
            }
            if available > 0 {
                lanes.poll_idle_lanes(free);
            } else if self.high_waiting.load(Ordering::Relaxed) == 0 && self.preemption.any_running() {
                // A high-priority request received now gets the next slot first, ahead of any lease waiting, or a
                // young normal or batch request's slot (see `wait_for_slot`). One at a time is held so.
                lanes.poll_high_lane();
            }
            tokio::select! {
                biased;
                () = receiving.cancelled() => break,
                (lane, polled) = lanes.next_polled() => match polled {
                    Ok(leases) => self.start(&mut in_flight.tasks, leases),
                    Err(error) => tracing::warn!(%tier, %lane, %error, "long poll failed; polling again"),
                },
                Some(done) = in_flight.tasks.join_next(), if !in_flight.tasks.is_empty() => in_flight.record(done),
                // A slot came free (the limit grew, or a request's engine call ended while it stores its result):
                // fill it now, not when a request's task next ends.
                () = self.slots.freed() => {}
            }
        }
        in_flight.released += self.hand_back_unstarted(lanes.close().await).await;
    }

    /// Waits for every request in flight. After an engine loss they are already handing their messages back;
    /// on shutdown they may finish for the drain timeout, then `hand_back` makes the rest hand theirs back.
    async fn finish_in_flight(&self, in_flight: &mut InFlight) {
        let tier = self.config.tier;
        let unfinished = in_flight.tasks.len();
        if self.engine_lost.is_cancelled() {
            tracing::warn!(%tier, in_flight = unfinished, "worker stopped receiving: releasing unfinished requests");
        } else {
            let drain_timeout_s = self.config.drain_timeout.as_secs_f64();
            tracing::info!(%tier, in_flight = unfinished, drain_timeout_s, "worker draining: finishing requests in flight");
        }
        let drain_deadline = tokio::time::sleep(self.config.drain_timeout);
        tokio::pin!(drain_deadline);
        loop {
            tokio::select! {
                done = in_flight.tasks.join_next() => match done {
                    Some(done) => in_flight.record(done),
                    None => break,
                },
                () = &mut drain_deadline, if !self.hand_back.is_cancelled() => {
                    tracing::warn!(%tier, unfinished = in_flight.tasks.len(), "drain timeout: handing the unfinished messages back to the queue");
                    self.hand_back.cancel();
                }
            }
        }
    }

    /// Runs each lease in its own task, in a free slot; a lease received beyond the free slots (received ahead,
    /// lanes answering at once, or a high-priority one while the slots are full) is checked at once (parsed, its
    /// result looked for) and then waits for a slot (see `wait_for_slot`), as does a request that gave its slot up.
    fn start(self: &Arc<Self>, in_flight: &mut JoinSet<Disposition>, leases: Vec<Lease>) {
        if !leases.is_empty() {
            self.cold_start.request_received();
        }
        for lease in leases {
            let worker = Arc::clone(self);
            let mut free_slot = self.slots.try_take();
            // Entered at once, so the receive loop knows a high-priority request could take this slot.
            let mut preemptible = (lease.preemptible && free_slot.is_some()).then(|| self.preemption.register());
            in_flight.spawn(async move {
                // Before its first look at its document (in `prepare`): no cancel falls between the two.
                let mut cancels = worker.cancels.subscribe();
                let request = match worker.prepare(&lease).await {
                    Ok(request) => request,
                    Err(ended) => return ended,
                };
                // A request gives its slot up at most once.
                let mut may_give_up = lease.preemptible;
                loop {
                    let slot = match free_slot.take() {
                        Some(slot) => slot,
                        None => match worker.wait_for_slot(&lease).await {
                            // Canceled (or done elsewhere) while it waited: it never reaches the engine again.
                            Some(_slot) if let Some(ended) = worker.ended_already(&lease, &request).await => {
                                return ended;
                            }
                            Some(slot) => {
                                preemptible = may_give_up.then(|| worker.preemption.register());
                                slot
                            }
                            None => return worker.release(&lease).await,
                        },
                    };
                    let run = worker.run_request(&lease, &request, slot, preemptible.take(), &mut cancels);
                    if let Some(ended) = run.await {
                        return ended;
                    }
                    may_give_up = false;
                }
            });
        }
    }

    /// Waits for a slot with the message's visibility renewed; None if the engine is lost (or the drain times out)
    /// first. A high-priority request gets the next slot ahead of the others and, once it has waited its patience,
    /// may take a young normal or batch request's slot (see `preemption`).
    async fn wait_for_slot(&self, lease: &Lease) -> Option<Slot> {
        let slot = async {
            if lease.lane != Priority::High {
                return self.slots.take().await;
            }
            let _waiting = Gauged::enter(&self.high_waiting);
            let first = self.slots.take_first();
            tokio::pin!(first);
            if self.may_preempt() && self.move_ahead_of_queued() > 0 {
                return first.await;
            }
            tokio::select! {
                slot = &mut first => return slot,
                () = tokio::time::sleep(self.preemption.patience()) => {}
            }
            if self.may_preempt() && self.preemption.for_high_priority() {
                tracing::info!(tier = %self.config.tier, "high-priority request takes the slot of the youngest normal request");
            }
            first.await
        };
        self.with_heartbeat(lease, async {
            tokio::select! {
                biased;
                () = self.hand_back.cancelled() => None,
                slot = slot => Some(slot),
            }
        })
        .await
    }

    /// Messages to hold beyond the free slots, ready for the next slots that free: where a receive is a network
    /// round trip (SQS), as many as the limit, up to one receive's worth (`MAX_MESSAGES_PER_CALL`). Requests of like length started
    /// together end together, so a whole batch of slots can free at once: each is refilled at once, not after a
    /// receive. None on the embedded queue, where a receive takes microseconds. A high-priority request still takes
    /// the next free slot ahead of these (see `wait_for_slot`).
    fn receive_ahead(&self) -> usize {
        if self.lanes.normal.receive_is_remote() { self.slots.limit().clamp(1, MAX_MESSAGES_PER_CALL) } else { 0 }
    }
}

/// One request counted in a gauge while it is in one state (waiting for a slot, storing its result).
struct Gauged<'a>(&'a AtomicUsize);

impl<'a> Gauged<'a> {
    fn enter(gauge: &'a AtomicUsize) -> Self {
        gauge.fetch_add(1, Ordering::Relaxed);
        Gauged(gauge)
    }
}

impl Drop for Gauged<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Resolves when a preemptible request is asked for its slot; never for another (None).
async fn asked_for_slot(preemptible: Option<&mut Preemptible>) {
    match preemptible {
        Some(preemptible) => preemptible.asked().await,
        None => std::future::pending().await,
    }
}

/// The request tasks a worker runs, and how many of them handed their message back.
#[derive(Default)]
struct InFlight {
    tasks: JoinSet<Disposition>,
    released: usize,
}

impl InFlight {
    /// Counts a finished task; logs a panicked one.
    fn record(&mut self, done: Result<Disposition, tokio::task::JoinError>) {
        match done {
            Ok(disposition) => self.released += usize::from(disposition == Disposition::Released),
            Err(error) => {
                tracing::error!(%error, "a request task panicked; its message will be retried after the visibility timeout");
            }
        }
    }

    fn reap_finished(&mut self) {
        while let Some(done) = self.tasks.try_join_next() {
            self.record(done);
        }
    }
}
