//! Filling the engine: the in-flight limit and the loop that sets it from the engine's load (or from the latency of
//! finished requests), the pull-backs that keep a high-priority request from queueing inside the engine, and the
//! counts of requests waiting for a slot or storing their result.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::contract::engine_load::EngineLoad;
use crate::contract::tier::Tier;
use crate::infra::metrics::{self, Emf, Metric};
use crate::ports::Engine;
use crate::worker::adaptive_limit::AdaptiveLimit;
use crate::worker::config::WorkerConfig;
use crate::worker::preemption::Preemption;
use crate::worker::slots::Slots;

/// The slots a worker fills, how many it may fill, and what the engine's last load reading said.
pub(super) struct InFlightLimit {
    /// Slots for requests in flight, as many as the adaptive limit allows.
    slots: Arc<Slots>,
    /// Normal and batch requests in the engine, for a high-priority request (or a lowered limit) to take a slot from.
    preemption: Arc<Preemption>,
    state: Mutex<LimitState>,
    reading: EngineReading,
    /// High-priority requests waiting for a slot.
    pub(super) high_waiting: AtomicUsize,
    /// Requests storing their result after the engine answered: they gave their slot back to the next request. More
    /// of them than the limit (a slow store) pause receiving.
    pub(super) storing: AtomicUsize,
    adaptive: bool,
    tier: Tier,
    metrics: Emf,
}

/// What the engine's last load reading said.
#[derive(Default)]
struct EngineReading {
    /// Whether it had gauges (else the limit follows finished requests' latency).
    gauges: AtomicBool,
    /// Whether the engine drops a request whose client hung up: only then does a request give its slot up (see
    /// `preemption`), as another engine would keep running it.
    drops_abandoned: AtomicBool,
    /// Requests the engine held waiting (at most ours in flight, less those pulled back since), on an engine that
    /// drops abandoned requests: a high-priority request moves ahead of them at once.
    queued_ours: AtomicU64,
}

impl InFlightLimit {
    pub(super) fn new(config: &WorkerConfig, metrics: Emf) -> Self {
        let limit = if config.adaptive {
            AdaptiveLimit::new(config.concurrency)
        } else {
            AdaptiveLimit::fixed(config.concurrency)
        };
        InFlightLimit {
            slots: Slots::new(limit.limit()),
            preemption: Preemption::new(),
            state: Mutex::new(LimitState { limit, reported: None }),
            reading: EngineReading::default(),
            high_waiting: AtomicUsize::new(0),
            storing: AtomicUsize::new(0),
            adaptive: config.adaptive,
            tier: config.tier,
            metrics,
        }
    }

    pub(super) fn slots(&self) -> &Arc<Slots> {
        &self.slots
    }

    pub(super) fn preemption(&self) -> &Arc<Preemption> {
        &self.preemption
    }

