//! One tier as the simulation sees it: its environment (cold start, service time, price) and its scaling settings.

use super::cold_start::ColdStart;
use super::time::Millis;
use super::warm_window::WarmWindow;
use crate::contract::tier::Tier;
use crate::scaler::decision::ScalingPolicy;

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
