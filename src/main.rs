//! Entry point: parse the command line, start logging and the shutdown signal, run the subcommand.

use std::process::ExitCode;

use clap::Parser;
use gpuinfer::cli::{Cli, Command};
use gpuinfer::{cmd, shutdown, telemetry};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init(&cli.telemetry);
    let shutdown = shutdown::on_signals();
    let outcome = match cli.command {
        Command::Router(args) => async { cmd::router::run(args.into_config()?, shutdown).await }.await,
        Command::Worker(args) => async { cmd::worker::run(args.into_config()?, shutdown).await }.await,
        Command::FetchModel(args) => async { cmd::fetch_model::run(args.into_config()?, shutdown).await }.await,
        Command::Dev(args) => async { cmd::dev::run(args.into_config()?, shutdown).await }.await,
        Command::Scaler(args) => async { cmd::scaler::run(args.into_config()?, shutdown).await }.await,
        Command::Simulate(args) => args.into_config().and_then(cmd::simulate::run),
        Command::InjectXid(_) => return not_built("inject-xid"),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("gpuinfer: {error:#}");
            }
            ExitCode::FAILURE
        }
    }
}

fn not_built(name: &str) -> ExitCode {
    #[allow(clippy::print_stderr)]
    {
        eprintln!("gpuinfer {name}: not implemented yet");
    }
    ExitCode::from(2)
}
