//! The worker: lease a message from a tier's lanes → heartbeat → infer → store the result → delete, then the
//! callback; retry policy, deadlines, cancels, drain, engine loss.

pub mod adaptive_limit;
pub mod callbacks;
pub mod lanes;
pub mod preemption;
pub mod saturation_report;
pub mod shared_lane;
pub mod slots;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::contract::engine_load::EngineLoad;
use crate::contract::outcome::{ErrorCode, Processing, ResultDocument};
use crate::contract::request::{InferenceRequest, Intake};
use crate::contract::request_id::RequestId;
use crate::contract::tier::{Lanes, Priority, Tier};
use crate::infra::metrics::{self, Emf, Metric};
use crate::ports::{
    Completion, DEFAULT_MAX_RECEIVE_COUNT, Engine, EngineError, Message, PutOutcome, Queue, ResultStore, Service,
    StoreError,
};
use crate::worker::adaptive_limit::AdaptiveLimit;
use crate::worker::callbacks::webhook::{Callback, DRAIN_GRACE, Webhooks};
use crate::worker::lanes::{LaneReceiver, Lease};
use crate::worker::preemption::{Preemptible, Preemption};
use crate::worker::slots::{Slot, Slots};

/// The worker's defaults: `WorkerConfig::new` and the command line (`cmd::args::TuningArgs`) both read them.
pub mod defaults {
    /// The ceiling of the adaptive in-flight limit: above the generation slots of any one engine it serves, with
    /// room for the queue the limit keeps inside it (`adaptive_limit`). vLLM's OpenAI server runs at most 256
    /// sequences at once by default on a GPU under 70 GiB (the L40S of both tiers), 1024 on larger ones.
    pub(crate) const CONCURRENCY: u32 = 2048;
    pub const WAIT_TIME_SECONDS: u64 = 20;
    pub(crate) const RETRY_BASE_SECONDS: f64 = 2.0;
    pub(crate) const ENGINE_LOSS_WINDOW_SECONDS: u64 = 30;
    pub(crate) const CANCEL_POLL_SECONDS: f64 = 5.0;
    pub const DRAIN_TIMEOUT_SECONDS: u64 = 100;
    pub(crate) const TASK_ARN: &str = "local";
}

/// How often the engine's health is probed, before receiving and all along.
pub(crate) const HEALTH_INTERVAL: Duration = Duration::from_secs(1);
/// How often the engine's load gauges are read to adapt the in-flight limit.
const LOAD_INTERVAL: Duration = Duration::from_millis(250);
/// The same during the limit's first climb (its slow start), so a large engine is filled within half a second.
const CLIMB_INTERVAL: Duration = Duration::from_millis(50);
/// After an engine answers without load gauges, readings skipped before asking again (the limit then follows
/// the latency of finished requests).
const LOAD_RETRY_READINGS: u32 = 120;
/// Most messages received ahead of the free slots (see `Worker::receive_ahead`): one SQS receive's worth.
const RECEIVE_AHEAD_MAX: usize = 10;
/// Least time between two log lines (and metric lines) about the in-flight limit.
const LIMIT_REPORT_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub tier: Tier,
    /// Requests in flight at most: the ceiling of the adaptive limit, which follows the engine's free slots.
    /// Never receives more messages than free slots.
    pub concurrency: usize,
    /// Whether the in-flight limit adapts to the engine's load (else it stays at `concurrency`).
    pub adaptive: bool,
    /// Long-poll wait of one receive.
    pub wait_time: Duration,
    /// Visibility the heartbeat keeps renewing while a request runs (renewed every third of it).
    pub visibility_timeout: Duration,
    /// The queue's maxReceiveCount: the attempt with this receive count is the last.
    pub max_receive_count: u32,
    /// Back-off after a transient failure: base × 2^(attempt−1), at most the visibility timeout.
    pub retry_base: Duration,
    /// How often to probe the engine's health: before starting, and all along while running.
    pub health_interval: Duration,
    /// How long the engine may fail its health probes before the worker gives up on it (GPU lost).
    pub engine_loss_window: Duration,
    /// How often a running request looks for a document stored meanwhile (a cancel): then its engine call is
    /// dropped, which aborts the generation in vLLM (the local llama.cpp engine finishes it anyway).
    pub cancel_poll: Duration,
    /// How long a stopping worker keeps finishing the requests in flight; then it hands every unfinished
    /// message back (visibility 0), so a stop timeout shorter than a long generation costs no visibility wait.
    pub drain_timeout: Duration,
    pub task_arn: String,
    /// The ECS service the worker runs in: the dimensions its saturation is published under (`saturation_report`).
    pub service: Service,
}

