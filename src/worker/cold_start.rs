//! A worker's cold start made visible: the instants of its start (task start → image pulled → weights on disk →
//! engine healthy → first request received → first result written), the phases between them, and, once, when its
//! first result is written, one log line and the per-tier EMF metrics (`metrics::COLD_START`) that report them.

use std::fmt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use crate::contract::tier::Tier;
use crate::infra::metrics::{self, Emf, Metric};

/// What the start of a cold start is: the earliest instant known of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartedBy {
    /// ECS began pulling the task's image (`PullStartedAt` of the ECS task metadata endpoint).
    ImagePull,
    /// entrypoint.sh began (`GPUINFER_STARTED_AT`): the ECS task metadata endpoint gave no pull times.
    Entrypoint,
    /// `gpuinfer dev` started the engine's process.
    DevEngine,
    /// The worker itself started: nothing earlier is known.
    Worker,
}

impl StartedBy {
    fn as_str(self) -> &'static str {
        match self {
            StartedBy::ImagePull => "ecs image pull",
            StartedBy::Entrypoint => "entrypoint",
            StartedBy::DevEngine => "dev engine start",
            StartedBy::Worker => "worker start",
        }
    }
}

/// What is known of a start before the worker runs: when it began, and the steps done before the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    pub at: SystemTime,
    pub by: StartedBy,
    /// When ECS finished pulling the image (`PullStoppedAt`); None when the pull is not known.
    pub image_pulled: Option<SystemTime>,
    /// When fetch-model had the weights on disk; None when nothing was fetched (the engine loads the model itself).
    pub weights_on_disk: Option<SystemTime>,
}

impl Start {
    /// A start at `at`, known by nothing earlier than `by`, with no step before the engine.
    pub fn new(at: SystemTime, by: StartedBy) -> Self {
        Start { at, by, image_pulled: None, weights_on_disk: None }
    }

    /// A container's start: ECS's image pull (start, stop) when known, else the entrypoint's start, else now.
    pub fn of_container(
        image_pull: Option<(SystemTime, SystemTime)>,
        entrypoint: Option<SystemTime>,
        weights_on_disk: Option<SystemTime>,
    ) -> Self {
        let (at, by, image_pulled) = match (image_pull, entrypoint) {
            (Some((pull_started, pull_stopped)), _) => (pull_started, StartedBy::ImagePull, Some(pull_stopped)),
            (None, Some(at)) => (at, StartedBy::Entrypoint, None),
            (None, None) => (SystemTime::now(), StartedBy::Worker, None),
        };
        Start { at, by, image_pulled, weights_on_disk }
    }
}

/// The phases of a cold start, each from the instant before it; None for a step that did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Phases {
    pub image: Option<Duration>,
    pub weights: Option<Duration>,
    pub engine: Duration,
    pub first_request: Duration,
    pub first_result: Duration,
}

impl Phases {
    /// From the start to the first result written: the sum of the phases.
    pub fn total(&self) -> Duration {
        self.in_order().iter().flatten().sum()
    }

    /// The phases in the order of `metrics::COLD_START` (which names the total after them).
    fn in_order(&self) -> [Option<Duration>; 5] {
        [self.image, self.weights, Some(self.engine), Some(self.first_request), Some(self.first_result)]
    }

    fn metrics(&self) -> Vec<Metric> {
        let values = self.in_order().into_iter().chain([Some(self.total())]);
        metrics::COLD_START
            .into_iter()
            .zip(values)
            .filter_map(|(name, value)| value.map(|value| Metric::seconds(name, value.as_secs_f64())))
            .collect()
    }
}

/// The phases between `start`'s instants and the worker's own. An instant earlier than the one before it (ECS's
/// clock and the container's may differ a little) counts as that one: no phase is negative, and they add up to the
/// total.
pub(crate) fn phases(
    start: &Start,
    engine_healthy: SystemTime,
    first_request: SystemTime,
    first_result: SystemTime,
) -> Phases {
    let mut previous = start.at;
    let mut since_previous = |at: SystemTime| {
        let phase = at.duration_since(previous).unwrap_or_default();
        previous = previous.max(at);
        phase
    };
    Phases {
        image: start.image_pulled.map(&mut since_previous),
        weights: start.weights_on_disk.map(&mut since_previous),
        engine: since_previous(engine_healthy),
        first_request: since_previous(first_request),
        first_result: since_previous(first_result),
    }
}

/// A worker's cold start as it happens: each of its own instants kept the first time, reported at the first result.
#[derive(Debug)]
pub(crate) struct ColdStart {
    start: Start,
    engine_healthy: OnceLock<SystemTime>,
    first_request: OnceLock<SystemTime>,
    /// Whether a first result was written (and the start reported).
    reported: AtomicBool,
}

impl ColdStart {
    pub fn new(start: Start) -> Self {
        ColdStart {
            start,
            engine_healthy: OnceLock::new(),
            first_request: OnceLock::new(),
            reported: AtomicBool::new(false),
        }
    }

    pub fn engine_healthy(&self) {
        let _ = self.engine_healthy.set(SystemTime::now());
    }

    pub fn request_received(&self) {
        let _ = self.first_request.set(SystemTime::now());
    }

    /// On the worker's first result written (only), logs the phases in one line and emits them under `tier`.
    pub fn result_written(&self, tier: Tier, metrics: &Emf) {
        let result = SystemTime::now();
        if self.reported.swap(true, Ordering::Relaxed) {
            return;
        }
        let (Some(&healthy), Some(&request)) = (self.engine_healthy.get(), self.first_request.get()) else {
            return;
        };
        let phases = phases(&self.start, healthy, request, result);
        tracing::info!(
            %tier,
            started_by = self.start.by.as_str(),
            image_s = %Seconds(phases.image),
            weights_s = %Seconds(phases.weights),
            engine_s = %Seconds(Some(phases.engine)),
            first_request_s = %Seconds(Some(phases.first_request)),
            first_result_s = %Seconds(Some(phases.first_result)),
            total_s = %Seconds(Some(phases.total())),
            "cold start: first result written"
        );
        metrics.emit(&[("Tier", tier.as_str())], &phases.metrics());
    }
}

/// A phase in the log line: seconds to the millisecond, or `none` for a step that did not happen.
struct Seconds(Option<Duration>);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(phase) => write!(f, "{:.3}", phase.as_secs_f64()),
            None => f.write_str("none"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
