//! The Spot fallback of a tier on spot-with-fallback: ECS never replaces Spot capacity it cannot get with On-Demand,
//! so the scaler does. When a task of the tier's (Spot) service has waited `bound` for an instance, the tier's
//! fallback service (the same task on the On-Demand provider) is asked for as many tasks as Spot owes; when every
//! Spot task runs and the youngest has run `bound`, or the tier needs none, the fallback goes back to 0. Each switch
//! needs `bound` of the other state, so it cannot flap faster than that.

use std::time::Duration;

use serde::Serialize;

use crate::ports::{Service, TaskAges, TaskCounts};

/// A tier's fallback service and how long a Spot task may wait before it is used.
#[derive(Debug, Clone)]
pub struct Fallback {
    pub service: Service,
    pub bound: Duration,
}

/// What the fallback decision reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FallbackReadings {
    pub spot: TaskCounts,
    pub spot_ages: TaskAges,
    pub on_demand: TaskCounts,
}

/// The fallback service's desired count, and why it changes (None: it stays).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FallbackDecision {
    pub on_demand_tasks: u32,
    #[serde(skip)]
    pub switch: Option<Switch>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Switch {
    /// A Spot task waited the bound for an instance: On-Demand serves what Spot owes.
    ToOnDemand,
    /// Spot serves the tier again (or it needs nothing): the On-Demand tasks stop.
    BackToSpot,
}

pub(crate) fn decide(readings: &FallbackReadings, bound: Duration) -> FallbackDecision {
    let (spot, ages, current) = (readings.spot, readings.spot_ages, readings.on_demand.desired);
    let owed = spot.desired.saturating_sub(spot.running);
    let starved = ages.oldest_provisioning.is_some_and(|waited| waited >= bound);
    let spot_serves = ages.oldest_provisioning.is_none()
        && owed == 0
        && (spot.desired == 0 || ages.youngest_running.is_some_and(|ran| ran >= bound));
    let wanted = if starved {
        current.max(owed)
    } else if spot_serves {
        0
    } else {
        current
    };
    let switch = match (current, wanted) {
        (0, 1..) => Some(Switch::ToOnDemand),
        (1.., 0) => Some(Switch::BackToSpot),
        _ => None,
    };
    FallbackDecision { on_demand_tasks: wanted, switch }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: Duration = Duration::from_secs(300);

    fn readings(spot: (u32, u32), ages: (Option<u64>, Option<u64>), on_demand: u32) -> FallbackReadings {
        let counts = |running, desired| TaskCounts { running, desired, failed_starts: 0 };
        FallbackReadings {
            spot: counts(spot.0, spot.1),
            spot_ages: TaskAges {
                oldest_provisioning: ages.0.map(Duration::from_secs),
                youngest_running: ages.1.map(Duration::from_secs),
            },
            on_demand: counts(on_demand, on_demand),
        }
    }

    #[test]
    fn on_demand_serves_what_spot_owes_only_once_a_spot_task_waited_the_bound() {
        let waiting = |seconds| decide(&readings((0, 2), (Some(seconds), None), 0), BOUND);
        assert_eq!(waiting(299), FallbackDecision { on_demand_tasks: 0, switch: None }, "a cold start, not a shortage");
        assert_eq!(waiting(300), FallbackDecision { on_demand_tasks: 2, switch: Some(Switch::ToOnDemand) });
        // One Spot task came up: the fallback keeps both until Spot serves the whole tier.
        let one_up = decide(&readings((1, 2), (Some(400), Some(30)), 2), BOUND);
        assert_eq!(one_up, FallbackDecision { on_demand_tasks: 2, switch: None });
        // The tier asks for more while Spot still has none: the fallback grows with it.
        assert_eq!(decide(&readings((0, 3), (Some(600), None), 2), BOUND).on_demand_tasks, 3);
    }

    #[test]
    fn the_fallback_stops_once_spot_has_served_the_tier_for_the_bound_or_it_needs_nothing() {
        let serving = |ran| decide(&readings((2, 2), (None, Some(ran)), 2), BOUND);
        assert_eq!(serving(120), FallbackDecision { on_demand_tasks: 2, switch: None }, "not yet the bound");
        assert_eq!(serving(300), FallbackDecision { on_demand_tasks: 0, switch: Some(Switch::BackToSpot) });
        let idle = decide(&readings((0, 0), (None, None), 1), BOUND);
        assert_eq!(idle, FallbackDecision { on_demand_tasks: 0, switch: Some(Switch::BackToSpot) });
        // A Spot task still waiting keeps it, however long the others ran.
        assert_eq!(decide(&readings((2, 3), (Some(10), Some(900)), 1), BOUND).on_demand_tasks, 1);
    }

    #[test]
    fn a_tier_whose_spot_tasks_run_asks_nothing_of_on_demand() {
        let calm = decide(&readings((2, 2), (None, Some(5)), 0), BOUND);
        assert_eq!(calm, FallbackDecision { on_demand_tasks: 0, switch: None });
    }
}
