//! Filling the engine: the loop that reads the engine's load and sets the in-flight limit from it (or from the
//! latency of finished requests), and the pull-backs that keep a high-priority request from queueing inside it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::contract::engine_load::EngineLoad;
use crate::infra::metrics::{self, Metric};
use crate::ports::{Engine, Queue, ResultStore};
use crate::worker::adaptive_limit::AdaptiveLimit;

use super::Worker;

impl<Q, S, E> Worker<Q, S, E>
where
    Q: Queue + ?Sized + 'static,
    S: ResultStore + ?Sized + 'static,
    E: Engine + ?Sized + 'static,
{
    /// Reads the engine's load every `LOAD_INTERVAL` (`CLIMB_INTERVAL` during the limit's first climb) and sets
    /// the in-flight limit from it. An engine without load gauges leaves the limit to the latency of finished
    /// requests, and is asked again now and then.
    pub(super) async fn adapt_limit(self: Arc<Self>) {
        let mut skip = 0;
        loop {
            if skip > 0 {
                skip -= 1;
            } else if let Some(load) = self.read_load().await {
                let peak = self.slots.take_peak();
                self.adjust_limit(Some(load), |limit, _| limit.on_engine_load(load, peak));
            } else {
                skip = LOAD_RETRY_READINGS;
            }
            let climbing = self.limit.lock().unwrap_or_else(std::sync::PoisonError::into_inner).limit.climbing();
            tokio::time::sleep(if climbing { CLIMB_INTERVAL } else { LOAD_INTERVAL }).await;
        }
    }

    /// The in-flight limit for the first requests, from the engine's load before any is sent (see
    /// `AdaptiveLimit::start_on`).
    pub(super) async fn first_limit(&self) {
        if let Some(load) = self.read_load().await {
            self.adjust_limit(Some(load), |limit, _| limit.start_on(load));
        }
    }

    /// The engine's load gauges, noting whether it has them and whether it drops abandoned requests.
    async fn read_load(&self) -> Option<EngineLoad> {
        let load = self.engine.load().await;
        self.engine_gauges.store(load.is_some(), Ordering::Relaxed);
        self.engine_drops_abandoned.store(load.is_some_and(|load| load.drops_abandoned), Ordering::Relaxed);
        load
    }

    /// For a high-priority request: pulls back the youngest normal and batch requests, as many as the engine holds
    /// queued (they have generated nothing). The first slot one frees goes to the high-priority request, and they
    /// are sent again after it: it waits inside the engine for the next generation slot only. How many were asked.
    pub(super) fn move_ahead_of_queued(&self) -> usize {
        let queued = self.engine_queued_ours.swap(0, Ordering::Relaxed) as usize;
        let pulled = if queued > 0 { self.preemption.pull_back(queued) } else { 0 };
        if pulled > 0 {
            tracing::debug!(tier = %self.config.tier, pulled, "high-priority request moves ahead of the requests queued inside the engine");
        }
        pulled
    }

    /// Whether a request may give its slot up: the engine drops the request it abandons.
    pub(super) fn may_preempt(&self) -> bool {
        self.engine_drops_abandoned.load(Ordering::Relaxed)
    }

    /// A request's engine time and generated tokens: what the limit follows when the engine has no load gauges.
    pub(super) fn observe_latency(&self, engine_time: Duration, completion_tokens: u64) {
        self.preemption.observe(engine_time);
        if self.config.adaptive && !self.engine_gauges.load(Ordering::Relaxed) {
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
}

/// The adaptive limit and what was last reported about it.
pub(super) struct LimitState {
    pub(super) limit: AdaptiveLimit,
    pub(super) reported: Option<(usize, Instant)>,
}

/// How often the engine's load gauges are read to adapt the in-flight limit.
pub(super) const LOAD_INTERVAL: Duration = Duration::from_millis(250);

/// The same during the limit's first climb (its slow start), so a large engine is filled within half a second.
pub(super) const CLIMB_INTERVAL: Duration = Duration::from_millis(50);

/// After an engine answers without load gauges, readings skipped before asking again (the limit then follows
/// the latency of finished requests).
pub(super) const LOAD_RETRY_READINGS: u32 = 120;

/// Least time between two log lines (and metric lines) about the in-flight limit.
pub(super) const LIMIT_REPORT_INTERVAL: Duration = Duration::from_secs(1);
