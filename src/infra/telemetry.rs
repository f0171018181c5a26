//! Logging setup: human-readable or JSON lines on stderr, level from RUST_LOG or AWS_LAMBDA_LOG_LEVEL.

use std::io::IsTerminal;

use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct TelemetryArgs {
    /// Log format; JSON is what CloudWatch Logs Insights queries best.
    #[arg(long, global = true, env = "AWS_LAMBDA_LOG_FORMAT", value_enum, ignore_case = true, default_value = "text")]
    pub(crate) log_format: LogFormat,
    /// Log level or filter (error, warn, info, debug, or a RUST_LOG filter such as gpuinfer=debug).
    #[arg(long, global = true, env = "RUST_LOG", default_value = "info")]
    pub(crate) log_level: String,
}

/// Installs the global subscriber. AWS_LAMBDA_LOG_LEVEL wins over the flag, as Lambda's log config expects.
pub(crate) fn init(args: &TelemetryArgs) {
    let level =
        std::env::var("AWS_LAMBDA_LOG_LEVEL").map(|l| l.to_lowercase()).unwrap_or_else(|_| args.log_level.clone());
    let filter = EnvFilter::try_new(&level).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match args.log_format {
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
