//! The scaling decision against the AWS sample's counterexamples, term by term, and the checks on a policy.

use super::{PolicyError, Readings, START_FAILURES_TO_STOP, ScalingPolicy, decide};
use crate::ports::{QueueCounts, TaskCounts};
use crate::scaler::simulate::policy::sample_metric;

fn policy() -> ScalingPolicy {
    ScalingPolicy::new(5, 0, 10, 80.0).unwrap()
}

fn readings(visible: u64, in_flight: u64, delayed: u64, running: u32, desired: u32, gpu: Option<f64>) -> Readings {
    Readings {
        queue: QueueCounts { visible, in_flight, delayed },
        tasks: TaskCounts { running, desired, failed_starts: 0 },
        gpu_utilization: gpu,
    }
}

/// Before the first image is in ECR (or with a tag that is not), every start fails with CannotPullContainerError,
/// each on a GPU instance launched for it: the backlog must stop asking for tasks once ECS counts the failures.
#[test]
fn a_tier_whose_task_starts_keep_failing_asks_for_no_capacity_until_one_starts() {
    let failing = |failed_starts, running| Readings {
        tasks: TaskCounts { running, desired: 2, failed_starts },
        ..readings(40, 0, 0, running, 2, None)
    };
    let decision = decide(&failing(START_FAILURES_TO_STOP, 0), &policy());
    assert!(decision.starts_failing && decision.backlog_without_capacity);
    assert_eq!((decision.tasks_needed, decision.change), (0, -2), "back to MinTasks despite 40 queued");
    assert!(decision.scaling_metric < 1.0, "the scale-in alarm, not the scale-out one");
    let at_min_one = ScalingPolicy::new(5, 1, 10, 80.0).unwrap();
    assert_eq!(decide(&failing(START_FAILURES_TO_STOP, 0), &at_min_one).tasks_needed, 1, "never below MinTasks");
    let below = decide(&failing(START_FAILURES_TO_STOP - 1, 0), &policy());
    assert!(!below.starts_failing && below.tasks_needed == 8, "two failures may be bad luck: still scaling out");
    let one_runs = decide(&failing(START_FAILURES_TO_STOP, 1), &policy());
    assert!(!one_runs.starts_failing && one_runs.tasks_needed == 8, "a running task proves the image starts");
}

#[test]
fn the_samples_counterexamples_scale_the_right_way() {
    // (case, readings, GPU memory the sample would read, tasks needed, our metric, the sample's metric)
    let cases = [
        ("one request on zero tasks", readings(1, 0, 0, 0, 0, None), None, 1, 2.0, 0.2),
        ("idle tier, GPU memory at 90 %", readings(0, 0, 0, 1, 1, Some(0.0)), Some(90.0), 0, 0.0, 1.125),
        ("40 queued on one task", readings(40, 0, 0, 1, 1, Some(50.0)), Some(90.0), 8, 8.0, 8.0),
        ("in-flight only, no GPU datapoint yet", readings(0, 3, 0, 1, 1, None), None, 1, 1.0, 0.0),
    ];
    for (case, readings, gpu_memory, needed, ours, sample) in cases {
        let decision = decide(&readings, &policy());
        assert_eq!(decision.tasks_needed, needed, "{case}");
        assert_eq!(decision.scaling_metric, ours, "{case}");
        assert_eq!(sample_metric(readings.queue.visible, gpu_memory, 5), sample, "{case}");
    }
    // What the alarms make of them: ours scales out above 1.0 by metric − 1 and in below 1.0; the sample
    // scales out by one above 1.0 and in by one below 0.1.
    let ours = |r| decide(&r, &policy()).scaling_metric;
    assert!(ours(readings(1, 0, 0, 0, 0, None)) > 1.0, "ours starts a task for one request");
    assert!(sample_metric(1, None, 5) <= 1.0, "the sample never starts one for it");
    assert!(ours(readings(0, 0, 0, 1, 1, Some(0.0))) < 1.0, "ours lets an idle tier go");
    assert!(sample_metric(0, Some(90.0), 5) > 1.0, "the sample scales an idle tier out");
    assert_eq!(ours(readings(0, 3, 0, 1, 1, None)), 1.0, "ours holds a tier while it works");
    assert!(sample_metric(0, None, 5) < 0.1, "the sample scales in under in-flight work");
}

#[test]
fn every_term_of_the_decision() {
    // (case, readings, tasks needed, change, backlog without capacity)
    let cases = [
        ("nothing at all, nothing running", readings(0, 0, 0, 0, 0, None), 0, 0, false),
        ("tasks still cold-starting are counted", readings(3, 0, 0, 0, 1, None), 1, 0, true),
        ("delayed messages count", readings(0, 0, 6, 0, 0, None), 2, 2, true),
        ("busy tasks are kept", readings(0, 6, 0, 8, 8, None), 6, -2, false),
        ("saturated GPUs ask for more", readings(0, 4, 0, 2, 2, Some(100.0)), 3, 1, false),
        ("a task that worked this minute is kept", readings(0, 0, 0, 1, 1, Some(8.0)), 1, 0, false),
        ("utilization noise keeps nothing", readings(0, 0, 0, 1, 1, Some(0.5)), 0, -1, false),
        ("utilization is ignored with no task running", readings(0, 0, 0, 0, 0, Some(95.0)), 0, 0, false),
        ("at most MaxTasks", readings(1000, 0, 0, 2, 2, None), 10, 8, false),
        ("in flight with no task running", readings(0, 2, 0, 0, 0, None), 1, 1, true),
    ];
    for (case, readings, needed, change, without_capacity) in cases {
        let decision = decide(&readings, &policy());
        assert_eq!(decision.tasks_needed, needed, "{case}");
        assert_eq!(decision.change, change, "{case}");
        assert_eq!(decision.scaling_metric, 1.0 + change as f64, "{case}");
        assert_eq!(decision.backlog_without_capacity, without_capacity, "{case}");
    }
    let keep_one = ScalingPolicy::new(5, 1, 10, 80.0).unwrap();
    assert_eq!(decide(&readings(0, 0, 0, 1, 1, None), &keep_one).scaling_metric, 1.0, "MinTasks is kept");
}

#[test]
fn policies_are_checked() {
    assert_eq!(ScalingPolicy::new(0, 0, 10, 80.0), Err(PolicyError::BacklogTarget));
    assert_eq!(ScalingPolicy::new(5, 3, 2, 80.0), Err(PolicyError::TaskRange { min: 3, max: 2 }));
    assert_eq!(ScalingPolicy::new(5, 0, 10, 0.0), Err(PolicyError::UtilizationTarget(0.0)));
    assert_eq!(ScalingPolicy::new(5, 0, 10, 120.0), Err(PolicyError::UtilizationTarget(120.0)));
}
