//! `gpuinfer healthcheck`: exit 0 if the engine answers /health in time, 1 if not (ECS and Docker health checks).

use std::time::Duration;

use anyhow::{Context, bail};
use tokio_util::sync::CancellationToken;

use crate::engine::client::DEFAULT_ENGINE_URL;
use crate::engine::client::{EngineClient, EngineConfig};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Base URL of the engine whose /health is asked.
    #[arg(long, env = "ENGINE_URL", default_value = DEFAULT_ENGINE_URL)]
    pub(crate) engine_url: String,
    /// Longest wait for the answer, in seconds.
    #[arg(long, env = "HEALTHCHECK_TIMEOUT_SECONDS", default_value_t = 2.0)]
    pub(crate) timeout_seconds: f64,
}

pub struct Config {
    engine: EngineClient,
    timeout: Duration,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        let timeout = Duration::try_from_secs_f64(self.timeout_seconds)
            .ok()
            .filter(|timeout| !timeout.is_zero())
            .context("--timeout-seconds must be a positive number of seconds")?;
        let engine =
            EngineClient::new(&EngineConfig { base_url: self.engine_url, model: None, request_timeout: timeout })?;
        Ok(Config { engine, timeout })
    }
}

pub(crate) async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let base = config.engine.base();
    tokio::select! {
        health = config.engine.health(config.timeout) => {
            health.with_context(|| format!("the engine at {base} is not healthy"))?;
        }
        () = shutdown.cancelled() => bail!("interrupted"),
    }
    println!("the engine at {base} is healthy");
    Ok(())
}
