//! The scaler's tick over the ports (embedded queue, fake fleet) and the Lambda handler driven by an EventBridge
//! scheduled-event fixture (the decision itself is unit-tested beside it, in src/scaler/decision.rs).

use std::sync::Arc;

use crate::support::SharedBuf;
use crate::support::lambda_runtime::RuntimeApi;
use async_trait::async_trait;
use gpuinfer::{
    FleetError, GpuUtilization, LocalBackends, Priority, Queue, ScaledTier, Scaler, ScalingPolicy, ScheduledEvent,
    Service, ServiceTasks, TaskCounts, Tier, handle_scheduled_event, metrics::Emf,
};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

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
            policy: ScalingPolicy::new(5, 0, 10, 80.0).unwrap(),
            fallback: None,
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
async fn a_tick_publishes_emf_per_tier_with_the_samples_names_and_dimensions() {
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
        .args(["scaler", "--local-running-tasks", "0", "--embedded-queues", "--data-dir"])
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
