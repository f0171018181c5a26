//! The local fleet: each tier runs a fixed number of always-on worker pools, and there are no GPU readings.

use async_trait::async_trait;

use crate::ports::{FleetError, GpuUtilization, Service, ServiceTasks, TaskCounts};

/// Every service runs `tasks_per_tier` tasks and is asked for exactly that many; GPU utilization is absent (idle).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FixedFleet {
    pub(crate) tasks_per_tier: u32,
}

#[async_trait]
impl ServiceTasks for FixedFleet {
    async fn task_counts(&self, _service: &Service) -> Result<TaskCounts, FleetError> {
        Ok(TaskCounts { running: self.tasks_per_tier, desired: self.tasks_per_tier, failed_starts: 0 })
    }
}

#[async_trait]
impl GpuUtilization for FixedFleet {
    async fn compute_utilization(&self, _service: &Service) -> Result<Option<f64>, FleetError> {
        Ok(None)
    }
}
