//! Simulated time: milliseconds since the start of the trace, its units, and its conversions from seconds and to
//! hours.

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
