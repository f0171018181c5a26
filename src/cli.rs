//! The command line: `Cli` and its subcommands (each subcommand's flags live in its `cmd` module).

use clap::{Parser, Subcommand};

use crate::cmd;
use crate::telemetry::TelemetryArgs;

/// Asynchronous two-tier GPU inference pipeline: router, queue worker, scaler and tools in one binary.
#[derive(Debug, Parser)]
#[command(name = "gpuinfer", version, propagate_version = true)]
#[command(
    after_help = "Run the whole pipeline on this machine: gpuinfer dev (see README.md).\nEvery flag can also be set by the environment variable shown in its help."
)]
pub struct Cli {
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// HTTP API: validate, classify and enqueue requests; serve results (local HTTP server).
    Router(cmd::router::Args),
    /// Queue worker beside an OpenAI-compatible engine: receive, infer, store the result, delete.
    Worker(cmd::worker::Args),
    /// Exit 0 if the engine answers /health in time, 1 if not: the container health check beside the engine.
    Healthcheck(cmd::healthcheck::Args),
    /// Compute and publish each tier's scaling metric (not implemented yet).
    Scaler(NotBuilt),
    /// Inject a synthetic NVIDIA XID through the host's DCGM, so ECS auto-repair replaces the instance (demo).
    InjectXid(cmd::inject_xid::Args),
    /// Download model weights from an S3 prefix: parallel ranged GETs, resumable, verified.
    FetchModel(cmd::fetch_model::Args),
    /// The whole pipeline in one process: router, a worker pool per tier, embedded queues and result files.
    Dev(cmd::dev::Args),
}

/// Arguments of a subcommand this version does not implement yet.
#[derive(Debug, clap::Args)]
pub struct NotBuilt {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    pub args: Vec<String>,
}
