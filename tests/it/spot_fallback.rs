//! The scaler's Spot fallback against an ECS stand-in that refuses Spot placements for a while and then allows them:
//! the tier's Spot service keeps its tasks PROVISIONING (no instance) until Spot has capacity again, its fallback
//! service on On-Demand starts what it is asked for a minute later. Ticked once a simulated minute.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use gpuinfer::{
    CapacityControl, Fallback, FleetError, GpuUtilization, LocalBackends, Queue, ScaledTier, Scaler, ScalingPolicy,
    Service, ServiceTasks, TaskAges, TaskCounts, Tier, metrics::Emf,
};

use crate::support::SharedBuf;

const MINUTE: Duration = Duration::from_secs(60);
const BOUND: Duration = Duration::from_secs(300);
/// Spot tasks asked for by the tier's scaling (its Spot service's desired count).
const SPOT_TASKS: u32 = 2;

/// One Spot service and its On-Demand fallback on a simulated clock. Spot has no capacity until `spot_from`.
struct Ecs {
    now: Mutex<Duration>,
    spot_from: Duration,
    /// The fallback's desired count, and when it was last set (its tasks run a minute after).
    fallback: Mutex<(u32, Duration)>,
    updates: Mutex<Vec<(Duration, String, u32)>>,
}

impl Ecs {
    fn now(&self) -> Duration {
        *self.now.lock().unwrap()
    }

    fn spot_running(&self) -> bool {
        self.now() >= self.spot_from + MINUTE
    }
}

#[async_trait]
impl ServiceTasks for Ecs {
    async fn task_counts(&self, service: &Service) -> Result<TaskCounts, FleetError> {
        if service.name.ends_with("-fallback") {
            let (desired, since) = *self.fallback.lock().unwrap();
            let running = if self.now() >= since + MINUTE { desired } else { 0 };
            return Ok(TaskCounts { running, desired, failed_starts: 0 });
        }
        let running = if self.spot_running() { SPOT_TASKS } else { 0 };
        Ok(TaskCounts { running, desired: SPOT_TASKS, failed_starts: 0 })
    }
}

#[async_trait]
impl GpuUtilization for Ecs {
    async fn compute_utilization(&self, _: &Service) -> Result<Option<f64>, FleetError> {
        Ok(None)
    }
}

#[async_trait]
impl CapacityControl for Ecs {
    async fn task_ages(&self, _: &Service) -> Result<TaskAges, FleetError> {
        let now = self.now();
        Ok(match self.spot_running() {
            true => TaskAges { oldest_provisioning: None, youngest_running: Some(now - self.spot_from - MINUTE) },
            false => TaskAges { oldest_provisioning: Some(now), youngest_running: None },
        })
    }

    async fn set_desired(&self, service: &Service, count: u32) -> Result<(), FleetError> {
        let now = self.now();
        *self.fallback.lock().unwrap() = (count, now);
        self.updates.lock().unwrap().push((now, service.name.clone(), count));
        Ok(())
    }
}

#[tokio::test]
async fn on_demand_serves_the_backlog_while_spot_has_no_capacity_then_hands_the_tier_back_to_spot() {
    let dir = tempfile::tempdir().unwrap();
    let backends = LocalBackends::open(dir.path()).unwrap();
    let lanes = backends.lane_handles(Tier::Small).map(|q| q as Arc<dyn Queue>);
    for _ in 0..8 {
        lanes.normal.send("{}").await.unwrap();
    }
    let service = Service { cluster: "inference".into(), name: "s-small".into() };
    let fallback = Fallback { service: Service { name: "s-small-fallback".into(), ..service.clone() }, bound: BOUND };
    let tier = ScaledTier {
        tier: Tier::Small,
        service,
        lanes,
        policy: ScalingPolicy::new(5, 0, 10, 80.0).unwrap(),
        fallback: Some(fallback),
    };
    let spot_from = Duration::from_secs(12 * 60);
    let ecs = Arc::new(Ecs {
        now: Mutex::new(Duration::ZERO),
        spot_from,
        fallback: Mutex::default(),
        updates: Mutex::default(),
    });
    let emf = SharedBuf::default();
    let scaler = Scaler::new(vec![tier], ecs.clone(), ecs.clone(), Emf::to_writer(emf.clone()))
        .with_capacity_control(ecs.clone());

    let mut on_demand = Vec::new();
    for minute in 0..25u64 {
        *ecs.now.lock().unwrap() = MINUTE * minute as u32;
        scaler.tick().await;
        on_demand.push(ecs.fallback.lock().unwrap().0);
    }
    let updates = ecs.updates.lock().unwrap().clone();
    let minutes = |at: Duration| at.as_secs() / 60;
    let switches: Vec<(u64, u32)> = updates.iter().map(|(at, _, count)| (minutes(*at), *count)).collect();
    // On-Demand asked for as soon as a Spot task waited the bound (5 min), for what Spot owes; back to Spot once its
    // tasks (running from minute 13) ran the bound: two switches, no flapping.
    assert_eq!(switches, vec![(5, SPOT_TASKS), (18, 0)], "{on_demand:?}");
    assert!(updates.iter().all(|(_, name, _)| name == "s-small-fallback"));
    assert!(on_demand[..5].iter().all(|&n| n == 0) && on_demand[5..18].iter().all(|&n| n == SPOT_TASKS));
    let published: Vec<f64> = emf
        .json_lines()
        .iter()
        .filter_map(|line| line.get("FallbackTasks").and_then(serde_json::Value::as_f64))
        .collect();
    assert_eq!(published.len(), 25, "FallbackTasks published every minute");
    assert_eq!(published[5], f64::from(SPOT_TASKS));
    assert_eq!(published[24], 0.0);
}
