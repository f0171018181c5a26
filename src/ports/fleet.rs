//! The fleet ports: a tier's ECS service, its task counts and GPU load, asking for its first task, the wake.

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

use super::port_error::FleetError;
use crate::contract::tier::Tier;

/// The cluster's name unless configured (locally).
pub(crate) const DEFAULT_CLUSTER_NAME: &str = "local";
/// The name pattern of a tier's service unless configured; `{tier}` stands for the tier's name.
pub(crate) const DEFAULT_SERVICE_NAME: &str = "gpuinfer-{tier}";

/// The ECS service that runs one tier's tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    pub cluster: String,
    pub name: String,
}

impl Service {
    /// `tier`'s service in `cluster`, its name from `pattern` (`{tier}` replaced by the tier's name).
    pub fn of_tier(cluster: &str, pattern: &str, tier: Tier) -> Service {
        Service { cluster: cluster.to_owned(), name: pattern.replace("{tier}", tier.as_str()) }
    }
}

/// Task counts of a service, as ECS DescribeServices reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct TaskCounts {
    #[serde(rename = "runningTasks")]
    pub running: u32,
    #[serde(rename = "desiredTasks")]
    pub desired: u32,
    /// Tasks of the current deployment that failed to start in a row (ECS `failedTasks`: an image that cannot
    /// be pulled, a container that exits during start); back to 0 once one runs or a new deployment begins.
    #[serde(rename = "failedTaskStarts")]
    pub failed_starts: u32,
}

/// Failed task starts in a row, with no task running, after which no capacity is asked for: neither by the scaler
/// nor by the wake on arrival (as ECS's deployment circuit breaker, whose smallest threshold is 3).
pub(crate) const START_FAILURES_TO_STOP: u32 = 3;

/// How many tasks a service runs and is asked to run (ECS DescribeServices).
#[async_trait]
pub trait ServiceTasks: Send + Sync {
    async fn task_counts(&self, service: &Service) -> Result<TaskCounts, FleetError>;
}

/// Asks a service for its first task, at once (ECS UpdateService with a desired count of 1): the wake on arrival of
/// a tier at zero. Called only when the desired count was read as 0, so it never lowers a count.
#[async_trait]
pub(crate) trait FirstTask: Send + Sync {
    async fn ask_for_first_task(&self, service: &Service) -> Result<(), FleetError>;
}

/// Wakes a tier at zero: when work is enqueued for it, its first task is asked for at once (`scaler::wake`).
#[async_trait]
pub trait ArrivalWake: Send + Sync {
    /// Work was just enqueued for `tier`.
    async fn enqueued(&self, tier: Tier);
}

/// GPU compute (not memory) utilization of a service's tasks (Container Insights `TaskGPUUtilization`).
#[async_trait]
pub trait GpuUtilization: Send + Sync {
    /// Average over the service's tasks for the last minute, in percent; None when there is no data.
    async fn compute_utilization(&self, service: &Service) -> Result<Option<f64>, FleetError>;
}

/// Where a service's tasks are with their instances, as ECS DescribeTasks reports them: the wait of the oldest task
/// still PROVISIONING (asked for, no instance yet: on a Spot provider, Spot has none free) and the age of the
/// youngest RUNNING one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskAges {
    #[serde(serialize_with = "seconds")]
    pub oldest_provisioning: Option<Duration>,
    #[serde(serialize_with = "seconds")]
    pub youngest_running: Option<Duration>,
}

fn seconds<S: serde::Serializer>(age: &Option<Duration>, serializer: S) -> Result<S::Ok, S::Error> {
    age.map(|age| age.as_secs()).serialize(serializer)
}

/// What the Spot fallback reads and sets: a service's task ages (ListTasks, DescribeTasks) and its desired count
/// (UpdateService).
#[async_trait]
pub trait CapacityControl: Send + Sync {
    async fn task_ages(&self, service: &Service) -> Result<TaskAges, FleetError>;
    async fn set_desired(&self, service: &Service, count: u32) -> Result<(), FleetError>;
}
