//! The engine's pace for one request: seconds per completion token over the generations that ended (an exponential
//! average), and how long a request's whole token budget takes at it. A stopping worker lets run only the requests
//! whose budget ends within its drain and gives the others back at once (`request_run`): on a Spot instance's
//! two-minute notice, another task starts them now instead of after the drain.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Weight of the newest generation in the average.
const NEWEST_WEIGHT: f64 = 0.125;

#[derive(Default)]
pub(super) struct GenerationPace {
    /// Seconds per completion token, as f64 bits; 0 until a generation with tokens ended.
    per_token: AtomicU64,
}

impl GenerationPace {
    /// Takes in a generation of `completion_tokens` that took `engine_time`.
    pub(super) fn observe(&self, engine_time: Duration, completion_tokens: u64) {
        if completion_tokens == 0 {
            return;
        }
        let sample = engine_time.as_secs_f64() / completion_tokens as f64;
        let _ = self.per_token.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            let average = f64::from_bits(bits);
            let next = if average > 0.0 { average + NEWEST_WEIGHT * (sample - average) } else { sample };
            Some(next.to_bits())
        });
    }

    /// How long `tokens` take at the pace seen so far; None before a generation ended.
    pub(super) fn time_for(&self, tokens: u32) -> Option<Duration> {
        let per_token = f64::from_bits(self.per_token.load(Ordering::Relaxed));
        (per_token > 0.0).then(|| Duration::from_secs_f64(per_token * f64::from(tokens)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_first_generation_sets_the_pace_and_later_ones_move_it_by_an_eighth() {
        let pace = GenerationPace::default();
        assert_eq!(pace.time_for(100), None, "no pace before a generation");
        pace.observe(Duration::from_secs(1), 0);
        assert_eq!(pace.time_for(100), None, "a generation of no tokens says nothing");
        pace.observe(Duration::from_secs(2), 100);
        assert_eq!(pace.time_for(50), Some(Duration::from_secs(1)));
        pace.observe(Duration::from_secs(10), 100);
        // 20 ms + (100 ms − 20 ms) / 8 = 30 ms a token.
        let thousand = pace.time_for(1000).unwrap().as_secs_f64();
        assert!((thousand - 30.0).abs() < 1e-9, "{thousand}");
    }
}
