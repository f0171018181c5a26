//! gpuinfer: an asynchronous two-tier GPU inference pipeline for AWS, in one binary. The rooms of `src/`, what each
//! holds and which may import which: docs/architecture.md.

pub mod aws;
pub mod callbacks;
pub mod classifier;
pub mod cli;
pub mod cmd;
pub mod contract;
pub mod engine;
pub mod http;
pub mod infra;
pub mod local;
pub mod ports;
pub mod router;
pub mod scaler;
pub mod worker;
