//! What every process has: metrics (names and EMF lines), logging, signals, and an error with its causes on one line.

pub mod error_chain;
pub mod metrics;
pub mod shutdown;
pub mod telemetry;
