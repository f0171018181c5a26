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
    assert_eq!((phases.image, phases.weights, phases.engine), (Some(secs(10.0)), Some(Duration::ZERO), Duration::ZERO));
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