impl WorkerConfig {
    pub fn new(tier: Tier) -> Self {
        WorkerConfig {
            tier,
            concurrency: defaults::CONCURRENCY as usize,
            adaptive: true,
            wait_time: Duration::from_secs(defaults::WAIT_TIME_SECONDS),
            visibility_timeout: tier.default_visibility_timeout(),
            max_receive_count: DEFAULT_MAX_RECEIVE_COUNT,
            retry_base: Duration::from_secs_f64(defaults::RETRY_BASE_SECONDS),
            health_interval: HEALTH_INTERVAL,
            engine_loss_window: Duration::from_secs(defaults::ENGINE_LOSS_WINDOW_SECONDS),
            cancel_poll: Duration::from_secs_f64(defaults::CANCEL_POLL_SECONDS),
            drain_timeout: Duration::from_secs(defaults::DRAIN_TIMEOUT_SECONDS),
            task_arn: defaults::TASK_ARN.into(),
            service: Service::of_tier(Service::DEFAULT_CLUSTER, Service::DEFAULT_NAME, tier),
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
}

/// The adaptive limit and what was last reported about it.
struct LimitState {
    limit: AdaptiveLimit,
    reported: Option<(usize, Instant)>,
}

/// How a running request ended.
enum Inference {
    Done(Result<Completion, EngineError>),
    /// A document appeared meanwhile (a cancel, or another worker finished first).
    Superseded,
    /// The engine was lost or the drain timed out: hand the message back.
    HandBack,
    /// The request gave its slot up (see `preemption`): it runs again in the next free slot.
    GaveUpSlot,
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
        }
    }

    /// Its requests in flight and in-flight limit, as they change.
    pub fn slots(&self) -> Arc<Slots> {
        Arc::clone(&self.slots)
    }

    /// Declares the engine lost as soon as `gone` is cancelled (its process exited), releasing every message.
    pub fn with_engine_gone(mut self, gone: CancellationToken) -> Self {
        self.engine_gone = gone;
        self
    }

