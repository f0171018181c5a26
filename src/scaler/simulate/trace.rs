//! Traffic for the simulator: request arrival times from a seeded generator (Poisson, on/off bursts, a
//! daily cycle) or from a CSV file, and their split between the tiers.

use std::f64::consts::TAU;

use super::time::{HOUR, MINUTE, Millis, seconds};
use crate::contract::tier::{PerTier, Tier};

/// A traffic generator; every rate is in requests per hour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Traffic {
    /// Arrivals at a constant rate.
    Poisson { rate: f64 },
    /// Silences and bursts in turn (starting with a silence), both of exponentially distributed length;
    /// arrivals come at `rate` during bursts only.
    Bursty { rate: f64, burst_minutes: f64, gap_minutes: f64 },
    /// A daily cycle averaging `rate`: rate × (1 + cos(2π (t − peak) / 24 h)), so twice the mean at the peak
    /// hour and nothing twelve hours later.
    Diurnal { rate: f64, peak_hour: f64 },
}

impl std::fmt::Display for Traffic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Traffic::Poisson { rate } => write!(f, "Poisson traffic at {rate} requests/h"),
            Traffic::Bursty { rate, burst_minutes, gap_minutes } => write!(
                f,
                "bursty traffic: {rate} requests/h in bursts of ~{burst_minutes} min after silences of ~{gap_minutes} min"
            ),
            Traffic::Diurnal { rate, peak_hour } => {
                write!(f, "diurnal traffic averaging {rate} requests/h, peaking at {peak_hour}:00")
            }
        }
    }
}

/// One arrival; `tier` is None when the trace does not say.
pub(crate) type RawArrival = (Millis, Option<Tier>);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem} (expected `seconds` or `seconds,tier`, e.g. `12.5,large`)")]
pub struct CsvError {
    pub line: usize,
    pub problem: String,
}

/// Arrival times over `duration`, sorted; the same `rng` seed gives the same trace.
pub fn generate(traffic: Traffic, duration: Millis, rng: &mut fastrand::Rng) -> Vec<RawArrival> {
    let mut times = Vec::new();
    match traffic {
        Traffic::Poisson { rate } => poisson(rate, 0, duration, rng, &mut times),
        Traffic::Bursty { rate, burst_minutes, gap_minutes } => {
            let (mut start, mut bursting) = (0.0, false);
            while start < duration as f64 {
                let mean = if bursting { burst_minutes } else { gap_minutes };
                let end = start + exponential(rng, mean * MINUTE as f64);
                if bursting {
                    poisson(rate, start as Millis, (end as Millis).min(duration), rng, &mut times);
                }
                (start, bursting) = (end, !bursting);
            }
        }
        Traffic::Diurnal { rate, peak_hour } => {
            poisson(2.0 * rate, 0, duration, rng, &mut times);
            times.retain(|&at| {
                let hours_from_peak = at as f64 / HOUR as f64 - peak_hour;
                rng.f64() < (1.0 + (TAU * hours_from_peak / 24.0).cos()) / 2.0
            });
        }
    }
    times.into_iter().map(|at| (at, None)).collect()
}

/// One arrival per line: seconds since the start, then optionally the tier (`12.5` or `12.5,large`).
/// A first line that does not start with a number is a header; blank lines and `#` comments are skipped.
pub fn parse_csv(text: &str) -> Result<Vec<RawArrival>, CsvError> {
    let mut arrivals = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split(',').map(str::trim);
        let first = fields.next().unwrap_or_default();
        let at = match first.parse::<f64>() {
            Ok(at) if at.is_finite() && at >= 0.0 => seconds(at),
            _ if index == 0 => continue,
            _ => return Err(CsvError { line: index + 1, problem: format!("`{first}` is not a number of seconds") }),
        };
        let tier = match fields.next() {
            None | Some("") => None,
            Some(name) => Some(
                Tier::parse(name)
                    .ok_or_else(|| CsvError { line: index + 1, problem: format!("unknown tier `{name}`") })?,
            ),
        };
        arrivals.push((at, tier));
    }
    arrivals.sort_by_key(|&(at, _)| at);
    Ok(arrivals)
}

/// Each tier's arrival times. An arrival naming a tier goes there; the others go to the only tier
/// simulated, or with both, to the large tier with probability `large_share`.
pub fn split_by_tier(
    arrivals: &[RawArrival],
    tiers: &[Tier],
    large_share: f64,
    rng: &mut fastrand::Rng,
) -> PerTier<Vec<Millis>> {
    let mut split = PerTier { small: Vec::new(), large: Vec::new() };
    for &(at, named) in arrivals {
        let tier = named.unwrap_or_else(|| match tiers {
            [only] => *only,
            _ if rng.f64() < large_share => Tier::Large,
            _ => Tier::Small,
        });
        split.get_mut(tier).push(at);
    }
    split
}

/// Arrivals of a Poisson process at `rate` per hour in [from, to).
fn poisson(rate: f64, from: Millis, to: Millis, rng: &mut fastrand::Rng, out: &mut Vec<Millis>) {
    if rate <= 0.0 {
        return;
    }
    let mean_gap = HOUR as f64 / rate;
    let mut at = from as f64;
    loop {
        at += exponential(rng, mean_gap);
        if at >= to as f64 {
            return;
        }
        out.push(at as Millis);
    }
}

fn exponential(rng: &mut fastrand::Rng, mean: f64) -> f64 {
    -mean * (1.0 - rng.f64()).ln()
}
