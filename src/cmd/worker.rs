//! `gpuinfer worker`: one tier's queue worker beside an OpenAI-compatible engine (ECS task or local).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail};
use tokio_util::sync::CancellationToken;

use crate::aws::ecs_metadata;
use crate::cmd::backends::{Destination, QueueSource, Wiring, require_dead_letter};
use crate::cmd::router::CallbackPolicyArgs;
use crate::engine::{EngineClient, EngineConfig};
use crate::lanes::Lanes;
use crate::metrics::Emf;
use crate::ports::{Queue, ResultStore};
use crate::routing::Tier;
use crate::webhook::{WebhookConfig, WebhookSecret, Webhooks};
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
    /// Long-poll wait of one receive, in seconds (SQS allows at most 20).
    #[arg(long, env = "WAIT_TIME_SECONDS", default_value_t = 20)]
    pub wait_time_seconds: u64,
    /// Longest single generation, in seconds, before it counts as a transient failure.
    #[arg(long, env = "ENGINE_TIMEOUT_SECONDS", default_value_t = 900)]
    pub engine_timeout_seconds: u64,
    /// Seconds the engine may fail its health probe before the worker releases its messages and exits non-zero.
    #[arg(long, env = "ENGINE_LOSS_WINDOW_SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub engine_loss_window_seconds: u64,
    /// Seconds between two looks for a cancel while a request runs (a cancel then aborts the engine call).
    #[arg(long, env = "CANCEL_POLL_SECONDS", default_value_t = 5.0)]
    pub cancel_poll_seconds: f64,
    /// Seconds a stopping worker (SIGTERM) keeps finishing requests in flight before it hands the unfinished
    /// ones back to the queue; keep it below the container's stop timeout (the template: 100 of 120).
    #[arg(long, env = "DRAIN_TIMEOUT_SECONDS", default_value_t = 100)]
    pub drain_timeout_seconds: u64,
    /// Task identifier written into each result when the ECS metadata endpoint does not give one.
    #[arg(long, env = "ECS_TASK_ARN", default_value = "local")]
    pub task_arn: String,
}

/// How result callbacks are signed and sent; shared by `worker` and `dev`.
#[derive(Debug, Clone, clap::Args)]
pub struct WebhookArgs {
    /// Key that signs result callbacks, Standard Webhooks style: base64, `whsec_` prefix accepted
    /// [default: none, and callbacks are not sent].
    #[arg(long, env = "WEBHOOK_SECRET", hide_env_values = true)]
    pub webhook_secret: Option<WebhookSecret>,
    /// Seconds a callback is retried (back-off from 1 s to 60 s) before it is given up.
    #[arg(long, env = "WEBHOOK_RETRY_SECONDS", default_value_t = 300)]
    pub webhook_retry_seconds: u64,
    #[command(flatten)]
    pub policy: CallbackPolicyArgs,
}

impl WebhookArgs {
    pub fn webhooks(&self, metrics: Emf) -> anyhow::Result<Webhooks> {
        let config = WebhookConfig {
            secret: self.webhook_secret.clone(),
            policy: self.policy.policy(),
            retry_for: Duration::from_secs(self.webhook_retry_seconds),
            attempt_timeout: Duration::from_secs(10),
        };
        Ok(Webhooks::new(config, metrics)?)
    }
}

