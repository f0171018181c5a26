//! Wake on arrival: when work is enqueued for a tier whose service has no task running or asked for, its first
//! task is asked for at once, rather than at the scaler's next minute and an alarm's period after it.
//!
//! # Why setting the desired count is safe beside the step scaling that owns it
//!
//! The wake sets the service's desired count to 1 (ECS UpdateService), and only after reading it as 0
//! (DescribeServices), so it never lowers a count. Application Auto Scaling's step policies change the desired
//! count *by* their step (`ChangeInCapacity`), from whatever it is when the alarm fires, so a count set outside
//! them is simply where the next step starts. And the scaler's metric is taken from the desired count
//! (`1 + TasksNeeded − DesiredTasks`, see the module above): a backlog of 1,000 on the woken tier asks for the
//! tasks still missing (not one more), and while any message waits TasksNeeded is at least 1, so the metric never
//! falls below 1 and the scale-in alarm (below 1 for the whole idle window) cannot undo the wake before the work
//! is served. The other calls the AWS docs offer are worse here: raising the scalable target's minimum
//! (RegisterScalableTarget) does change the current capacity at once, but the minimum must then be lowered again by
//! someone, or the tier never returns to zero; invoking the scaler only publishes a metric, which the scale-out
//! alarm reads at its next period.
//!
//! # Why it is cheap
//!
//! Each tier is looked at (one DescribeServices) at most once per `recheck`, one look at a time: arrivals during
//! a look or within `recheck` after it skip the look. A burst of 1,000 requests into one router makes one
//! DescribeServices and at most one UpdateService per tier; each further router (a Lambda execution environment)
//! makes at most one of each per `recheck`. A tier whose tasks keep failing to start is not woken (the scaler
//! asks nothing for it either: each failed start costs an instance's launch).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::contract::tier::{PerTier, Tier};
use crate::ports::{ArrivalWake, FirstTask, START_FAILURES_TO_STOP, Service, ServiceTasks, TaskCounts};

/// Least time between two looks at a tier's task counts on AWS (a DescribeServices each).
pub(crate) const AWS_RECHECK: Duration = Duration::from_secs(10);

/// What one arrival did for its tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// Looked at within `recheck`, or being looked at now.
    Skipped,
    /// The service already has a task running or asked for.
    Awake,
    /// The desired count was 0: the first task was asked for.
    AskedForFirstTask,
    /// The service's tasks keep failing to start: nothing asked for.
    StartsFailing,
    /// A call failed (logged): the scaler's next tick asks for capacity instead.
    Failed,
}

/// Whether a service with these counts is woken: no task asked for (a task still running at desired 0 is being
/// stopped), and its starts not failing.
pub(crate) fn wakes(counts: &TaskCounts) -> Wake {
    if counts.desired > 0 {
        Wake::Awake
    } else if counts.failed_starts >= START_FAILURES_TO_STOP {
        Wake::StartsFailing
    } else {
        Wake::AskedForFirstTask
    }
}

/// Wakes each tier's service on arrival; shared by every entry that enqueues work.
pub struct WakeOnArrival {
    tiers: PerTier<TierWake>,
    tasks: Arc<dyn ServiceTasks>,
    first_task: Arc<dyn FirstTask>,
    recheck: Duration,
}

struct TierWake {
    service: Service,
    /// When the tier was last looked at; held during a look, so that concurrent arrivals skip it, not wait.
    looked_at: tokio::sync::Mutex<Option<Instant>>,
}

impl WakeOnArrival {
    /// Reads task counts from `tasks`, asks `first_task` for a tier's first task, looks at a tier at most once per
    /// `recheck`.
    pub fn new(
        services: PerTier<Service>,
        tasks: Arc<dyn ServiceTasks>,
        first_task: Arc<dyn FirstTask>,
        recheck: Duration,
    ) -> Self {
        let tier = |service| TierWake { service, looked_at: tokio::sync::Mutex::new(None) };
        WakeOnArrival {
            tiers: PerTier { small: tier(services.small), large: tier(services.large) },
            tasks,
            first_task,
            recheck,
        }
    }

    /// Work was just enqueued for `tier`: asks for its first task if it has none (see the module documentation).
    pub async fn arrived(&self, tier: Tier) -> Wake {
        let wake = self.tiers.get(tier);
        let Ok(mut looked_at) = wake.looked_at.try_lock() else { return Wake::Skipped };
        if looked_at.is_some_and(|at| at.elapsed() < self.recheck) {
            return Wake::Skipped;
        }
        *looked_at = Some(Instant::now());
        let service = &wake.service;
        let outcome = match self.tasks.task_counts(service).await {
            Ok(counts) => wakes(&counts),
            Err(error) => {
                tracing::warn!(%tier, service = %service.name, %error, "wake on arrival: cannot read the task counts; the scaler's next tick decides");
                return Wake::Failed;
            }
        };
        match outcome {
            Wake::AskedForFirstTask => match self.first_task.ask_for_first_task(service).await {
                Ok(()) => {
                    tracing::info!(%tier, service = %service.name, "wake on arrival: the tier had no task; asked for its first one");
                    Wake::AskedForFirstTask
                }
                Err(error) => {
                    tracing::warn!(%tier, service = %service.name, %error, "wake on arrival: cannot ask for the first task; the scaler's next tick does");
                    Wake::Failed
                }
            },
            Wake::StartsFailing => {
                tracing::warn!(%tier, service = %service.name, "wake on arrival: the tier's tasks keep failing to start; not woken");
                Wake::StartsFailing
            }
            other => other,
        }
    }
}

#[async_trait]
impl ArrivalWake for WakeOnArrival {
    async fn enqueued(&self, tier: Tier) {
        self.arrived(tier).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
