//! A worker's saturation, published for the scaler: its requests in flight as a share of its in-flight limit (the
//! engine's free slots, as the adaptive limit found them), sampled every second and written every 10 s as the EMF
//! metric `EngineSaturation` (percent) under its ECS cluster and service, the dimensions the scaler reads it by.

use std::sync::Arc;
use std::time::Duration;

use crate::infra::metrics::{self, Emf, Metric};
use crate::ports::Service;
use crate::worker::slots::Slots;

const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// Samples averaged into one published value.
const SAMPLES_PER_REPORT: u32 = 10;

/// Samples and publishes until aborted.
pub async fn run(slots: Arc<Slots>, service: Service, emf: Emf) {
    let dimensions = [("ClusterName", service.cluster.as_str()), ("ServiceName", service.name.as_str())];
    let mut ticks = tokio::time::interval(SAMPLE_EVERY);
    loop {
        let mut sum = 0.0;
        for _ in 0..SAMPLES_PER_REPORT {
            ticks.tick().await;
            sum += saturation(&slots);
        }
        let percent = 100.0 * sum / f64::from(SAMPLES_PER_REPORT);
        emf.emit(&dimensions, &[Metric::percent(metrics::ENGINE_SATURATION, percent)]);
    }
}

/// Requests in flight ÷ the in-flight limit, at most 1 (a lowered limit takes effect as requests finish).
fn saturation(slots: &Slots) -> f64 {
    (slots.in_flight() as f64 / slots.limit().max(1) as f64).min(1.0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