    /// Sends a callback for every stored document whose request has a callbackUrl.
    pub fn with_webhooks(mut self, webhooks: Webhooks) -> Self {
        self.webhooks = Some(webhooks);
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
        tracing::info!(%tier, in_flight_limit = self.slots.limit(), ceiling = self.config.concurrency, "worker polling");
        self.draining = shutdown.clone();
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
        let mut in_flight = InFlight::default();
        worker.receive_until_stopped(&mut in_flight, &receiving, answering).await;
        if let Some(adapting) = adapting {
            adapting.abort();
        }
        reporting.abort();
        worker.finish_in_flight(&mut in_flight).await;
        watchdog.abort();
        if let Some(webhooks) = &worker.webhooks {
            webhooks.finish(DRAIN_GRACE).await;
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
    /// two lanes answering at once, or a high-priority one while the slots are full) is checked at once (parsed, its
    /// result looked for) and then waits for a slot (see `wait_for_slot`), as does a request that gave its slot up.
    fn start(self: &Arc<Self>, in_flight: &mut JoinSet<Disposition>, leases: Vec<Lease>) {
        for lease in leases {
            let worker = Arc::clone(self);
            let mut free_slot = self.slots.try_take();
            // Entered at once, so the receive loop knows a high-priority request could take this slot.
            let mut preemptible = (lease.preemptible && free_slot.is_some()).then(|| self.preemption.register());
            in_flight.spawn(async move {
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
                            Some(slot) => {
                                preemptible = may_give_up.then(|| worker.preemption.register());
                                slot
                            }
                            None => return worker.release(&lease).await,
                        },
                    };
                    if let Some(ended) = worker.run_request(&lease, &request, slot, preemptible.take()).await {
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

    /// Probes the engine every health interval while the worker runs; publishes whether it answers (its probe, or a
    /// generation completed since the previous probe), and declares it lost (cancels `engine_lost`, stops
    /// receiving) once it has failed for the whole loss window.
    async fn watch_engine(self: Arc<Self>, answering: watch::Sender<bool>, receiving: CancellationToken) {
        let tier = self.config.tier;
        let window = self.config.engine_loss_window;
        let mut failing_since: Option<Instant> = None;
        let mut generations_seen = 0;
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.config.health_interval) => {}
                () = self.engine_gone.cancelled() => {
                    tracing::error!(%tier, "engine process exited: releasing every unfinished message");
                    answering.send_replace(false);
                    receiving.cancel();
                    self.engine_lost.cancel();
                    return;
                }
            }
            let probe_answered = self.engine.healthy().await;
            let generations = self.generations.load(Ordering::Relaxed);
            let answers = probe_answered || generations > generations_seen;
            generations_seen = generations;
            if answers {
                if failing_since.take().is_some() {
                    tracing::info!(%tier, "engine answers again");
                }
                answering.send_replace(true);
                continue;
            }
            let since = *failing_since.get_or_insert_with(|| {
                tracing::warn!(%tier, loss_window_s = window.as_secs_f64(), "engine not answering its health probe: receiving paused");
                Instant::now()
            });
            answering.send_replace(false);
            if since.elapsed() >= window {
                tracing::error!(%tier, loss_window_s = window.as_secs_f64(), "engine lost: stopping and releasing every unfinished message");
                // In this order: requests hand their messages back only once nothing can receive them again.
                receiving.cancel();
                self.engine_lost.cancel();
                return;
            }
        }
    }

    /// Messages to hold beyond the free slots, ready for the next slots that free: where a receive is a network
    /// round trip (SQS), as many as the limit, up to one receive's worth (10). Requests of like length started
    /// together end together, so a whole batch of slots can free at once: each is refilled at once, not after a
    /// receive. None on the embedded queue, where a receive takes microseconds. A high-priority request still takes
    /// the next free slot ahead of these (see `wait_for_slot`).
    fn receive_ahead(&self) -> usize {
        if self.lanes.normal.receive_is_remote() { self.slots.limit().clamp(1, RECEIVE_AHEAD_MAX) } else { 0 }
    }

    /// Reads the engine's load every `LOAD_INTERVAL` (`CLIMB_INTERVAL` during the limit's first climb) and sets
    /// the in-flight limit from it. An engine without load gauges leaves the limit to the latency of finished
    /// requests, and is asked again now and then.
    async fn adapt_limit(self: Arc<Self>) {
        let mut skip = 0;
        loop {
            if skip > 0 {
                skip -= 1;
            } else if let Some(load) = self.engine.load().await {
                self.engine_gauges.store(true, Ordering::Relaxed);
                self.engine_drops_abandoned.store(load.drops_abandoned, Ordering::Relaxed);
                let peak = self.slots.take_peak();
                self.adjust_limit(Some(load), |limit, _| limit.on_engine_load(load, peak));
            } else {
                self.engine_gauges.store(false, Ordering::Relaxed);
                self.engine_drops_abandoned.store(false, Ordering::Relaxed);
                skip = LOAD_RETRY_READINGS;
            }
            let climbing = self.limit.lock().unwrap_or_else(std::sync::PoisonError::into_inner).limit.climbing();
            tokio::time::sleep(if climbing { CLIMB_INTERVAL } else { LOAD_INTERVAL }).await;
        }
    }

    /// For a high-priority request: pulls back the youngest normal and batch requests, as many as the engine holds
    /// queued (they have generated nothing). The first slot one frees goes to the high-priority request, and they
    /// are sent again after it: it waits inside the engine for the next generation slot only. How many were asked.
    fn move_ahead_of_queued(&self) -> usize {
        let queued = self.engine_queued_ours.swap(0, Ordering::Relaxed) as usize;
        let pulled = if queued > 0 { self.preemption.pull_back(queued) } else { 0 };
        if pulled > 0 {
            tracing::debug!(tier = %self.config.tier, pulled, "high-priority request moves ahead of the requests queued inside the engine");
        }
        pulled
    }

    /// Whether a request may give its slot up: the engine drops the request it abandons.
    fn may_preempt(&self) -> bool {
        self.engine_drops_abandoned.load(Ordering::Relaxed)
    }

    /// A request's engine time and generated tokens: what the limit follows when the engine has no load gauges.
    fn observe_latency(&self, engine_time: Duration, completion_tokens: u64) {
        self.preemption.observe(engine_time);
        if self.config.adaptive && !self.engine_gauges.load(Ordering::Relaxed) {
            let seconds = engine_time.as_secs_f64();
            self.adjust_limit(None, |limit, in_flight| limit.on_latency(seconds, completion_tokens, in_flight));
        }
    }

    /// Applies one decision of the adaptive limit to the slots; logs and records the limit when it changed, at
    /// most every `LIMIT_REPORT_INTERVAL`.
    fn adjust_limit(&self, load: Option<EngineLoad>, decide: impl FnOnce(&mut AdaptiveLimit, usize) -> usize) {
        let in_flight = self.slots.in_flight();
        let mut state = self.limit.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let limit = decide(&mut state.limit, in_flight);
        if limit != self.slots.limit() {
            self.slots.resize(limit);
        }
        // Our requests the engine holds waiting beyond the limit are pulled back: they lose nothing, and a
        // high-priority request no longer queues behind them inside the engine.
        let queued = load.filter(|load| load.drops_abandoned).map_or(0, |load| load.waiting as usize);
        let beyond = in_flight.saturating_sub(limit).min(queued);
        let pulled = if beyond > 0 { self.preemption.pull_back(beyond) } else { 0 };
        if pulled > 0 {
            tracing::debug!(tier = %self.config.tier, pulled, "requests pulled back from the engine's queue");
        }
        if load.is_some() {
            self.engine_queued_ours.store(queued.min(in_flight).saturating_sub(pulled) as u64, Ordering::Relaxed);
        }
        let due = state.reported.is_none_or(|(last, at)| last != limit && at.elapsed() >= LIMIT_REPORT_INTERVAL);
        if !due {
            return;
        }
        state.reported = Some((limit, Instant::now()));
        drop(state);
        let tier = self.config.tier;
        let (running, waiting) = load.map_or((None, None), |l| (Some(l.running), Some(l.waiting)));
        let source = if load.is_some() { "engine gauges" } else { "latency" };
        tracing::info!(%tier, in_flight_limit = limit, in_flight, engine_running = running, engine_waiting = waiting, source, "in-flight limit");
        let mut values = vec![Metric::count(metrics::IN_FLIGHT_LIMIT, limit as u64)];
        if let Some(load) = load {
            values.push(Metric::count(metrics::ENGINE_REQUESTS_RUNNING, load.running));
            values.push(Metric::count(metrics::ENGINE_REQUESTS_WAITING, load.waiting));
        }
        self.metrics.emit(&[("Tier", tier.as_str())], &values);
    }

    /// Waits until the engine answers /health; false if `stop` is cancelled first.
    async fn wait_for_engine(&self, stop: &CancellationToken) -> bool {
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
                () = stop.cancelled() => return false,
            }
        }
    }

