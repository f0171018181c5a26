//! The scaling simulator behind `gpuinfer simulate`: the AWS sample's policy and ours on the same traffic, in
//! simulated time, so their cost, losses and latency can be compared before anything is deployed.
//!
//! Layout:
//! - `trace`: request arrivals from a seeded generator (Poisson, on/off bursts, a daily cycle) or a CSV file
//! - `autoscaling`: CloudWatch alarms, step scaling policies and the scalable target, by AWS's documented rules
//! - `policy`: the two policies under comparison: their metric and their alarms
//! - `cold_start`: a task's cold start by phase; `warm_window`: hours a tier keeps a task
//! - `event_loop`: one tier under one policy: queue, tasks with cold starts, the scaler's ticks, our wake on arrival
//! - `report`: the side-by-side table; `lone_request`: one request on an idle tier, phase by phase;
//!   `trade`: our policy's cost and latency by idle window and with a warm window; `plot`: tasks and backlog as SVG

pub mod autoscaling;
pub mod cold_start;
pub mod event_loop;
pub mod lone_request;
pub mod plot;
pub mod policy;
pub mod report;
pub mod trace;
pub mod trade;
pub mod warm_window;

use crate::contract::tier::Tier;
use crate::scaler::ScalingPolicy;
use cold_start::ColdStart;
use warm_window::WarmWindow;

/// Simulated time, in milliseconds since the start of the trace.
pub type Millis = u64;

pub const SECOND: Millis = 1_000;
pub const MINUTE: Millis = 60 * SECOND;
pub const HOUR: Millis = 60 * MINUTE;

/// A (non-negative) number of seconds as simulated time.
pub(crate) fn seconds(value: f64) -> Millis {
    (value.max(0.0) * SECOND as f64).round() as Millis
}

/// Simulated time as hours, for tables and plots.
pub(crate) fn hours(time: Millis) -> f64 {
    time as f64 / HOUR as f64
}

/// One tier's environment and scaling settings, shared by both policies.
#[derive(Debug, Clone)]
pub struct TierModel {
    pub tier: Tier,
    /// From the desired count rising to the new task's first request (instance, image, weights, engine).
    pub cold_start: ColdStart,
    pub service_time: Millis,
    /// Requests one task serves at once.
    pub concurrency: u32,
    pub price_per_hour: f64,
    pub scaling: ScalingPolicy,
    /// The idle window: periods the scale-in alarm must see below its threshold.
    pub scale_in_periods: usize,
    pub scale_in_cooldown: Millis,
    /// What Container Insights reports as GPU memory utilization while a task runs (vLLM reserves ~90 %).
    pub gpu_memory_when_running: f64,
    /// Hours the tier keeps at least one task; None for none.
    pub warm_window: Option<WarmWindow>,
}
