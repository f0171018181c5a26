//! What a tier's instances are in a simulated run: On-Demand, or Spot with the assumptions it is modelled by (what
//! `spot` prices and compares, and `event_loop` plays: launches without capacity, the fallback, interruptions).

use super::time::Millis;

/// A tier's instances: On-Demand, or Spot as modelled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Capacity {
    OnDemand,
    Spot(SpotModel),
}

/// The assumptions of a Spot run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpotModel {
    /// A Spot task-hour's price as a fraction of the On-Demand one.
    pub price_fraction: f64,
    /// Interruptions per Spot task-hour (a notice; the task drains and a new one starts).
    pub interruptions_per_hour: f64,
    /// The chance a Spot task's launch finds no Spot capacity.
    pub shortage: f64,
    /// How long such a launch waits for Spot capacity.
    pub shortage_wait: Millis,
    /// With the fallback: how long a Spot task may wait before an On-Demand one starts for it, and how long the Spot
    /// task must serve before that one stops.
    pub fallback_after: Option<Millis>,
}

impl SpotModel {
    pub fn with_fallback(self, bound: Millis) -> Self {
        SpotModel { fallback_after: Some(bound), ..self }
    }
}
