//! Entry point: parse the command line, start logging and the shutdown signal, run the subcommand.

use std::process::ExitCode;

use clap::Parser;

use gpuinfer::cli::{self, Cli, Command};
use gpuinfer::cmd;
use gpuinfer::cmd::client::ClientError;
use gpuinfer::cmd::inject_xid::xid::XidError;
use gpuinfer::infra::{shutdown, telemetry};

/// Runtime threads of `gpuinfer worker`, at most: it waits on the queue and the engine, and two threads carry
/// thousands of requests per second (BENCHMARKS.md, P3), where one per core would be 192 on a g6e.48xlarge.
const WORKER_RUNTIME_THREADS: usize = 2;

fn main() -> ExitCode {
    let cli = Cli::parse_from(cli::arguments());
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if matches!(cli.command, Command::Worker(_)) {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        runtime.worker_threads(cores.min(WORKER_RUNTIME_THREADS));
    }
    match runtime.enable_all().build() {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(error) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("gpuinfer: cannot start the async runtime: {error}");
            }
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> ExitCode {
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
