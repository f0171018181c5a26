//! One module per subcommand: its flags (`Args`, each also an environment variable), checked once into a config, and `run`.

pub(crate) mod api_key;
pub(crate) mod args;
pub(crate) mod backends;
pub(crate) mod client;
pub(crate) mod dev;
pub(crate) mod fetch_model;
pub(crate) mod get;
pub(crate) mod healthcheck;
pub(crate) mod inject_xid;
pub(crate) mod router;
pub(crate) mod scaler;
pub(crate) mod simulate;
pub(crate) mod submit;
pub(crate) mod worker;

use std::process::ExitCode;

use crate::cli::{Cli, Command};
use crate::cmd::client::ClientError;
use crate::cmd::inject_xid::xid::XidError;
use crate::infra::{shutdown, telemetry};

/// Runs the command `cli` names, with logging and the shutdown signal started, and says how it ended.
pub async fn run(cli: Cli) -> ExitCode {
    telemetry::init(&cli.telemetry);
    let shutdown = shutdown::on_signals();
    let outcome = match cli.command {
        #[cfg(feature = "all-commands")]
        Command::Router(args) => Box::pin(async { router::run(args.into_config()?, shutdown).await }).await,
        Command::Worker(args) => async { worker::run(args.into_config()?, shutdown).await }.await,
        Command::FetchModel(args) => async { fetch_model::run(args.into_config()?, shutdown).await }.await,
        #[cfg(feature = "all-commands")]
        Command::Dev(args) => Box::pin(async { dev::run(args.into_config()?, shutdown).await }).await,
        Command::Healthcheck(args) => async { healthcheck::run(args.into_config()?, shutdown).await }.await,
        Command::InjectXid(args) => async { inject_xid::run(args.into_config()?, shutdown).await }.await,
        #[cfg(feature = "all-commands")]
        Command::Scaler(args) => async { scaler::run(args.into_config()?, shutdown).await }.await,
        #[cfg(feature = "all-commands")]
        Command::Simulate(args) => args.into_config().and_then(simulate::run),
        #[cfg(feature = "all-commands")]
        Command::Submit(args) => async { submit::run(args.into_config()?, shutdown).await }.await,
        #[cfg(feature = "all-commands")]
        Command::Get(args) => async { get::run(args.into_config()?, shutdown).await }.await,
        #[cfg(feature = "all-commands")]
        Command::ApiKey(args) => async { api_key::run(args.into_config()?, shutdown).await }.await,
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
