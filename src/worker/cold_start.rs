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
    pub(crate) fn total(&self) -> Duration {
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
    pub(crate) fn new(start: Start) -> Self {
        ColdStart {
            start,
            engine_healthy: OnceLock::new(),
            first_request: OnceLock::new(),
            reported: AtomicBool::new(false),
        }
    }

    pub(crate) fn engine_healthy(&self) {
        let _ = self.engine_healthy.set(SystemTime::now());
    }

    pub(crate) fn request_received(&self) {
        let _ = self.first_request.set(SystemTime::now());
    }

    /// On the worker's first result written (only), logs the phases in one line and emits them under `tier`.
    pub(crate) fn result_written(&self, tier: Tier, metrics: &Emf) {
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
mod tests {
    //! The phases of a cold start from its instants: each from the instant before it, steps that did not happen left
    //! out, an instant out of order counted as the one before it, and the total their sum; the metrics in the order
    //! and under the names of `metrics::COLD_START`.

    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use super::{Phases, Start, StartedBy, phases};
    use crate::infra::metrics;

    /// The instant `seconds` after an arbitrary origin.
    fn at(seconds: f64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_secs_f64(seconds)
    }

    fn secs(seconds: f64) -> Duration {
        Duration::from_secs_f64(seconds)
    }

    #[test]
    fn a_container_start_seen_from_its_image_pull_has_every_phase() {
        let start = Start::of_container(Some((at(0.0), at(40.0))), Some(at(42.0)), Some(at(100.0)));
        assert_eq!((start.at, start.by, start.image_pulled), (at(0.0), StartedBy::ImagePull, Some(at(40.0))));
        let phases = phases(&start, at(160.0), at(160.5), at(163.0));
        assert_eq!(
            phases,
            Phases {
                image: Some(secs(40.0)),
                weights: Some(secs(60.0)),
                engine: secs(60.0),
                first_request: secs(0.5),
                first_result: secs(2.5),
            }
        );
        assert_eq!(phases.total(), secs(163.0));
    }

    #[test]
    fn without_ecs_metadata_the_entrypoint_start_is_the_start_and_there_is_no_image_phase() {
        let start = Start::of_container(None, Some(at(2.0)), None);
        assert_eq!(
            (start.at, start.by, start.image_pulled, start.weights_on_disk),
            (at(2.0), StartedBy::Entrypoint, None, None)
        );
        let phases = phases(&start, at(32.0), at(33.0), at(34.0));
        assert_eq!((phases.image, phases.weights, phases.engine), (None, None, secs(30.0)));
        assert_eq!(phases.total(), secs(32.0));
    }

    #[test]
    fn with_neither_the_worker_start_is_the_start() {
        let before = SystemTime::now();
        let start = Start::of_container(None, None, None);
        assert_eq!(start.by, StartedBy::Worker);
        assert!(start.at >= before);
    }

    #[test]
    fn a_dev_engine_start_has_no_image_and_no_weights_phase() {
        let phases = phases(&Start::new(at(0.0), StartedBy::DevEngine), at(1.0), at(1.25), at(1.5));
        assert_eq!((phases.image, phases.weights), (None, None));
        assert_eq!((phases.engine, phases.first_request, phases.first_result), (secs(1.0), secs(0.25), secs(0.25)));
    }

    #[test]
    fn an_instant_earlier_than_the_one_before_it_counts_as_that_one() {
        // The entrypoint's clock read the weights on disk before ECS's pull stopped, and the engine before them both.
        let start = Start::of_container(Some((at(10.0), at(20.0))), None, Some(at(19.0)));
        let phases = phases(&start, at(15.0), at(21.0), at(22.0));
        assert_eq!(
            (phases.image, phases.weights, phases.engine),
            (Some(secs(10.0)), Some(Duration::ZERO), Duration::ZERO)
        );
        assert_eq!((phases.first_request, phases.first_result), (secs(1.0), secs(1.0)));
        assert_eq!(phases.total(), secs(12.0), "the phases add up to the time from the start to the first result");
    }

    #[test]
    fn the_metrics_follow_the_names_in_order_and_leave_out_a_step_that_did_not_happen() {
        let start = Start::of_container(None, Some(at(0.0)), Some(at(5.0)));
        let metrics = phases(&start, at(7.0), at(8.0), at(8.5)).metrics();
        let named: Vec<(&str, f64)> = metrics.iter().map(|m| (m.name, m.value)).collect();
        assert_eq!(
            named,
            [
                (metrics::COLD_START_WEIGHTS, 5.0),
                (metrics::COLD_START_ENGINE, 2.0),
                (metrics::COLD_START_FIRST_REQUEST, 1.0),
                (metrics::COLD_START_FIRST_RESULT, 0.5),
                (metrics::COLD_START_TOTAL, 8.5),
            ]
        );
        assert_eq!(metrics::COLD_START[1..], named.iter().map(|(name, _)| *name).collect::<Vec<_>>()[..]);
    }
}
