//! The scaling decision against the seed's counterexamples, the tick over the ports (embedded queue, fake
//! fleet), and the Lambda handler driven by an EventBridge scheduled-event fixture.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use async_trait::async_trait;
use gpuinfer::cmd::scaler::{ScheduledEvent, handle_scheduled_event};
use gpuinfer::local::LocalBackends;
use gpuinfer::metrics::Emf;
use gpuinfer::ports::{FleetError, GpuUtilization, Queue, QueueCounts, Service, ServiceTasks, TaskCounts};
use gpuinfer::scaler::{PolicyError, Readings, START_FAILURES_TO_STOP, ScaledTier, Scaler, ScalingPolicy, decide};
use gpuinfer::simulate::policy::seed_metric;
use gpuinfer::vocabulary::{Priority, Tier};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};
use support::SharedBuf;
use support::lambda_runtime::RuntimeApi;

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
fn the_seeds_counterexamples_scale_the_right_way() {
    // (case, readings, GPU memory the seed would read, tasks needed, our metric, seed's metric)
    let cases = [
        ("one request on zero tasks", readings(1, 0, 0, 0, 0, None), None, 1, 2.0, 0.2),
        ("idle tier, GPU memory at 90 %", readings(0, 0, 0, 1, 1, Some(0.0)), Some(90.0), 0, 0.0, 1.125),
        ("40 queued on one task", readings(40, 0, 0, 1, 1, Some(50.0)), Some(90.0), 8, 8.0, 8.0),
        ("in-flight only, no GPU datapoint yet", readings(0, 3, 0, 1, 1, None), None, 1, 1.0, 0.0),
    ];
    for (case, readings, gpu_memory, needed, ours, seed) in cases {
        let decision = decide(&readings, &policy());
        assert_eq!(decision.tasks_needed, needed, "{case}");
        assert_eq!(decision.scaling_metric, ours, "{case}");
        assert_eq!(seed_metric(readings.queue.visible, gpu_memory, 5), seed, "{case}");
    }
    // What the alarms make of them: ours scales out above 1.0 by metric − 1 and in below 1.0; the seed
    // scales out by one above 1.0 and in by one below 0.1.
    let ours = |r| decide(&r, &policy()).scaling_metric;
    assert!(ours(readings(1, 0, 0, 0, 0, None)) > 1.0, "ours starts a task for one request");
    assert!(seed_metric(1, None, 5) <= 1.0, "the seed never starts one for it");
    assert!(ours(readings(0, 0, 0, 1, 1, Some(0.0))) < 1.0, "ours lets an idle tier go");
    assert!(seed_metric(0, Some(90.0), 5) > 1.0, "the seed scales an idle tier out");
    assert_eq!(ours(readings(0, 3, 0, 1, 1, None)), 1.0, "ours holds a tier while it works");
    assert!(seed_metric(0, None, 5) < 0.1, "the seed scales in under in-flight work");
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

/// Task counts and GPU utilization per service name; a service it does not know fails.
struct FakeFleet(Vec<(&'static str, TaskCounts, Option<f64>)>);

impl FakeFleet {
    fn find(&self, service: &Service) -> Result<&(&'static str, TaskCounts, Option<f64>), FleetError> {
        self.0
            .iter()
            .find(|(name, ..)| *name == service.name)
            .ok_or_else(|| FleetError::unavailable(format!("DescribeServices: service {} not found", service.name)))
    }
}

#[async_trait]
impl ServiceTasks for FakeFleet {
    async fn task_counts(&self, service: &Service) -> Result<TaskCounts, FleetError> {
        Ok(self.find(service)?.1)
    }
}

#[async_trait]
impl GpuUtilization for FakeFleet {
    async fn compute_utilization(&self, service: &Service) -> Result<Option<f64>, FleetError> {
        Ok(self.find(service)?.2)
    }
}

struct Rig {
    _dir: tempfile::TempDir,
    scaler: Scaler,
    emf: SharedBuf,
}

/// Both tiers on embedded queues holding `queued` (small, large) messages, alternately in the high and normal
/// lane, over `fleet`.
async fn rig(queued: (usize, usize), fleet: FakeFleet) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let backends = LocalBackends::open(dir.path()).unwrap();
    let emf = SharedBuf::default();
    let mut tiers = Vec::new();
    for (tier, count) in [(Tier::Small, queued.0), (Tier::Large, queued.1)] {
        let lanes = backends.lane_handles(tier).map(|q| q as Arc<dyn Queue>);
        for i in 0..count {
            lanes.get(if i.is_multiple_of(2) { Priority::High } else { Priority::Normal }).send("{}").await.unwrap();
        }
        tiers.push(ScaledTier {
            tier,
            service: Service { cluster: "inference".into(), name: format!("svc-{tier}") },
            lanes,
            policy: policy(),
        });
    }
    let fleet = Arc::new(fleet);
    Rig { _dir: dir, scaler: Scaler::new(tiers, fleet.clone(), fleet, Emf::to_writer(emf.clone())), emf }
}

/// The EventBridge scheduled event of tests/fixtures.
fn scheduled_event_json() -> Value {
    let fixture =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/scheduled_event.json")).unwrap();
    serde_json::from_str(&fixture).unwrap()
}

fn scheduled_event() -> LambdaEvent<ScheduledEvent> {
    LambdaEvent::new(serde_json::from_value(scheduled_event_json()).unwrap(), Context::default())
}

#[tokio::test]
async fn a_tick_publishes_emf_per_tier_with_the_seeds_names_and_dimensions() {
    let fleet = FakeFleet(vec![
        ("svc-small", TaskCounts { running: 0, desired: 0, failed_starts: 0 }, None),
        ("svc-large", TaskCounts { running: 2, desired: 2, failed_starts: 0 }, Some(0.0)),
    ]);
    let rig = rig((1, 0), fleet).await;
    let reports = rig.scaler.tick().await;
    assert_eq!(reports.len(), 2);

    let lines = rig.emf.json_lines();
    assert_eq!(lines.len(), 2);
    let small = &lines[0];
    assert_eq!(small["_aws"]["CloudWatchMetrics"][0]["Namespace"], "Custom/ECSInference");
    assert_eq!(small["_aws"]["CloudWatchMetrics"][0]["Dimensions"], json!([["ClusterName", "ServiceName"]]));
    assert_eq!(small["ClusterName"], "inference");
    assert_eq!(small["ServiceName"], "svc-small");
    assert_eq!(small["InferenceScalingMetric"], 2.0);
    assert_eq!(small["TasksNeeded"], 1.0);
    assert_eq!(small["HasBacklogWithoutCapacity"], 1.0);
    let large = &lines[1];
    assert_eq!(large["ServiceName"], "svc-large");
    assert_eq!(large["InferenceScalingMetric"], -1.0, "two idle tasks: remove both");
    assert_eq!(large["HasBacklogWithoutCapacity"], 0.0);
    let names: Vec<&str> = small["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["Name"].as_str().unwrap())
        .collect();
    assert!(names.iter().all(|name| gpuinfer::metrics::ALL.contains(name)), "{names:?}");
}

#[tokio::test]
async fn the_lambda_handler_answers_a_scheduled_event_with_every_tier() {
    let fleet = FakeFleet(vec![
        ("svc-small", TaskCounts { running: 1, desired: 1, failed_starts: 0 }, Some(12.5)),
        ("svc-large", TaskCounts { running: 0, desired: 0, failed_starts: 0 }, None),
    ]);
    let rig = rig((7, 0), fleet).await;
    let report = handle_scheduled_event(scheduled_event(), &rig.scaler).await.unwrap();
    let answer: Value = serde_json::to_value(&report).unwrap();
    assert_eq!(answer["eventTime"], "2026-11-29T18:00:00Z");
    assert_eq!(
        answer["tiers"][0],
        json!({
            "tier": "small", "clusterName": "inference", "serviceName": "svc-small",
            "visible": 7, "inFlight": 0, "delayed": 0, "runningTasks": 1, "desiredTasks": 1, "failedTaskStarts": 0,
            "gpuUtilization": 12.5, "tasksNeeded": 2, "change": 1,
            "inferenceScalingMetric": 2.0, "hasBacklogWithoutCapacity": false, "taskStartsFailing": false
        })
    );
    assert_eq!(answer["tiers"][1]["tier"], "large");
    assert_eq!(answer["tiers"][1]["inferenceScalingMetric"], 1.0);
    assert_eq!(rig.emf.json_lines().len(), 2);
}

#[tokio::test]
async fn the_lambda_handler_fails_when_a_tier_cannot_be_read_after_publishing_the_others() {
    let fleet = FakeFleet(vec![("svc-small", TaskCounts { running: 0, desired: 0, failed_starts: 0 }, None)]);
    let rig = rig((1, 1), fleet).await;
    let error = handle_scheduled_event(scheduled_event(), &rig.scaler).await.unwrap_err().to_string();
    assert!(error.contains("large") && error.contains("svc-large not found"), "{error}");
    assert!(!error.contains("small"), "{error}");
    let lines = rig.emf.json_lines();
    assert_eq!(lines.len(), 1, "the readable tier still publishes");
    assert_eq!(lines[0]["ServiceName"], "svc-small");
}

#[tokio::test]
async fn an_empty_test_event_is_accepted() {
    let fleet = FakeFleet(vec![("svc-small", TaskCounts::default(), None), ("svc-large", TaskCounts::default(), None)]);
    let rig = rig((0, 0), fleet).await;
    let event = LambdaEvent::new(serde_json::from_str("{}").unwrap(), Context::default());
    let report = handle_scheduled_event(event, &rig.scaler).await.unwrap();
    assert_eq!(report.event_time, None);
    assert_eq!(report.tiers.len(), 2);
}

#[tokio::test]
async fn under_the_lambda_runtime_each_scheduled_invocation_answers_for_every_tier() {
    let dir = tempfile::tempdir().unwrap();
    let backends = LocalBackends::open(dir.path()).unwrap();
    let lanes = backends.lane_handles(Tier::Large);
    for queue in [&lanes.high, &lanes.high, &lanes.normal] {
        queue.send("{}").await.unwrap();
    }
    let runtime = RuntimeApi::start().await;
    let mut function = std::process::Command::new(env!("CARGO_BIN_EXE_gpuinfer"))
        .args(["scaler", "--local-running-tasks", "0", "--data-dir"])
        .arg(dir.path())
        .envs(runtime.function_env("gpuinfer-scaler"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let answer = runtime.invoke(scheduled_event_json()).await;
    let again = runtime.invoke(scheduled_event_json()).await;
    function.kill().unwrap();
    let output = function.wait_with_output().unwrap();

    assert_eq!(answer["eventTime"], "2026-11-29T18:00:00Z", "{answer}");
    let tiers = answer["tiers"].as_array().unwrap();
    assert_eq!(
        tiers.iter().map(|t| t["serviceName"].as_str().unwrap()).collect::<Vec<_>>(),
        ["gpuinfer-small", "gpuinfer-large"]
    );
    assert_eq!((tiers[0]["tasksNeeded"].as_u64(), tiers[0]["inferenceScalingMetric"].as_f64()), (Some(0), Some(1.0)));
    assert_eq!(tiers[1]["visible"], 3);
    assert_eq!((tiers[1]["tasksNeeded"].as_u64(), tiers[1]["inferenceScalingMetric"].as_f64()), (Some(1), Some(2.0)));
    assert_eq!(tiers[1]["hasBacklogWithoutCapacity"], true);
    assert_eq!(again["tiers"], answer["tiers"], "a second invocation in the same process answers the same");
    let emf = String::from_utf8_lossy(&output.stdout).lines().filter(|l| l.contains("InferenceScalingMetric")).count();
    assert_eq!(emf, 4, "one EMF line per tier and invocation on stdout");
}
