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
pub(crate) async fn run(slots: Arc<Slots>, service: Service, emf: Emf) {
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
mod tests {
    //! What a worker publishes about its saturation, and under which dimensions.

    use std::io::Write;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use crate::contract::tier::Tier;
    use crate::infra::metrics::Emf;
    use crate::ports::Service;
    use crate::worker::slots::Slots;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn every_ten_seconds_the_mean_share_of_the_limit_in_use_goes_out_under_the_cluster_and_service() {
        let slots = Slots::new(4);
        let held = slots.try_take().unwrap();
        let lines = Lines::default();
        let service = Service::of_tier("prod", "stack-{tier}", Tier::Large);
        let reporter = tokio::spawn(super::run(Arc::clone(&slots), service, Emf::to_writer(lines.clone())));
        tokio::time::sleep(Duration::from_millis(4500)).await; // samples at 0..4 s: one of four slots in use
        let more: Vec<_> = (0..3).map(|_| slots.try_take().unwrap()).collect(); // samples at 5..9 s: all four
        tokio::time::sleep(Duration::from_secs(6)).await;
        reporter.abort();
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let line: serde_json::Value = serde_json::from_str(text.lines().next().expect("one report")).unwrap();
        assert_eq!(line["EngineSaturation"], 62.5, "(5 × 25 % + 5 × 100 %) ÷ 10: {text}");
        assert_eq!(line["ClusterName"], "prod");
        assert_eq!(line["ServiceName"], "stack-large");
        let declared = &line["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(declared["Dimensions"], serde_json::json!([["ClusterName", "ServiceName"]]));
        assert_eq!(declared["Metrics"][0]["Unit"], "Percent");
        drop((held, more));
    }
}
