//! The scaler: the `Scaler` reads each tier's queue, tasks and GPU load through the ports every tick, decides
//! (`decision`), and publishes the decision as EMF lines and a one-line JSON summary. `wake` asks a tier at zero
//! for a task on arrival; `simulate` replays traffic against the sample's policy and ours.

pub(crate) mod decision;
pub(crate) mod fallback;
pub mod simulate;
pub(crate) mod wake;

pub(crate) use decision::Decision;
pub use decision::{DEFAULT_BACKLOG_PER_TASK, DEFAULT_UTILIZATION_TARGET, Readings, ScalingPolicy, decide};
pub(crate) use decision::{DEFAULT_INTERVAL_SECONDS, DEFAULT_MAX_TASKS, DEFAULT_MIN_TASKS};

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::contract::tier::{Lanes, Tier};
use crate::infra::metrics::{self, Emf, Metric};
use crate::ports::{
    CapacityControl, FleetError, GpuUtilization, Queue, QueueError, Service, ServiceTasks, TaskAges, TaskCounts,
};
use crate::scaler::fallback::{Fallback, FallbackReadings, Switch};

/// One tier the scaler looks after.
pub struct ScaledTier {
    pub tier: Tier,
    pub service: Service,
    /// The tier's high and normal queues; their counts are added up.
    pub lanes: Lanes<Arc<dyn Queue>>,
    pub policy: ScalingPolicy,
    /// On spot-with-fallback: the On-Demand service the scaler starts while Spot has no instance for the tier.
    pub fallback: Option<Fallback>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadingError {
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Fleet(#[from] FleetError),
}

/// What one tick did for one tier.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TierReport {
    pub tier: Tier,
    pub(crate) cluster_name: String,
    pub(crate) service_name: String,
    #[serde(flatten)]
    pub(crate) outcome: TierOutcome,
}

impl TierReport {
    /// Why nothing was published for this tier, if it was not.
    pub(crate) fn unread_error(&self) -> Option<&str> {
        match &self.outcome {
            TierOutcome::Unread { error } => Some(error),
            TierOutcome::Decided { .. } => None,
        }
    }
}

/// A tier's readings and decision, or why nothing was published (the alarms then see missing data,
/// which they treat as not breaching: no scaling either way).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub(crate) enum TierOutcome {
    Decided {
        #[serde(flatten)]
        readings: Readings,
        #[serde(flatten)]
        decision: Decision,
    },
    Unread {
        error: String,
    },
}

/// Reads every tier through the ports, decides, and publishes.
pub struct Scaler {
    tiers: Vec<ScaledTier>,
    tasks: Arc<dyn ServiceTasks>,
    gpu: Arc<dyn GpuUtilization>,
    metrics: Emf,
    /// Notified to tick at once instead of at the next interval.
    tick_now: Arc<Notify>,
    /// Reads Spot tasks' ages and sets the fallback services' counts; None where no tier falls back (locally).
    control: Option<Arc<dyn CapacityControl>>,
}

impl Scaler {
    pub fn new(
        tiers: Vec<ScaledTier>,
        tasks: Arc<dyn ServiceTasks>,
        gpu: Arc<dyn GpuUtilization>,
        metrics: Emf,
    ) -> Self {
        Scaler { tiers, tasks, gpu, metrics, tick_now: Arc::new(Notify::new()), control: None }
    }

    /// The scaler with `control` for the tiers that fall back to On-Demand.
    pub fn with_capacity_control(mut self, control: Arc<dyn CapacityControl>) -> Self {
        self.control = Some(control);
        self
    }

    /// What makes [`Scaler::run`] tick at once when notified, instead of at its next interval.
    pub(crate) fn tick_now(&self) -> Arc<Notify> {
        Arc::clone(&self.tick_now)
    }

    /// One decision per tier: EMF lines for the tiers that could be read, a logged summary for every tier.
    pub async fn tick(&self) -> Vec<TierReport> {
        let mut reports = Vec::with_capacity(self.tiers.len());
        for tier in &self.tiers {
            let outcome = match self.read(tier).await {
                Ok(readings) => {
                    let decision = decide(&readings, &tier.policy);
                    self.publish(&tier.service, &decision);
                    if let (Some(fallback), Some(control)) = (&tier.fallback, &self.control) {
                        self.fall_back(tier, fallback, control.as_ref(), readings.tasks).await;
                    }
                    TierOutcome::Decided { readings, decision }
                }
                Err(error) => TierOutcome::Unread { error: error.to_string() },
            };
            let report = TierReport {
                tier: tier.tier,
                cluster_name: tier.service.cluster.clone(),
                service_name: tier.service.name.clone(),
                outcome,
            };
            log(&report);
            reports.push(report);
        }
        reports
    }

