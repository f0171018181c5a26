//! The scaling metric: a pure decision per tier (`decide`) from queue, task and GPU readings, and the
//! `Scaler` that reads them through the ports every tick and publishes the decision as EMF lines and a
//! one-line JSON summary.
//!
//! # What the alarms read
//!
//! Per tier, in namespace `Custom/ECSInference` with dimensions `ClusterName` and `ServiceName`:
//!
//! - `TasksNeeded` = max(⌈M / T⌉, min(R, F), U), kept within [MinTasks, MaxTasks], where M is every message
//!   of the tier's lanes (visible + in flight + delayed), T the per-task backlog target (`QUEUE_DEPTH_THRESHOLD`),
//!   R the running tasks, F the in-flight messages, and U = ⌈R × u / target⌉ when tasks run and their GPU
//!   compute utilization u, averaged over the last minute, is above 1 % (else 0; the target is 80 %).
//! - `InferenceScalingMetric` = 1 + TasksNeeded − DesiredTasks. As in the AWS sample, 1.0 means balanced; unlike
//!   the sample, the distance from 1 is exactly how many tasks to add (above 1) or remove (below 1).
//! - `HasBacklogWithoutCapacity` = 1 while any message waits and no task runs, else 0 (for dashboards and a
//!   "no capacity arrives" alarm; scaling itself needs only the first two).
//! - `TaskStartsFailing` = 1 while no task runs and the service's current deployment has failed to start
//!   [`START_FAILURES_TO_STOP`] tasks in a row (an image that is not in ECR, a container that exits on start).
//!   TasksNeeded is then MinTasks whatever the backlog: each failed start costs a GPU instance's launch, so the
//!   scaler stops asking until a new deployment (or one task that starts) resets ECS's count. Its alarm says so.
//!
//! # Why a difference from the desired count
//!
//! Application Auto Scaling step policies choose a step by how far the alarm's metric is past its threshold,
//! and `ChangeInCapacity` adds that step's tasks. A ratio of needed to running tasks cannot drive that from
//! zero (the ratio is infinite, and a percent change of zero is zero); `ExactCapacity` on the needed count
//! would scale in the moment the queue drains, skipping the idle window. A difference can: the scale-out
//! alarm (> 1 for one period) picks the step holding metric − 1 and adds that many tasks at once; the
//! scale-in alarm (< 1 for the whole idle window) removes 1 − metric. Because the difference is taken from
//! the *desired* count, tasks still cold-starting already count, so an alarm that fires again next minute
//! asks only for what is still missing and never piles tasks up. The alarms and steps template.yaml must
//! implement are in docs/scaling.md ("Alarms and step scaling").
//!
//! # What each term guarantees (the promises in docs/scaling.md)
//!
//! - (a) one message on a tier at zero tasks: TasksNeeded 1, metric 2.0: one task within one period.
//! - (b) nothing queued or in flight and idle GPUs: TasksNeeded = MinTasks, so the metric stays below 1
//!   while more tasks are desired: back to MinTasks after the idle window.
//! - (c) a backlog B on R tasks: TasksNeeded ⌈B / T⌉, reached in one step.
//! - (d) in-flight messages are part of M, and min(R, F) keeps every task that may be working.
//! - (e) GPU compute utilization, averaged over the last minute, is the lagging signal: it sees the work done
//!   *between* two readings of the queue, so tasks that worked during the minute are kept (and more are asked
//!   for above the target). A GPU counts as idle at or below 1 %, so sampling noise cannot hold a task. It is
//!   read only while tasks run; GPU memory is never read (vLLM reserves ~90 % of it whatever the load).

pub mod simulate;
pub mod wake;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::contract::tier::{Lanes, PerTier, Tier};
use crate::infra::metrics::{self, Emf, Metric};
use crate::ports::{
    FleetError, GpuUtilization, Queue, QueueCounts, QueueError, START_FAILURES_TO_STOP, Service, ServiceTasks,
    TaskCounts,
};

/// What one tier is scaled toward; checked once by `ScalingPolicy::new`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScalingPolicy {
    backlog_per_task: u32,
    min_tasks: u32,
    max_tasks: u32,
    utilization_target: f64,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    #[error("the per-task backlog target (QUEUE_DEPTH_THRESHOLD) must be at least 1 message")]
    BacklogTarget,
    #[error("the minimum task count {min} is above the maximum {max}")]
    TaskRange { min: u32, max: u32 },
    #[error("the GPU utilization target must be above 0 and at most 100 percent, got {0}")]
    UtilizationTarget(f64),
}

