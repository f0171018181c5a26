//! `gpuinfer worker`: one tier's queue worker beside an OpenAI-compatible engine (ECS task or local).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::anyhow;
use tokio_util::sync::CancellationToken;

use crate::aws::ecs_metadata;
use crate::callbacks::openai_events::{EventConfig, OpenAiEvents};
use crate::callbacks::webhook::{WebhookConfig, Webhooks};
use crate::cmd::args::{DataDirArgs, EmbeddedQueueArgs, OpenAiWebhookArgs, ServiceArgs, TuningArgs, WebhookArgs};
use crate::cmd::backends::{Destination, QueueSource, Wiring, require_dead_letter};
use crate::contract::tier::{Lanes, Tier};
use crate::engine::client::DEFAULT_ENGINE_URL;
use crate::engine::client::{EngineClient, EngineConfig};
use crate::infra::metrics::Emf;
use crate::ports::{Queue, ResultStore};
use crate::worker::cold_start::Start;
use crate::worker::{Stopped, Worker, WorkerConfig};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which tier this worker serves.
    #[arg(long, env = "TIER", value_enum, default_value = "small")]
    pub tier: Tier,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub(crate) queues: QueueArgs,
    /// Where results go: s3://bucket/prefix/, an SQS queue URL, or a folder [default: --data-dir].
    #[arg(long, env = "OUTPUT_DESTINATION")]
    pub(crate) output_destination: Option<String>,
    #[command(flatten)]
    pub(crate) data: DataDirArgs,
    #[command(flatten)]
    pub(crate) start: ContainerStartArgs,
    #[command(flatten)]
    pub(crate) tuning: TuningArgs,
    #[command(flatten)]
    pub(crate) webhooks: WebhookArgs,
    #[command(flatten)]
    pub(crate) openai_webhook: OpenAiWebhookArgs,
    /// Where the worker's saturation is published (`EngineSaturation`, read by the scaler).
    #[command(flatten)]
    pub service: ServiceArgs,
}

/// The engine the worker talks to.
#[derive(Debug, clap::Args)]
pub struct EngineArgs {
    /// Base URL of the OpenAI-compatible engine (/v1/completions, /v1/chat/completions, /health).
    #[arg(long, env = "ENGINE_URL", default_value = DEFAULT_ENGINE_URL)]
    pub(crate) engine_url: String,
    /// Model name sent to the engine [default: the first one it lists under /v1/models].
    #[arg(long, env = "MODEL_NAME")]
    pub model: Option<String>,
}

/// The queues the worker consumes: SQS, or the embedded ones.
#[derive(Debug, clap::Args)]
pub(crate) struct QueueArgs {
    /// SQS queue to consume (or --embedded-queues for the tier's embedded queue in --data-dir).
    #[arg(long, env = "REQUEST_QUEUE_URL")]
    pub(crate) request_queue_url: Option<String>,
    /// SQS queue of the tier's high-priority lane, served first [default: none; high-priority requests then
    /// share REQUEST_QUEUE_URL, as in the AWS sample's one queue per tier].
    #[arg(long, env = "HIGH_QUEUE_URL")]
    pub(crate) high_queue_url: Option<String>,
    /// SQS queue of the tier's batch lane (Batch API lines), served only with slots the other lanes leave
    /// [default: none; batch lines then share REQUEST_QUEUE_URL].
    #[arg(long, env = "BATCH_QUEUE_URL")]
    pub(crate) batch_queue_url: Option<String>,
    /// SQS dead-letter queue for malformed messages (required with REQUEST_QUEUE_URL).
    #[arg(long, env = "DLQ_URL")]
    pub(crate) dlq_url: Option<String>,
    #[command(flatten)]
    pub(crate) embedded: EmbeddedQueueArgs,
}

