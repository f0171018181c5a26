//! The two policies under comparison, each a metric and two alarm → step-policy rules:
//! - the AWS sample's, as its template and metric Lambda publish them: max(visible / threshold, GPU memory / 80),
//!   one task more when above 1.0 for a period (cooldown 120 s small, 180 s large), one task fewer when
//!   below 0.1 for the whole idle window;
//! - ours: `scaler::decide`'s metric, with the alarms docs/scaling.md specifies for template.yaml: as many tasks
//!   as metric − 1 says, up to `LARGEST_STEP` per step, in both directions; and the router asks for one task as
//!   soon as work arrives on a tier at zero.
//!
//! Both use the tier's idle window (scale-in evaluation periods) and scale-in cooldown.

use super::autoscaling::{Alarm, Comparison, ScalingRule, Step, StepPolicy};
use super::tier_model::TierModel;
use super::time::{Millis, SECOND};
use crate::contract::tier::Tier;
use crate::ports::{QueueCounts, TaskCounts};
use crate::scaler::decision::{Readings, decide};

/// The largest single step of our policies; template.yaml writes steps 1 to this many in each direction.
pub const LARGEST_STEP: i64 = 10;

/// Our scale-out cooldown: one scaler period, so a datapoint evaluated twice cannot add tasks twice.
const OUR_SCALE_OUT_COOLDOWN: Millis = 60 * SECOND;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    Sample,
    Ours,
}

impl PolicyKind {
    pub(crate) const BOTH: [PolicyKind; 2] = [PolicyKind::Sample, PolicyKind::Ours];

    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Sample => "sample",
            PolicyKind::Ours => "ours",
        }
    }
}

/// What a scaler can read at a tick.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Observation {
    pub queue: QueueCounts,
    pub tasks: TaskCounts,
    /// GPU compute utilization: the share of the last period the running tasks had a request in flight
    /// (a GPU decoding one request is as busy as one decoding a batch), in percent; None when no task runs.
    pub gpu_utilization: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct Policy {
    pub(crate) kind: PolicyKind,
    pub scale_out: ScalingRule,
    pub scale_in: ScalingRule,
    model: TierModel,
}

impl Policy {
    pub fn new(kind: PolicyKind, model: &TierModel) -> Self {
        let idle_window = |threshold, steps| ScalingRule {
            alarm: Alarm { comparison: Comparison::LessThan, threshold, periods: model.scale_in_periods },
            policy: StepPolicy { steps, cooldown: model.scale_in_cooldown },
        };
        let one_period = |steps, cooldown| ScalingRule {
            alarm: Alarm { comparison: Comparison::GreaterThan, threshold: 1.0, periods: 1 },
            policy: StepPolicy { steps, cooldown },
        };
        let (scale_out, scale_in) = match kind {
            PolicyKind::Sample => (
                one_period(
                    vec![Step { lower: Some(0.0), upper: None, adjustment: 1 }],
                    sample_scale_out_cooldown(model.tier),
                ),
                idle_window(0.1, vec![Step { lower: None, upper: Some(0.0), adjustment: -1 }]),
            ),
            PolicyKind::Ours => {
                (one_period(proportional_steps(1), OUR_SCALE_OUT_COOLDOWN), idle_window(1.0, proportional_steps(-1)))
            }
        };
        Policy { kind, scale_out, scale_in, model: model.clone() }
    }

    /// Whether work arriving on a tier at zero asks for a task at once (our router's UpdateService), not only
    /// through the scaler's next datapoint and the alarm after it.
    pub(crate) fn wakes_on_arrival(&self) -> bool {
        self.kind == PolicyKind::Ours
    }

    /// The metric this policy's scaler publishes for `observation`.
    pub(crate) fn metric(&self, observation: &Observation) -> f64 {
        match self.kind {
            PolicyKind::Sample => {
                let gpu_memory = (observation.tasks.running > 0).then_some(self.model.gpu_memory_when_running);
                sample_metric(observation.queue.visible, gpu_memory, self.model.scaling.backlog_per_task())
            }
            PolicyKind::Ours => {
                let readings = Readings {
                    queue: observation.queue,
                    tasks: observation.tasks,
                    gpu_utilization: observation.gpu_utilization,
                };
                decide(&readings, &self.model.scaling).scaling_metric
            }
        }
    }
}

/// The AWS sample's metric: max(visible / threshold, GPU memory / 80), memory 0 when there is no datapoint.
pub(crate) fn sample_metric(visible: u64, gpu_memory_percent: Option<f64>, threshold: u32) -> f64 {
    (visible as f64 / f64::from(threshold)).max(gpu_memory_percent.unwrap_or(0.0) / 80.0).max(0.0)
}

/// The AWS sample template's scale-out cooldown.
fn sample_scale_out_cooldown(tier: Tier) -> Millis {
    match tier {
        Tier::Small => 120 * SECOND,
        Tier::Large => 180 * SECOND,
    }
}

/// Steps changing capacity by k tasks (times `sign`) when metric − 1 is k, for k = 1..=LARGEST_STEP;
/// bounds sit half a task either side, and the last step is open-ended.
fn proportional_steps(sign: i64) -> Vec<Step> {
    (1..=LARGEST_STEP)
        .map(|k| {
            let near = if k == 1 { 0.0 } else { k as f64 - 0.5 };
            let far = (k < LARGEST_STEP).then_some(k as f64 + 0.5);
            if sign > 0 {
                Step { lower: Some(near), upper: far, adjustment: k }
            } else {
                Step { lower: far.map(|bound| -bound), upper: Some(-near), adjustment: -k }
            }
        })
        .collect()
}
