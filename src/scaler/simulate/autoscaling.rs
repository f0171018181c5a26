//! CloudWatch alarms, step scaling policies and an ECS service's scalable target, following the rules
//! Application Auto Scaling documents: an alarm in ALARM invokes its policy every period; a step is chosen
//! by how far the metric is past the threshold; scale-out cooldowns count the previous step, scale-in
//! cooldowns block; the desired count stays within [min, max], which scheduled actions may move.

use super::time::Millis;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    GreaterThan,
    LessThan,
}

/// An alarm over one-minute periods, one datapoint per period: in ALARM when the last `periods` all breach.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Alarm {
    pub(crate) comparison: Comparison,
    pub threshold: f64,
    pub(crate) periods: usize,
}

impl Alarm {
    pub fn in_alarm(&self, datapoints: &[f64]) -> bool {
        datapoints.len() >= self.periods
            && datapoints.iter().rev().take(self.periods).all(|&value| match self.comparison {
                Comparison::GreaterThan => value > self.threshold,
                Comparison::LessThan => value < self.threshold,
            })
    }
}

/// One step adjustment: an interval of (metric − threshold), unbounded where None, and the change it makes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Step {
    pub(crate) lower: Option<f64>,
    pub(crate) upper: Option<f64>,
    pub adjustment: i64,
}

impl Step {
    /// Above the threshold the lower bound is inclusive and the upper exclusive; below it, the reverse.
    fn holds(&self, breach: f64) -> bool {
        let above = breach >= 0.0;
        self.lower.is_none_or(|lower| if above { breach >= lower } else { breach > lower })
            && self.upper.is_none_or(|upper| if above { breach < upper } else { breach <= upper })
    }
}

/// A step scaling policy with `ChangeInCapacity` adjustments.
#[derive(Debug, Clone, PartialEq)]
pub struct StepPolicy {
    pub(crate) steps: Vec<Step>,
    pub(crate) cooldown: Millis,
}

impl StepPolicy {
    /// The change the step holding `breach` (metric − threshold) asks for.
    pub fn adjustment(&self, breach: f64) -> Option<i64> {
        self.steps.iter().find(|step| step.holds(breach)).map(|step| step.adjustment)
    }
}

/// An alarm and the policy it invokes.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalingRule {
    pub alarm: Alarm,
    pub policy: StepPolicy,
}

impl ScalingRule {
    /// The change this rule asks for given the metric's datapoints so far, if its alarm is in ALARM.
    pub(crate) fn triggered(&self, datapoints: &[f64]) -> Option<i64> {
        let latest = datapoints.last()?;
        self.alarm.in_alarm(datapoints).then(|| self.policy.adjustment(latest - self.alarm.threshold)).flatten()
    }
}

/// An ECS service's desired count, as Application Auto Scaling moves it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalableTarget {
    desired: u32,
    min: u32,
    max: u32,
    /// While a scale-out cooldown runs: when it ends and the change that started it.
    scale_out_cooldown: Option<(Millis, i64)>,
    scale_in_blocked_until: Millis,
}

impl ScalableTarget {
    pub fn new(min: u32, max: u32) -> Self {
        ScalableTarget { desired: min, min, max, scale_out_cooldown: None, scale_in_blocked_until: 0 }
    }

    pub fn desired(&self) -> u32 {
        self.desired
    }

    /// Applies a policy's change at `now`. During a scale-out cooldown only a larger scale-out acts, by the
    /// difference; during a scale-in cooldown scale-in waits (a scale-out does not).
    pub fn apply(&mut self, now: Millis, change: i64, cooldown: Millis) {
        if change > 0 {
            let counted = match self.scale_out_cooldown {
                Some((until, started_by)) if now < until => started_by,
                _ => 0,
            };
            if change > counted && self.set(i64::from(self.desired) + change - counted) {
                self.scale_out_cooldown = Some((now + cooldown, change));
            }
        } else if change < 0 && now >= self.scale_in_blocked_until && self.set(i64::from(self.desired) + change) {
            self.scale_in_blocked_until = now + cooldown;
        }
    }

    /// A scheduled action's new MinCapacity: a desired count below it rises to it; one above it stays, for the
    /// scale-in policy to lower.
    pub fn set_min(&mut self, min: u32) {
        self.min = min.min(self.max);
        self.set(i64::from(self.desired));
    }

    /// The router's UpdateService on a tier at zero: one task at once, outside the scaling policies, so no
    /// cooldown starts.
    pub fn wake(&mut self) {
        if self.desired == 0 {
            self.set(1);
        }
    }

    /// Sets the desired count within [min, max]; true if it changed.
    fn set(&mut self, desired: i64) -> bool {
        let desired = desired.clamp(i64::from(self.min), i64::from(self.max)) as u32;
        let changed = desired != self.desired;
        self.desired = desired;
        changed
    }
}