/// When the container's cold start began, as ECS and entrypoint.sh tell it.
#[derive(Debug, clap::Args)]
pub(crate) struct ContainerStartArgs {
    /// ECS task metadata endpoint (set by ECS), read for the task ARN and when the task's image was pulled.
    #[arg(long, env = "ECS_CONTAINER_METADATA_URI_V4", hide = true)]
    pub(crate) metadata_uri: Option<String>,
    /// When entrypoint.sh started, in Unix seconds (set by it): the cold start's start without ECS metadata.
    #[arg(long, env = "GPUINFER_STARTED_AT", hide = true, value_parser = unix_seconds)]
    pub(crate) started_at: Option<SystemTime>,
    /// When fetch-model had the weights on disk, in Unix seconds (set by entrypoint.sh after it).
    #[arg(long, env = "GPUINFER_WEIGHTS_READY_AT", hide = true, value_parser = unix_seconds)]
    pub(crate) weights_ready_at: Option<SystemTime>,
}

pub struct Config {
    sources: Lanes<QueueSource>,
    destination: Destination,
    engine: EngineConfig,
    worker: WorkerConfig,
    webhooks: WebhookConfig,
    events: Option<EventConfig>,
    start: ContainerStartArgs,
    wiring: Wiring,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        let sources = self.queues.sources()?;
        Ok(Config {
            sources,
            destination: Destination::parse(self.output_destination.as_deref(), &self.data.data_dir)?,
            engine: self.tuning.engine_config(&self.engine.engine_url, self.engine.model),
            worker: self.tuning.worker_config(self.tier, &self.service)?,
            webhooks: self.webhooks.config(),
            events: self.openai_webhook.config(self.webhooks.policy.policy())?,
            start: self.start,
            wiring: Wiring::new(self.data.data_dir),
        })
    }
}

impl QueueArgs {
    /// The lanes' sources, each checked: a dead-letter queue beside SQS, the embedded queues only when asked.
    fn sources(self) -> anyhow::Result<Lanes<QueueSource>> {
        let sources = QueueSource::lanes(
            Lanes { high: self.high_queue_url, normal: self.request_queue_url, batch: self.batch_queue_url },
            self.dlq_url,
            Lanes { high: "HIGH_QUEUE_URL", normal: "REQUEST_QUEUE_URL", batch: "BATCH_QUEUE_URL" },
        )?;
        self.embedded.check(sources.normal.is_embedded(), "REQUEST_QUEUE_URL")?;
        require_dead_letter(&sources)?;
        Ok(sources)
    }
}

pub(crate) async fn run(mut config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let task = ecs_metadata::task(config.start.metadata_uri.as_deref(), &config.worker.task.arn).await;
    config.worker.task.arn = task.arn;
    let start = Start::of_container(task.image_pull, config.start.started_at, config.start.weights_ready_at);
    let w = &config.worker;
    let lanes =
        config.wiring.lanes(&config.sources, w.tier, w.lease.visibility_timeout, w.lease.max_receive_count).await?;
    let store = config.wiring.store(&config.destination).await?;
    let metrics = Emf::stdout();
    let webhooks = Webhooks::new(config.webhooks.clone(), metrics.clone())?;
    let events = config.events.clone().map(|events| OpenAiEvents::new(events, metrics.clone())).transpose()?;
    let worker = build(lanes, store, &config.engine, config.worker.clone(), metrics)?
        .with_webhooks(webhooks)
        .with_openai_events(events)
        .with_start(start);
    match worker.run(shutdown).await {
        Stopped::Drained => Ok(()),
        Stopped::EngineLost { given_back } => Err(engine_lost(&config.worker, &config.engine.base_url, given_back)),
    }
}

/// The error a worker pool ends with when its engine is lost (the exit status makes ECS replace the task).
pub(crate) fn engine_lost(config: &WorkerConfig, engine_url: &str, given_back: usize) -> anyhow::Error {
    anyhow!(
        "{} tier: the engine at {engine_url} failed its health probe for {} s; gave {given_back} unfinished message(s) \
         back to the queue and stopped",
        config.tier,
        config.health.loss_window.as_secs()
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

/// An instant given as Unix seconds with a fraction (`date +%s.%N`).
fn unix_seconds(text: &str) -> Result<SystemTime, String> {
    let seconds: f64 = text.trim().parse().map_err(|_| format!("not Unix seconds: {text:?}"))?;
    Duration::try_from_secs_f64(seconds).map(|since| UNIX_EPOCH + since).map_err(|e| e.to_string())
}
