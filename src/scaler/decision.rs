//! The scaling metric: a pure decision per tier (`decide`) from queue, task and GPU readings.
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

use serde::Serialize;

use crate::contract::tier::PerTier;
use crate::ports::{QueueCounts, START_FAILURES_TO_STOP, TaskCounts};

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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! The scaling decision against the AWS sample's counterexamples, term by term, and the checks on a policy.

    use super::{PolicyError, Readings, ScalingPolicy, decide};
    use crate::ports::START_FAILURES_TO_STOP;
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