    /// Reads the engine's load every `LOAD_INTERVAL` (`CLIMB_INTERVAL` during the limit's first climb) and sets
    /// the in-flight limit from it. An engine without load gauges leaves the limit to the latency of finished
    /// requests, and is asked again now and then.
    pub(super) async fn adapt<E: Engine + ?Sized>(&self, engine: &E) {
        let mut skip = 0;
        loop {
            if skip > 0 {
                skip -= 1;
            } else if let Some(load) = self.read_load(engine).await {
                let peak = self.slots.take_peak();
                self.adjust_limit(Some(load), |limit, _| limit.on_engine_load(load, peak));
            } else {
                skip = LOAD_RETRY_READINGS;
            }
            let climbing = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).limit.climbing();
            tokio::time::sleep(if climbing { CLIMB_INTERVAL } else { LOAD_INTERVAL }).await;
        }
    }

    /// The in-flight limit for the first requests, from the engine's load before any is sent and, on an engine that
    /// keeps abandoned requests, the slots it reports (see `AdaptiveLimit::start_on`).
    pub(super) async fn first_limit<E: Engine + ?Sized>(&self, engine: &E) {
        if let Some(load) = self.read_load(engine).await {
            let slots = if load.drops_abandoned { None } else { engine.slots().await };
            self.adjust_limit(Some(load), |limit, _| limit.start_on(load, slots));
        }
    }

    /// The engine's load gauges, noting whether it has them and whether it drops abandoned requests.
    async fn read_load<E: Engine + ?Sized>(&self, engine: &E) -> Option<EngineLoad> {
        let load = engine.load().await;
        self.reading.gauges.store(load.is_some(), Ordering::Relaxed);
        self.reading.drops_abandoned.store(load.is_some_and(|load| load.drops_abandoned), Ordering::Relaxed);
        load
    }

    /// For a high-priority request: pulls back the youngest normal and batch requests, as many as the engine holds
    /// queued (they have generated nothing). The first slot one frees goes to the high-priority request, and they
    /// are sent again after it: it waits inside the engine for the next generation slot only. How many were asked.
    pub(super) fn move_ahead_of_queued(&self) -> usize {
        let queued = self.reading.queued_ours.swap(0, Ordering::Relaxed) as usize;
        let pulled = if queued > 0 { self.preemption.pull_back(queued) } else { 0 };
        if pulled > 0 {
            tracing::debug!(tier = %self.tier, pulled, "high-priority request moves ahead of the requests queued inside the engine");
        }
        pulled
    }

    /// Whether a request may give its slot up: the engine drops the request it abandons.
    pub(super) fn may_preempt(&self) -> bool {
        self.reading.drops_abandoned.load(Ordering::Relaxed)
    }

    /// A request's engine time and generated tokens: what the limit follows when the engine has no load gauges.
    pub(super) fn observe_latency(&self, engine_time: Duration, completion_tokens: u64) {
        self.preemption.observe(engine_time);
        if self.adaptive && !self.reading.gauges.load(Ordering::Relaxed) {
            let seconds = engine_time.as_secs_f64();
            self.adjust_limit(None, |limit, in_flight| limit.on_latency(seconds, completion_tokens, in_flight));
        }
    }

    /// Applies one decision of the adaptive limit to the slots; logs and records the limit when it changed, at
    /// most every `LIMIT_REPORT_INTERVAL`.
    pub(super) fn adjust_limit(
        &self,
        load: Option<EngineLoad>,
        decide: impl FnOnce(&mut AdaptiveLimit, usize) -> usize,
    ) {
        let in_flight = self.slots.in_flight();
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
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
            tracing::debug!(tier = %self.tier, pulled, "requests pulled back from the engine's queue");
        }
        if load.is_some() {
            self.reading.queued_ours.store(queued.min(in_flight).saturating_sub(pulled) as u64, Ordering::Relaxed);
        }
        let due = state.reported.is_none_or(|(last, at)| last != limit && at.elapsed() >= LIMIT_REPORT_INTERVAL);
        if !due {
            return;
        }
        state.reported = Some((limit, Instant::now()));
        drop(state);
        let tier = self.tier;
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
}

/// One request counted in a gauge while it is in one state (waiting for a slot, storing its result).
pub(super) struct Gauged<'a>(&'a AtomicUsize);

impl<'a> Gauged<'a> {
    pub(super) fn enter(gauge: &'a AtomicUsize) -> Self {
        gauge.fetch_add(1, Ordering::Relaxed);
        Gauged(gauge)
    }
}

impl Drop for Gauged<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The adaptive limit and what was last reported about it.
struct LimitState {
    limit: AdaptiveLimit,
    reported: Option<(usize, Instant)>,
}

/// How often the engine's load gauges are read to adapt the in-flight limit.
const LOAD_INTERVAL: Duration = Duration::from_millis(250);

/// The same during the limit's first climb (its slow start), so a large engine is filled within half a second.
const CLIMB_INTERVAL: Duration = Duration::from_millis(50);

/// After an engine answers without load gauges, readings skipped before asking again (the limit then follows
/// the latency of finished requests).
const LOAD_RETRY_READINGS: u32 = 120;

/// Least time between two log lines (and metric lines) about the in-flight limit.
const LIMIT_REPORT_INTERVAL: Duration = Duration::from_secs(1);
