//! `gpuinfer worker`: one tier's queue worker beside an OpenAI-compatible engine.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use tokio_util::sync::CancellationToken;

use crate::cmd::router::local_output;
use crate::engine::{EngineClient, EngineConfig};
use crate::local::LocalBackends;
use crate::metrics::Emf;
use crate::routing::Tier;
use crate::worker::{Stopped, Worker, WorkerConfig};

/// How a worker pool behaves; shared by `worker` and `dev`.
#[derive(Debug, Clone, clap::Args)]
pub struct TuningArgs {
    /// Requests in flight at once (match the engine's parallel slots / max batch).
    #[arg(long, env = "WORKER_CONCURRENCY", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub concurrency: u32,
    /// Seconds a received message stays invisible, renewed while it runs [default: 300 small, 600 large].
    #[arg(long, env = "VISIBILITY_TIMEOUT")]
    pub visibility_timeout: Option<u64>,
    /// The queue's maxReceiveCount: the last attempt writes an error result instead of retrying.
    #[arg(long, env = "MAX_RECEIVE_COUNT", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_receive_count: u32,
    /// First retry delay in seconds after a transient failure; doubles with each attempt.
    #[arg(long, env = "RETRY_BASE_SECONDS", default_value_t = 2.0)]
    pub retry_base_seconds: f64,
    /// Long-poll wait of one receive, in seconds.
    #[arg(long, env = "WAIT_TIME_SECONDS", default_value_t = 20)]
    pub wait_time_seconds: u64,
    /// Longest single generation, in seconds, before it counts as a transient failure.
    #[arg(long, env = "ENGINE_TIMEOUT_SECONDS", default_value_t = 900)]
    pub engine_timeout_seconds: u64,
    /// Seconds the engine may fail its health probe before the worker releases its messages and exits non-zero.
    #[arg(long, env = "ENGINE_LOSS_WINDOW_SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub engine_loss_window_seconds: u64,
    /// Task identifier written into each result.
    #[arg(long, env = "ECS_TASK_ARN", default_value = "local")]
    pub task_arn: String,
}

impl TuningArgs {
    pub fn worker_config(&self, tier: Tier) -> anyhow::Result<WorkerConfig> {
        if !(self.retry_base_seconds.is_finite() && self.retry_base_seconds >= 0.0) {
            bail!("--retry-base-seconds must be a non-negative number of seconds");
        }
        let default_visibility = match tier {
            Tier::Small => 300,
            Tier::Large => 600,
        };
        Ok(WorkerConfig {
            tier,
            concurrency: self.concurrency as usize,
            wait_time: Duration::from_secs(self.wait_time_seconds),
            visibility_timeout: Duration::from_secs(self.visibility_timeout.unwrap_or(default_visibility).max(3)),
            max_receive_count: self.max_receive_count,
            retry_base: Duration::from_secs_f64(self.retry_base_seconds),
            health_interval: Duration::from_secs(1),
            engine_loss_window: Duration::from_secs(self.engine_loss_window_seconds),
            task_arn: self.task_arn.clone(),
        })
    }

    pub fn engine_config(&self, base_url: &str, model: Option<String>) -> EngineConfig {
        EngineConfig {
            base_url: base_url.to_owned(),
            model,
            request_timeout: Duration::from_secs(self.engine_timeout_seconds),
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which tier's queue this worker serves.
    #[arg(long, env = "TIER", value_enum, default_value = "small")]
    pub tier: Tier,
    /// Base URL of the OpenAI-compatible engine (/v1/completions, /v1/chat/completions, /health).
    #[arg(long, env = "ENGINE_URL", default_value = "http://127.0.0.1:8000")]
    pub engine_url: String,
    /// Model name sent to the engine [default: the first one it lists under /v1/models].
    #[arg(long, env = "MODEL_NAME")]
    pub model: Option<String>,
    /// SQS queue to consume (AWS mode; not supported by this build).
    #[arg(long, env = "REQUEST_QUEUE_URL")]
    pub request_queue_url: Option<String>,
    /// Where results are written: a local folder [default: the data directory].
    #[arg(long, env = "OUTPUT_DESTINATION")]
    pub output_destination: Option<String>,
    /// Data directory of the embedded queues and results.
    #[arg(long, env = "GPUINFER_DATA_DIR", default_value = ".gpuinfer")]
    pub data_dir: PathBuf,
    #[command(flatten)]
    pub tuning: TuningArgs,
}

pub struct Config {
    backends: LocalBackends,
    engine: EngineConfig,
    worker: WorkerConfig,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        if self.request_queue_url.is_some() {
            bail!(
                "REQUEST_QUEUE_URL is set, but this build runs on the embedded queues only; unset it or use `gpuinfer dev`"
            );
        }
        let dir = local_output(self.output_destination.as_deref(), &self.data_dir)?;
        Ok(Config {
            backends: LocalBackends::open(&dir).context("opening the embedded backends")?,
            engine: self.tuning.engine_config(&self.engine_url, self.model),
            worker: self.tuning.worker_config(self.tier)?,
        })
    }
}

pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let worker = local_worker(&config.backends, &config.engine, config.worker.clone(), Emf::stdout())?;
    match worker.run(shutdown).await {
        Stopped::Drained => Ok(()),
        Stopped::EngineLost { released } => Err(engine_lost(&config.worker, &config.engine.base_url, released)),
    }
}

/// The error a worker pool ends with when its engine is lost (the exit status makes ECS replace the task).
pub fn engine_lost(config: &WorkerConfig, engine_url: &str, released: usize) -> anyhow::Error {
    anyhow!(
        "{} tier: the engine at {engine_url} failed its health probe for {} s; released {released} unfinished \
         message(s) back to the queue and stopped",
        config.tier,
        config.engine_loss_window.as_secs()
    )
}

/// A worker over the embedded queue of its tier and the local result folder.
pub fn local_worker(
    backends: &LocalBackends,
    engine: &EngineConfig,
    config: WorkerConfig,
    metrics: Emf,
) -> anyhow::Result<Worker<crate::local::queue::LocalQueue, crate::local::store::FileStore, EngineClient>> {
    let queue = backends.tier_queue(config.tier, config.visibility_timeout, config.max_receive_count);
    let engine = Arc::new(EngineClient::new(engine)?);
    Ok(Worker::new(queue, backends.store.clone(), engine, config, metrics))
}
