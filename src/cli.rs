//! The command line: `Cli` and its subcommands (each subcommand's flags live in its `cmd` module, flags shared by
//! several in `cmd::args`), and `run`, which runs the one given.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::cmd;
use crate::cmd::client::ClientError;
use crate::cmd::inject_xid::xid::XidError;
use crate::infra::shutdown;
use crate::infra::telemetry::{self, TelemetryArgs};

/// Names the subcommand when the binary runs with no arguments, as a Lambda `bootstrap` does.
pub const COMMAND_ENV: &str = "GPUINFER_COMMAND";

/// The command line to parse: the process arguments, or `gpuinfer $GPUINFER_COMMAND` when there are none.
pub fn arguments() -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.len() == 1
        && let Some(command) = std::env::var_os(COMMAND_ENV)
    {
        args.push(command);
    }
    args
}

/// The subcommands the inference container runs (entrypoint.sh, the image's health check, the XID injector): all
/// that a build without the `all-commands` feature keeps.
pub const CONTAINER_COMMANDS: [&str; 4] = ["worker", "healthcheck", "fetch-model", "inject-xid"];

/// Asynchronous two-tier GPU inference pipeline: router, queue worker, scaler and tools in one binary.
#[derive(Debug, Parser)]
#[command(name = "gpuinfer", version, propagate_version = true)]
#[command(
    after_help = "Run the whole pipeline on this machine: gpuinfer dev (see README.md).\nEvery flag can also be set by the environment variable shown in its help.\nWith no arguments (a Lambda bootstrap), GPUINFER_COMMAND names the subcommand."
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
    #[cfg(feature = "all-commands")]
    Router(cmd::router::Args),
    /// Queue worker beside an OpenAI-compatible engine: receive, infer, store the result, delete.
    Worker(Box<cmd::worker::Args>),
    /// Exit 0 if the engine answers /health in time, 1 if not: the container health check beside the engine.
    Healthcheck(cmd::healthcheck::Args),
    /// Compute and publish each tier's scaling metric: a local loop, or a Lambda function on a schedule.
    #[cfg(feature = "all-commands")]
    Scaler(cmd::scaler::Args),
    /// Inject a synthetic NVIDIA XID through the host's DCGM, so ECS auto-repair replaces the instance (demo).
    InjectXid(cmd::inject_xid::Args),
    /// Download model weights from an S3 prefix: parallel ranged GETs, resumable, verified.
    FetchModel(cmd::fetch_model::Args),
    /// The whole pipeline in one process: router, a worker pool per tier, the scaler, embedded queues and result files.
    #[cfg(feature = "all-commands")]
    Dev(Box<cmd::dev::Args>),
    /// Replay a traffic trace against the AWS sample's scaling policy and ours; print cost, losses and latency side by side.
    #[cfg(feature = "all-commands")]
    Simulate(cmd::simulate::Args),
    /// Send a request to a router (prompt from the arguments or stdin); print its requestId, or with --wait its result.
    #[cfg(feature = "all-commands")]
    Submit(cmd::submit::Args),
    /// Print a request's result from a router (with --wait, once it exists).
    #[cfg(feature = "all-commands")]
    Get(cmd::get::Args),
    /// Make, list and revoke the API keys of a deployed stack's /v1 routes (kept as digests in its ApiKeysSecret).
    #[cfg(feature = "all-commands")]
    ApiKey(cmd::api_key::Args),
}

/// Runs the command `cli` names, with logging and the shutdown signal started, and says how it ended.
pub async fn run(cli: Cli) -> ExitCode {
    telemetry::init(&cli.telemetry);
    let shutdown = shutdown::on_signals();
    let outcome = match cli.command {
        #[cfg(feature = "all-commands")]
        Command::Router(args) => Box::pin(async { cmd::router::run(args.into_config()?, shutdown).await }).await,
        Command::Worker(args) => async { cmd::worker::run(args.into_config()?, shutdown).await }.await,
        Command::FetchModel(args) => async { cmd::fetch_model::run(args.into_config()?, shutdown).await }.await,
        #[cfg(feature = "all-commands")]
        Command::Dev(args) => Box::pin(async { cmd::dev::run(args.into_config()?, shutdown).await }).await,
        Command::Healthcheck(args) => async { cmd::healthcheck::run(args.into_config()?, shutdown).await }.await,
        Command::InjectXid(args) => async { cmd::inject_xid::run(args.into_config()?, shutdown).await }.await,
        #[cfg(feature = "all-commands")]
        Command::Scaler(args) => async { cmd::scaler::run(args.into_config()?, shutdown).await }.await,
        #[cfg(feature = "all-commands")]
        Command::Simulate(args) => args.into_config().and_then(cmd::simulate::run),
        #[cfg(feature = "all-commands")]
        Command::Submit(args) => async { cmd::submit::run(args.into_config()?, shutdown).await }.await,
        #[cfg(feature = "all-commands")]
        Command::Get(args) => async { cmd::get::run(args.into_config()?, shutdown).await }.await,
        #[cfg(feature = "all-commands")]
        Command::ApiKey(args) => async { cmd::api_key::run(args.into_config()?, shutdown).await }.await,
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("gpuinfer: {error:#}");
            }
            ExitCode::from(exit_status(&error))
        }
    }
}

/// 1, unless the error says otherwise (inject-xid, submit and get document one status per cause).
fn exit_status(error: &anyhow::Error) -> u8 {
    error
        .downcast_ref::<XidError>()
        .map(XidError::exit_code)
        .or_else(|| error.downcast_ref::<ClientError>().map(ClientError::exit_code))
        .unwrap_or(1)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Unit tests of `cli.rs`.

    use clap::CommandFactory;

    use super::*;

    /// The container's build has exactly the container's subcommands; the full build has them and the rest. Run
    /// both ways by scripts/test.sh (`--no-default-features` for the container's build).
    #[test]
    fn the_container_build_keeps_exactly_the_commands_the_container_runs() {
        let names: Vec<String> = Cli::command().get_subcommands().map(|c| c.get_name().to_owned()).collect();
        for command in CONTAINER_COMMANDS {
            assert!(names.iter().any(|name| name == command), "{command} is missing from {names:?}");
        }
        if cfg!(feature = "all-commands") {
            assert!(names.iter().any(|name| name == "router") && names.iter().any(|name| name == "dev"), "{names:?}");
        } else {
            assert_eq!(names.len(), CONTAINER_COMMANDS.len(), "{names:?}");
        }
    }
}