impl TuningArgs {
    pub fn worker_config(&self, tier: Tier) -> anyhow::Result<WorkerConfig> {
        if !(self.retry_base_seconds.is_finite() && self.retry_base_seconds >= 0.0) {
            bail!("--retry-base-seconds must be a non-negative number of seconds");
        }
        if !(self.cancel_poll_seconds.is_finite() && self.cancel_poll_seconds >= 0.05) {
            bail!("--cancel-poll-seconds must be at least 0.05 seconds");
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
            cancel_poll: Duration::from_secs_f64(self.cancel_poll_seconds),
            drain_timeout: Duration::from_secs(self.drain_timeout_seconds),
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
    /// Which tier this worker serves.
    #[arg(long, env = "TIER", value_enum, default_value = "small")]
    pub tier: Tier,
    /// Base URL of the OpenAI-compatible engine (/v1/completions, /v1/chat/completions, /health).
    #[arg(long, env = "ENGINE_URL", default_value = "http://127.0.0.1:8000")]
    pub engine_url: String,
    /// Model name sent to the engine [default: the first one it lists under /v1/models].
    #[arg(long, env = "MODEL_NAME")]
    pub model: Option<String>,
    /// SQS queue to consume [default: the tier's embedded queue in --data-dir].
    #[arg(long, env = "REQUEST_QUEUE_URL")]
    pub request_queue_url: Option<String>,
    /// SQS queue of the tier's high-priority lane, served first [default: none; high-priority requests then
    /// share REQUEST_QUEUE_URL, as in the AWS sample's one queue per tier].
    #[arg(long, env = "HIGH_QUEUE_URL")]
    pub high_queue_url: Option<String>,
    /// SQS dead-letter queue for malformed messages (required with REQUEST_QUEUE_URL).
    #[arg(long, env = "DLQ_URL")]
    pub dlq_url: Option<String>,
    /// Where results go: s3://bucket/prefix/, an SQS queue URL, or a folder [default: --data-dir].
    #[arg(long, env = "OUTPUT_DESTINATION")]
    pub output_destination: Option<String>,
    /// Data directory of the embedded queues and results.
    #[arg(long, env = "GPUINFER_DATA_DIR", default_value = ".gpuinfer")]
    pub data_dir: PathBuf,
    /// ECS task metadata endpoint (set by ECS), read for the task ARN.
    #[arg(long, env = "ECS_CONTAINER_METADATA_URI_V4", hide = true)]
    pub metadata_uri: Option<String>,
    #[command(flatten)]
    pub tuning: TuningArgs,
    #[command(flatten)]
    pub webhooks: WebhookArgs,
}

pub struct Config {
    sources: Lanes<QueueSource>,
    destination: Destination,
    engine: EngineConfig,
    worker: WorkerConfig,
    webhooks: WebhookArgs,
    metadata_uri: Option<String>,
    wiring: Wiring,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        let sources = QueueSource::lanes(
            Lanes { high: self.high_queue_url, normal: self.request_queue_url },
            self.dlq_url,
            Lanes { high: "HIGH_QUEUE_URL", normal: "REQUEST_QUEUE_URL" },
        )?;
        require_dead_letter(&sources)?;
        Ok(Config {
            sources,
            destination: Destination::parse(self.output_destination.as_deref(), &self.data_dir)?,
            engine: self.tuning.engine_config(&self.engine_url, self.model),
            worker: self.tuning.worker_config(self.tier)?,
            webhooks: self.webhooks,
            metadata_uri: self.metadata_uri,
            wiring: Wiring::new(self.data_dir),
        })
    }
}

pub async fn run(mut config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    config.worker.task_arn = ecs_metadata::task_arn(config.metadata_uri.as_deref(), &config.worker.task_arn).await;
    let w = &config.worker;
    let lanes = config.wiring.lanes(&config.sources, w.tier, w.visibility_timeout, w.max_receive_count).await?;
    let store = config.wiring.store(&config.destination).await?;
    let metrics = Emf::stdout();
    let webhooks = config.webhooks.webhooks(metrics.clone())?;
    let worker = build(lanes, store, &config.engine, config.worker.clone(), metrics)?.with_webhooks(webhooks);
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

/// A worker over the given lanes and store, talking to one engine.
pub fn build(
    lanes: Lanes<Arc<dyn Queue>>,
    store: Arc<dyn ResultStore>,
    engine: &EngineConfig,
    config: WorkerConfig,
    metrics: Emf,
) -> anyhow::Result<Worker<dyn Queue, dyn ResultStore, EngineClient>> {
    Ok(Worker::new(lanes, store, Arc::new(EngineClient::new(engine)?), config, metrics))
}