impl ScalingPolicy {
    pub fn new(
        backlog_per_task: u32,
        min_tasks: u32,
        max_tasks: u32,
        utilization_target: f64,
    ) -> Result<Self, PolicyError> {
        if backlog_per_task == 0 {
            return Err(PolicyError::BacklogTarget);
        }
        if min_tasks > max_tasks {
            return Err(PolicyError::TaskRange { min: min_tasks, max: max_tasks });
        }
        if !(utilization_target > 0.0 && utilization_target <= 100.0) {
            return Err(PolicyError::UtilizationTarget(utilization_target));
        }
        Ok(ScalingPolicy { backlog_per_task, min_tasks, max_tasks, utilization_target })
    }

    /// Messages one task should carry (`QUEUE_DEPTH_THRESHOLD`).
    pub fn backlog_per_task(&self) -> u32 {
        self.backlog_per_task
    }

    pub fn min_tasks(&self) -> u32 {
        self.min_tasks
    }

    pub fn max_tasks(&self) -> u32 {
        self.max_tasks
    }
}

/// One tier's readings at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Readings {
    #[serde(flatten)]
    pub queue: QueueCounts,
    #[serde(flatten)]
    pub tasks: TaskCounts,
    /// GPU compute utilization in percent, averaged over the last minute and the service's tasks; None when
    /// there is no data (no task yet, or no datapoint).
    pub gpu_utilization: Option<f64>,
}

/// The values published for one tier.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub tasks_needed: u32,
    /// Tasks to add (positive) or remove (negative) to go from the desired count to `tasks_needed`.
    pub(crate) change: i64,
    /// 1 + `change`: the alarms' metric.
    #[serde(rename = "inferenceScalingMetric")]
    pub scaling_metric: f64,
    #[serde(rename = "hasBacklogWithoutCapacity")]
    pub backlog_without_capacity: bool,
    #[serde(rename = "taskStartsFailing")]
    pub(crate) starts_failing: bool,
}

/// Messages one task should carry unless configured (the AWS sample's QueueDepthScaleThreshold).
pub const DEFAULT_BACKLOG_PER_TASK: u32 = 5;
/// Fewest and most tasks per tier unless configured (the AWS sample's MinTaskCount, MaxTaskCount and
/// LargeModelMaxTaskCount).
pub(crate) const DEFAULT_MIN_TASKS: u32 = 0;
pub(crate) const DEFAULT_MAX_TASKS: PerTier<u32> = PerTier { small: 10, large: 4 };
/// GPU compute utilization (percent) above which running tasks ask for more, unless configured.
pub const DEFAULT_UTILIZATION_TARGET: f64 = 80.0;
/// Seconds between two decisions of the local loop unless configured (the template's schedule: every minute).
pub(crate) const DEFAULT_INTERVAL_SECONDS: u64 = 60;

/// GPU compute utilization (percent) at or below which a GPU counts as idle.
pub(crate) const IDLE_UTILIZATION: f64 = 1.0;

/// The decision for one tier; see the module documentation for the formula and why.
pub fn decide(readings: &Readings, policy: &ScalingPolicy) -> Decision {
    let QueueCounts { visible, in_flight, delayed } = readings.queue;
    let TaskCounts { running, desired, failed_starts } = readings.tasks;
    let starts_failing = running == 0 && failed_starts >= START_FAILURES_TO_STOP;
    let messages = visible + in_flight + delayed;
    let for_messages = messages.div_ceil(u64::from(policy.backlog_per_task));
    let for_busy_tasks = in_flight.min(u64::from(running));
    let for_utilization = match readings.gpu_utilization {
        Some(percent) if running > 0 && percent > IDLE_UTILIZATION => {
            (f64::from(running) * percent / policy.utilization_target).ceil() as u64
        }
        _ => 0,
    };
    let wanted = if starts_failing { 0 } else { for_messages.max(for_busy_tasks).max(for_utilization) };
    let tasks_needed = wanted.clamp(u64::from(policy.min_tasks), u64::from(policy.max_tasks)) as u32;
    let change = i64::from(tasks_needed) - i64::from(desired);
    Decision {
        tasks_needed,
        change,
        scaling_metric: 1.0 + change as f64,
        backlog_without_capacity: messages > 0 && running == 0,
        starts_failing,
    }
}

/// One tier the scaler looks after.
pub struct ScaledTier {
    pub tier: Tier,
    pub service: Service,
    /// The tier's high and normal queues; their counts are added up.
    pub lanes: Lanes<Arc<dyn Queue>>,
    pub policy: ScalingPolicy,
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
}

impl Scaler {
    pub fn new(
        tiers: Vec<ScaledTier>,
        tasks: Arc<dyn ServiceTasks>,
        gpu: Arc<dyn GpuUtilization>,
        metrics: Emf,
    ) -> Self {
        Scaler { tiers, tasks, gpu, metrics, tick_now: Arc::new(Notify::new()) }
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
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
}
