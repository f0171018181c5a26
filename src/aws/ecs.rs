//! ECS services: their task counts for the scaler and the wake on arrival (DescribeServices: running, desired, and
//! the current deployment's failed task starts), a tier's first task (UpdateService), and for the Spot fallback the
//! ages of a service's tasks (ListTasks, DescribeTasks) and a fallback service's count (UpdateService).

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_sdk_ecs::Client;
use aws_sdk_ecs::types::{DesiredStatus, HealthStatus};

use crate::ports::{CapacityControl, FirstTask, FleetError, Service, ServiceTasks, TaskAges, TaskCounts};

/// Most task ARNs DescribeTasks takes in one call (and ListTasks returns in one page).
const TASKS_PER_CALL: usize = 100;

#[derive(Debug, Clone)]
pub struct EcsServices {
    client: Client,
}

impl EcsServices {
    pub fn new(client: Client) -> Self {
        EcsServices { client }
    }
}

#[async_trait]
impl ServiceTasks for EcsServices {
    async fn task_counts(&self, service: &Service) -> Result<TaskCounts, FleetError> {
        let output =
            self.client.describe_services().cluster(&service.cluster).services(&service.name).send().await.map_err(
                |e| FleetError::caused(&format!("DescribeServices {}/{}", service.cluster, service.name), e),
            )?;
        let found =
            output.services.unwrap_or_default().into_iter().find(|s| s.service_name() == Some(service.name.as_str()));
        let Some(found) = found else {
            return Err(FleetError::unavailable(format!(
                "service {} not found in cluster {}",
                service.name, service.cluster
            )));
        };
        let count = |n: i32| u32::try_from(n).unwrap_or(0);
        let primary = found.deployments().iter().find(|d| d.status() == Some("PRIMARY"));
        Ok(TaskCounts {
            running: count(found.running_count),
            desired: count(found.desired_count),
            failed_starts: primary.map_or(0, |d| count(d.failed_tasks)),
        })
    }
}

impl EcsServices {
    async fn update_desired(&self, service: &Service, count: u32) -> Result<(), FleetError> {
        self.client
            .update_service()
            .cluster(&service.cluster)
            .service(&service.name)
            .desired_count(i32::try_from(count).unwrap_or(i32::MAX))
            .send()
            .await
            .map_err(|e| {
                FleetError::caused(&format!("UpdateService {}/{} to {count} tasks", service.cluster, service.name), e)
            })?;
        Ok(())
    }
}

#[async_trait]
impl FirstTask for EcsServices {
    async fn ask_for_first_task(&self, service: &Service) -> Result<(), FleetError> {
        self.update_desired(service, 1).await
    }
}

#[async_trait]
impl CapacityControl for EcsServices {
    /// The service's tasks meant to run (ListTasks, desiredStatus RUNNING: its first page of 100, more than a tier
    /// asks for), described: the oldest still PROVISIONING by its createdAt, the youngest RUNNING by its startedAt
    /// (0 while its container health check is not HEALTHY yet).
    async fn task_ages(&self, service: &Service) -> Result<TaskAges, FleetError> {
        let what = |call: &str| format!("{call} {}/{}", service.cluster, service.name);
        let listed = self
            .client
            .list_tasks()
            .cluster(&service.cluster)
            .service_name(&service.name)
            .desired_status(DesiredStatus::Running)
            .max_results(TASKS_PER_CALL as i32)
            .send()
            .await
            .map_err(|e| FleetError::caused(&what("ListTasks"), e))?;
        let arns = listed.task_arns.unwrap_or_default();
        if arns.is_empty() {
            return Ok(TaskAges::default());
        }
        let described = self
            .client
            .describe_tasks()
            .cluster(&service.cluster)
            .set_tasks(Some(arns))
            .send()
            .await
            .map_err(|e| FleetError::caused(&what("DescribeTasks"), e))?;
        let now = SystemTime::now();
        let age = |at: Option<&aws_sdk_ecs::primitives::DateTime>| {
            at.and_then(|at| SystemTime::try_from(*at).ok()).map(|at| now.duration_since(at).unwrap_or(Duration::ZERO))
        };
        let tasks = described.tasks.unwrap_or_default();
        let in_state = |state: &'static str| tasks.iter().filter(move |t| t.last_status() == Some(state));
        // A task that runs but is not yet HEALTHY (its engine still loading the model) serves nothing yet: age 0.
        let serving = |t: &aws_sdk_ecs::types::Task| match t.health_status() {
            Some(HealthStatus::Healthy) => age(t.started_at()),
            _ => Some(Duration::ZERO),
        };
        Ok(TaskAges {
            oldest_provisioning: in_state("PROVISIONING").filter_map(|t| age(t.created_at())).max(),
            youngest_running: in_state("RUNNING").filter_map(serving).min(),
        })
    }

    async fn set_desired(&self, service: &Service, count: u32) -> Result<(), FleetError> {
        self.update_desired(service, count).await
    }
}