    /// Ticks every `interval` (and at once when [`Scaler::tick_now`] is notified) until `shutdown`, handing each
    /// tick's reports to `on_tick` (e.g. the local engine fleet).
    pub async fn run(self, interval: Duration, shutdown: CancellationToken, mut on_tick: impl FnMut(&[TierReport])) {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                () = self.tick_now.notified() => ticks.reset(),
                () = shutdown.cancelled() => break,
            }
            on_tick(&self.tick().await);
        }
    }

    async fn read(&self, tier: &ScaledTier) -> Result<Readings, ReadingError> {
        Ok(Readings {
            queue: tier.lanes.high.counts().await?
                + tier.lanes.normal.counts().await?
                + tier.lanes.batch.counts().await?,
            tasks: self.tasks.task_counts(&tier.service).await?,
            gpu_utilization: self.gpu.compute_utilization(&tier.service).await?,
        })
    }

    /// Moves a tier between Spot and its On-Demand fallback (`fallback`), logging each switch and publishing the
    /// fallback's task count; a failed read or update is logged and tried again next tick.
    async fn fall_back(&self, tier: &ScaledTier, fallback: &Fallback, control: &dyn CapacityControl, spot: TaskCounts) {
        let readings = async {
            let on_demand = self.tasks.task_counts(&fallback.service).await?;
            // With no fallback task and nothing Spot owes, the decision is 0 whatever the ages: they are not read.
            let settled = on_demand.desired == 0 && spot.running >= spot.desired;
            let spot_ages = if settled { TaskAges::default() } else { control.task_ages(&tier.service).await? };
            Ok::<_, FleetError>(FallbackReadings { spot, spot_ages, on_demand })
        };
        let readings = match readings.await {
            Ok(readings) => readings,
            Err(error) => return tracing::warn!(tier = %tier.tier, %error, "Spot fallback: readings failed"),
        };
        let decision = fallback::decide(&readings, fallback.bound);
        if decision.on_demand_tasks != readings.on_demand.desired {
            let (service, summary) = (&fallback.service.name, serde_json::to_string(&readings).unwrap_or_default());
            if let Err(error) = control.set_desired(&fallback.service, decision.on_demand_tasks).await {
                return tracing::warn!(tier = %tier.tier, %error, %summary, "Spot fallback: could not set {service}");
            }
            let (tier, tasks) = (tier.tier, decision.on_demand_tasks);
            match decision.switch {
                Some(Switch::ToOnDemand) => {
                    tracing::warn!(%tier, tasks, %service, %summary, "Spot has had no instance for the tier: On-Demand tasks asked for")
                }
                Some(Switch::BackToSpot) => {
                    tracing::info!(%tier, %service, %summary, "Spot serves the tier again: its On-Demand tasks stop")
                }
                None => tracing::info!(%tier, tasks, %service, %summary, "Spot fallback follows the tier's need"),
            }
        }
        self.metrics.emit(
            &[("ClusterName", &tier.service.cluster), ("ServiceName", &tier.service.name)],
            &[Metric::count(metrics::FALLBACK_TASKS, u64::from(decision.on_demand_tasks))],
        );
    }

    fn publish(&self, service: &Service, decision: &Decision) {
        self.metrics.emit(
            &[("ClusterName", &service.cluster), ("ServiceName", &service.name)],
            &[
                Metric::number(metrics::INFERENCE_SCALING_METRIC, decision.scaling_metric),
                Metric::count(metrics::TASKS_NEEDED, u64::from(decision.tasks_needed)),
                Metric::count(metrics::HAS_BACKLOG_WITHOUT_CAPACITY, u64::from(decision.backlog_without_capacity)),
                Metric::count(metrics::TASK_STARTS_FAILING, u64::from(decision.starts_failing)),
            ],
        );
    }
}

fn log(report: &TierReport) {
    let summary = serde_json::to_string(report).unwrap_or_default();
    match &report.outcome {
        TierOutcome::Decided { decision, .. } if decision.starts_failing => tracing::warn!(
            tier = %report.tier,
            %summary,
            "tasks keep failing to start (see the service's stopped tasks): asking for no capacity until a new deployment"
        ),
        TierOutcome::Decided { .. } => tracing::info!(tier = %report.tier, %summary, "scaling decision"),
        TierOutcome::Unread { .. } => {
            tracing::warn!(tier = %report.tier, %summary, "no scaling metric published: readings failed")
        }
    }
}