    /// Reads a received message: the request to run, or how the message ended (malformed: dead-lettered; a
    /// document already stored: deleted). Never panics on bad input.
    async fn prepare(&self, lease: &Lease) -> Result<InferenceRequest, Disposition> {
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
        let id = request.request_id;
        match self.store.exists(id).await {
            Ok(true) => {
                tracing::info!(request_id = %id, %tier, "a document (result or cancel) is already stored; deleting the message");
                if !self.mark_batch_line(&request, None).await {
                    return Err(Disposition::RetryLater);
                }
                self.delete(lease).await;
                return Err(Disposition::AlreadyDone);
            }
            Ok(false) => {}
            // Only a shortcut: the conditional write below still keeps a first result from being replaced.
            Err(error) => {
                tracing::warn!(request_id = %id, %tier, %error, "cannot tell whether a result exists; running the request");
            }
        }
        Ok(request)
    }

    /// Runs a prepared request to the end: deadline, inference in `slot` (given back as the engine answers, so the
    /// next request starts while this one stores its result), result, delete. None when it gave its slot up before
    /// the engine answered (only if `preemptible`; then it waits for another).
    async fn run_request(
        &self,
        lease: &Lease,
        request: &InferenceRequest,
        slot: Slot,
        preemptible: Option<Preemptible>,
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
        let inference = self.infer(lease, request, preemptible).await;
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

    /// Stores the document (first writer wins), deletes the message, records it and sends the callback. A document
    /// stored first (a cancel, or another worker's result) stands: this one is neither recorded nor called back.
    async fn finish(&self, lease: &Lease, request: &InferenceRequest, document: ResultDocument) -> Disposition {
        let (id, tier) = (request.request_id, self.config.tier);
        let body = document.to_json();
        match self.with_heartbeat(lease, self.store_result(id, &body)).await {
            Ok(PutOutcome::Created) => {}
            Ok(PutOutcome::AlreadyExists) => {
                tracing::info!(request_id = %id, %tier, "another document (a result or a cancel) was stored first; this one is dropped");
                if !self.mark_batch_line(request, None).await {
                    return self.retry_later(lease, "the batch line's mark was not written").await;
                }
                self.delete(lease).await;
                return Disposition::AlreadyDone;
            }
            Err(error) => return self.retry_later(lease, &error.to_string()).await,
        }
        if !self.mark_batch_line(request, Some(&body)).await {
            return self.retry_later(lease, "the batch line's mark was not written").await;
        }
        // A batch line carries no callback URL, so a request with one has nothing to mark and reaches this at once.
        if let (Some(url), Some(webhooks)) = (&request.callback_url, &self.webhooks) {
            webhooks.send(Callback { url: url.clone(), request_id: id, tier, body });
        }
        self.delete(lease).await;
        self.record(&document);
        match document.error {
            None => Disposition::Succeeded,
            Some(error) => Disposition::Failed(error.code),
        }
    }

    /// For a Batch API line, leaves the mark that it ended, as the stored document says (`stored`, or read back when
    /// another writer stored it): before the message is deleted, so a crash between the two only repeats the mark.
    /// False when the mark could not be written (the message then comes back and the mark is tried again).
    async fn mark_batch_line(&self, request: &InferenceRequest, stored: Option<&[u8]>) -> bool {
        let (Some(line), Some(objects)) = (&request.batch, self.store.objects()) else {
            return true;
        };
        let marked = match stored {
            Some(document) => objects.put_if_absent(&line.end_mark(document), b"").await.map(drop),
            None => match self.store.get(request.request_id).await {
                Ok(Some(document)) => objects.put_if_absent(&line.end_mark(&document), b"").await.map(drop),
                Ok(None) => Err(StoreError::unavailable("the stored document is gone")),
                Err(error) => Err(error),
            },
        };
        if let Err(error) = &marked {
            tracing::warn!(request_id = %request.request_id, batch = %line.id, line = line.line, %error, "could not mark the batch line ended");
        }
        marked.is_ok()
    }

    /// Writes the document, first writer wins. A store that refuses is retried with back-off, keeping the
    /// generation, until the visibility timeout is spent or the worker drains: a store outage then costs no
    /// receive (and no attempt toward the dead-letter queue) per retry.
    async fn store_result(&self, id: RequestId, body: &[u8]) -> Result<PutOutcome, StoreError> {
        let tier = self.config.tier;
        let give_up = Instant::now() + self.config.visibility_timeout;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let error = match self.store.put_if_absent(id, body).await {
                Ok(outcome) => return Ok(outcome),
                Err(error) => error,
            };
            let delay = self.config.retry_delay(attempt);
            if Instant::now() + delay > give_up || self.draining.is_cancelled() {
                return Err(error);
            }
            tracing::warn!(request_id = %id, %tier, attempt, retry_in_s = delay.as_secs_f64(), %error, "result store refused the write; retrying on the same lease");
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.draining.cancelled() => return Err(error),
            }
        }
    }

    /// Makes messages received as the worker stopped receiving visible again at once; how many.
    async fn hand_back_unstarted(&self, messages: Vec<Lease>) -> usize {
        if !messages.is_empty() {
            tracing::info!(tier = %self.config.tier, messages = messages.len(), "received while stopping: handing back unstarted");
        }
        for lease in &messages {
            self.set_visibility(lease, Duration::ZERO).await;
        }
        messages.len()
    }

    /// Hands the message back at once, for another task (or this one's successor) to run.
    async fn release(&self, lease: &Lease) -> Disposition {
        let reason = if self.engine_lost.is_cancelled() { "engine lost" } else { "drain timeout" };
        tracing::warn!(tier = %self.config.tier, reason, "message handed back for another task");
        self.set_visibility(lease, Duration::ZERO).await;
        Disposition::Released
    }

    fn queue(&self, lease: &Lease) -> &Q {
        self.lanes.get(lease.lane)
    }

    /// Runs the request under a heartbeat. A failure while the engine does not answer its health probe is
    /// the engine's, not the request's: the message is held until the engine answers again (then the
    /// request is retried on the same lease) or is declared lost (then the message is handed back). A
    /// document stored meanwhile (a cancel), or a `preemptible` request asked for its slot, ends the run: the
    /// engine call is dropped, which aborts it.
    async fn infer(
        &self,
        lease: &Lease,
        request: &InferenceRequest,
        mut preemptible: Option<Preemptible>,
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
            () = self.document_stored(request.request_id) => Inference::Superseded,
            outcome = self.with_heartbeat(lease, attempts) => Inference::Done(outcome),
            () = asked_for_slot(preemptible.as_mut()) => Inference::GaveUpSlot,
        }
    }

    /// Resolves once a document for `request_id` exists, looking every `cancel_poll`; a failed look is ignored
    /// (the next one may succeed, and the result write settles who was first anyway).
    async fn document_stored(&self, request_id: RequestId) {
        loop {
            tokio::time::sleep(self.config.cancel_poll).await;
            if let Ok(true) = self.store.exists(request_id).await {
                return;
            }
        }
    }

    /// Keeps the message invisible while `work` runs, renewing every third of the visibility timeout.
    async fn with_heartbeat<T>(&self, lease: &Lease, work: impl Future<Output = T>) -> T {
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

    async fn retry_later(&self, lease: &Lease, error: &str) -> Disposition {
        let attempt = lease.message.receive_count;
        let delay = self.config.retry_delay(attempt);
        tracing::warn!(tier = %self.config.tier, attempt, retry_in_s = delay.as_secs_f64(), %error, "transient failure; the message will be retried");
        self.set_visibility(lease, delay).await;
        Disposition::RetryLater
    }

    /// Makes the message visible again after `delay` (zero: at once).
    async fn set_visibility(&self, lease: &Lease, delay: Duration) {
        if let Err(error) = self.queue(lease).change_visibility(&lease.message.receipt, delay).await {
            tracing::warn!(tier = %self.config.tier, %error, "could not change the message's visibility; its visibility timeout applies");
        }
    }

    async fn delete(&self, lease: &Lease) {
        if let Err(error) = self.queue(lease).delete(&lease.message.receipt).await {
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

fn queue_wait_ms(message: &Message) -> u64 {
    let now = chrono::Utc::now().timestamp_millis();
    u64::try_from(now - message.sent_at_ms).unwrap_or(0)
}

/// Waits while the engine fails its health probes; false once receiving stops.
async fn wait_until_answering(answering: &mut watch::Receiver<bool>, receiving: &CancellationToken) -> bool {
    tokio::select! {
        biased;
        () = receiving.cancelled() => false,
        answered = answering.wait_for(|answering| *answering) => answered.is_ok(),
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
