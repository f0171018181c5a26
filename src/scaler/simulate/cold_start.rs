//! A task's cold start, phase by phase: from the desired count rising to the task's worker receiving its first
//! request. The lone-request view prints each phase; the event loop uses their sum.

use super::time::{Millis, seconds};

/// The phases, in order, as the lone-request view names them.
pub const PHASES: [&str; 4] =
    ["task start: instance launch + image pull", "weights on disk", "engine healthy", "first request received"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColdStart {
    /// Each phase's length, in the order of `PHASES`.
    pub phases: [Millis; PHASES.len()],
}

impl ColdStart {
    /// From each phase's length in seconds.
    pub fn from_seconds(phases: [f64; PHASES.len()]) -> Self {
        ColdStart { phases: phases.map(seconds) }
    }

    pub fn total(&self) -> Millis {
        self.phases.iter().sum()
    }

    /// The same split, each phase stretched or shrunk so that they add up to `total`.
    pub fn scaled_to(&self, total: Millis) -> Self {
        let sum = self.total();
        if sum == 0 {
            return ColdStart { phases: [total, 0, 0, 0] };
        }
        let mut phases = self.phases.map(|phase| (phase as f64 * total as f64 / sum as f64).round() as Millis);
        // Rounding lands on the last phase, so the phases add up to `total` exactly.
        let others: Millis = phases[..PHASES.len() - 1].iter().sum();
        phases[PHASES.len() - 1] = total.saturating_sub(others);
        ColdStart { phases }
    }
}
