//! The inference engine beside a worker: the OpenAI-compatible client, the reading of its load gauges, and the
//! engine simulator (a GPU-like engine for tests and benchmarks).

pub(crate) mod client;
pub(crate) mod load;
#[cfg(feature = "test-support")]
pub mod simulator;
