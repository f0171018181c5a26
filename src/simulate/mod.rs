//! The scaling simulator behind `gpuinfer simulate`: the seed's policy and ours on the same traffic, in
//! simulated time, so their cost, losses and latency can be compared before anything is deployed.
//!
//! Layout:
//! - `trace`: request arrivals from a seeded generator (Poisson, on/off bursts, a daily cycle) or a CSV file
//! - `autoscaling`: CloudWatch alarms, step scaling policies and the scalable target, by AWS's documented rules
//! - `policy`: the two policies under comparison: their metric and their alarms
//! - `engine`: one tier under one policy: queue, tasks with cold starts, the scaler's ticks
//! - `report`: the side-by-side table; `plot`: tasks and backlog over time as SVG

pub mod autoscaling;
pub mod engine;
pub mod plot;
pub mod policy;
pub mod report;
pub mod trace;

/// Simulated time, in milliseconds since the start of the trace.
pub type Millis = u64;

pub const SECOND: Millis = 1_000;
pub const MINUTE: Millis = 60 * SECOND;
pub const HOUR: Millis = 60 * MINUTE;

/// A (non-negative) number of seconds as simulated time.
pub fn seconds(value: f64) -> Millis {
    (value.max(0.0) * SECOND as f64).round() as Millis
}

/// Simulated time as hours, for tables and plots.
pub fn hours(time: Millis) -> f64 {
    time as f64 / HOUR as f64
}
