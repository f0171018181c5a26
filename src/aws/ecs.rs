//! ECS services: their task counts for the scaler and the wake on arrival (DescribeServices: running, desired, and
//! the current deployment's failed task starts), and a tier's first task (UpdateService).

use async_trait::async_trait;
use aws_sdk_ecs::Client;

use crate::ports::{FirstTask, FleetError, Service, ServiceTasks, TaskCounts};

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

#[async_trait]
impl FirstTask for EcsServices {
    async fn ask_for_first_task(&self, service: &Service) -> Result<(), FleetError> {
        self.client
            .update_service()
            .cluster(&service.cluster)
            .service(&service.name)
            .desired_count(1)
            .send()
            .await
            .map_err(|e| {
                FleetError::caused(&format!("UpdateService {}/{} to 1 task", service.cluster, service.name), e)
            })?;
        Ok(())
    }
}
