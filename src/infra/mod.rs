//! What every process has: metrics (names and EMF lines), logging, signals, an error with its causes on one line, and
//! whether it runs on Lambda.

pub(crate) mod error_chain;
pub mod metrics;
pub(crate) mod runtime;
pub(crate) mod shutdown;
pub(crate) mod telemetry;
