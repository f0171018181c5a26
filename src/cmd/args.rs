//! Argument groups shared by several subcommands: each is a set of flags (every one also an environment variable)
//! and the checked settings it turns into. A subcommand's own flags stay in its `cmd` module.

use std::fmt::Display;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::ValueEnum;

use crate::aws::bedrock::{BedrockClassifier, DEFAULT_MODEL_ID};
use crate::classifier::openai::OpenAiClassifier;
use crate::cmd::backends::{QueueSource, Wiring};
use crate::cmd::running_on_lambda;
use crate::contract::tier::{Lanes, PerTier, Tier};
use crate::engine::client::{DEFAULT_REQUEST_TIMEOUT_SECONDS, EngineClient, EngineConfig};
use crate::http::server::{
    DEFAULT_BODY_MIN_BYTES_PER_SECOND, DEFAULT_BODY_TIMEOUT_SECONDS, DEFAULT_HEADER_TIMEOUT_SECONDS,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_SHUTDOWN_SECONDS, DEFAULT_WRITE_TIMEOUT_SECONDS, HttpLimits,
};
use crate::infra::metrics::Emf;
use crate::local::DEFAULT_DATA_DIR;
use crate::ports::{
    Classifier, DEFAULT_CLUSTER_NAME, DEFAULT_MAX_RECEIVE_COUNT, DEFAULT_SERVICE_NAME, GpuUtilization, Queue, Service,
    ServiceTasks,
};
use crate::router::body_budget::{BodyBudget, DEFAULT_BODY_MEMORY_MIB};
use crate::router::openai::settings::{ModelTiers, Settings};
use crate::router::routing::{
    DEFAULT_AMBIGUOUS_MIN_CHARS, DEFAULT_CLASSIFIER_TIMEOUT_MS, DEFAULT_MAX_TOKENS_THRESHOLD,
    DEFAULT_PROMPT_LENGTH_THRESHOLD, RoutingConfig,
};
use crate::scaler::{
    DEFAULT_BACKLOG_PER_TASK, DEFAULT_INTERVAL_SECONDS, DEFAULT_MAX_TASKS, DEFAULT_MIN_TASKS,
    DEFAULT_UTILIZATION_TARGET, ScaledTier, Scaler, ScalingPolicy,
};
use crate::worker::callbacks::outbound::OutboundPolicy;
use crate::worker::callbacks::webhook::{self, WebhookConfig, WebhookSecret, Webhooks};
use crate::worker::{
    DEFAULT_CANCEL_POLL_SECONDS, DEFAULT_CONCURRENCY, DEFAULT_DRAIN_TIMEOUT_SECONDS,
    DEFAULT_ENGINE_LOSS_WINDOW_SECONDS, DEFAULT_RETRY_BASE_SECONDS, DEFAULT_TASK_ARN, DEFAULT_WAIT_TIME_SECONDS,
    HEALTH_INTERVAL, WorkerConfig,
};

/// The data directory of the embedded queues and results; shared by `router`, `worker`, `scaler` and `dev`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DataDirArgs {
    /// Data directory: queue.db (embedded queues), results/, metrics.jsonl (dev's EMF lines).
    #[arg(long, env = "GPUINFER_DATA_DIR", default_value = DEFAULT_DATA_DIR)]
    pub(crate) data_dir: PathBuf,
}

/// The SQS queue URLs of every lane of both tiers; shared by `router` and `scaler`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct TierQueueArgs {
    /// SQS queue URL of the small tier (or --embedded-queues for the embedded queue in --data-dir).
    #[arg(long, env = "SMALL_QUEUE_URL")]
    pub(crate) small_queue_url: Option<String>,
    /// SQS queue URL of the small tier's high-priority lane [default: high-priority requests share SMALL_QUEUE_URL].
    #[arg(long, env = "SMALL_HIGH_QUEUE_URL")]
    pub(crate) small_high_queue_url: Option<String>,
    /// SQS queue URL of the large tier (or --embedded-queues for the embedded queue in --data-dir).
    #[arg(long, env = "LARGE_QUEUE_URL")]
    pub(crate) large_queue_url: Option<String>,
    /// SQS queue URL of the large tier's high-priority lane [default: high-priority requests share LARGE_QUEUE_URL].
    #[arg(long, env = "LARGE_HIGH_QUEUE_URL")]
    pub(crate) large_high_queue_url: Option<String>,
    /// SQS queue URL of the small tier's batch lane (Batch API lines, overtaken by every other request) [default:
    /// batch lines share SMALL_QUEUE_URL].
    #[arg(long, env = "SMALL_BATCH_QUEUE_URL")]
    pub(crate) small_batch_queue_url: Option<String>,
    /// SQS queue URL of the large tier's batch lane [default: batch lines share LARGE_QUEUE_URL].
    #[arg(long, env = "LARGE_BATCH_QUEUE_URL")]
    pub(crate) large_batch_queue_url: Option<String>,
    #[command(flatten)]
    pub(crate) embedded: EmbeddedQueueArgs,
}

/// The explicit ask for the embedded queues: without a queue URL and without this, a process refuses to start, so
/// a missing or misspelled URL never leaves it serving a queue nobody sends to.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct EmbeddedQueueArgs {
    /// Serve the embedded queues of --data-dir (a SQLite file) instead of SQS; required when no queue URL is set.
    #[arg(long, env = "GPUINFER_EMBEDDED_QUEUES")]
    pub(crate) embedded_queues: bool,
}

impl EmbeddedQueueArgs {
    /// Checks the ask against the queues configured: `embedded` when no queue URL is set (`looked_for` names the
    /// variables that would set one).
    pub(crate) fn check(&self, embedded: bool, looked_for: &str) -> anyhow::Result<()> {
        match (embedded, self.embedded_queues) {
            (true, false) => bail!(
                "no queue configured: {looked_for} is not set. Set it to the SQS queue's URL, or pass \
                 --embedded-queues (GPUINFER_EMBEDDED_QUEUES=true) to serve the embedded queues of --data-dir"
            ),
            (false, true) => bail!(
                "--embedded-queues (GPUINFER_EMBEDDED_QUEUES) and {looked_for} are both set: use the SQS queues or \
                 the embedded ones, not both"
            ),
            _ => Ok(()),
        }
    }
}

impl TierQueueArgs {
    /// Each tier's lanes; the `tiers` in use must all be on SQS, or all on the embedded queues.
    pub(crate) fn sources(self, tiers: &[Tier]) -> anyhow::Result<PerTier<Lanes<QueueSource>>> {
        let queues = PerTier {
            small: QueueSource::lanes(
                Lanes {
                    high: self.small_high_queue_url,
                    normal: self.small_queue_url,
                    batch: self.small_batch_queue_url,
                },
                None,
                Lanes { high: "SMALL_HIGH_QUEUE_URL", normal: "SMALL_QUEUE_URL", batch: "SMALL_BATCH_QUEUE_URL" },
            )?,
            large: QueueSource::lanes(
                Lanes {
                    high: self.large_high_queue_url,
                    normal: self.large_queue_url,
                    batch: self.large_batch_queue_url,
                },
                None,
                Lanes { high: "LARGE_HIGH_QUEUE_URL", normal: "LARGE_QUEUE_URL", batch: "LARGE_BATCH_QUEUE_URL" },
            )?,
        };
        let on_sqs = tiers.iter().filter(|&&tier| !queues.get(tier).normal.is_embedded()).count();
        if on_sqs != 0 && on_sqs != tiers.len() {
            bail!(
                "give the queue URL of every tier in use (SMALL_QUEUE_URL and LARGE_QUEUE_URL, each with its optional \
                 *_HIGH_QUEUE_URL and *_BATCH_QUEUE_URL), or none and --embedded-queues for the embedded queues in \
                 --data-dir"
            );
        }
        let looked_for = tiers.iter().map(|tier| format!("{}_QUEUE_URL", tier.as_str().to_uppercase()));
        self.embedded.check(on_sqs == 0, &looked_for.collect::<Vec<_>>().join(" / "))?;
        Ok(queues)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ClassifierKind {
    /// Bedrock on Lambda; the OpenAI-compatible endpoint when one is known; else none.
    Auto,
    /// No classifier: the ambiguous zone goes to the small tier.
    None,
    /// Ask a model behind an OpenAI-compatible endpoint (--classifier-url).
    Openai,
    /// Ask a Bedrock model through the Converse API (--bedrock-model-id).
    Bedrock,
}

/// Routing thresholds and the classifier for the ambiguous zone.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RoutingArgs {
    /// Prompts longer than this many characters go to the large tier.
    #[arg(long, env = "PROMPT_LENGTH_THRESHOLD", default_value_t = DEFAULT_PROMPT_LENGTH_THRESHOLD)]
    pub prompt_length_threshold: usize,
    /// Requests with maxTokens above this go to the large tier.
    #[arg(long, env = "MAX_TOKENS_THRESHOLD", default_value_t = DEFAULT_MAX_TOKENS_THRESHOLD)]
    pub max_tokens_threshold: u32,
    /// Prompts longer than this (and under the thresholds) are asked of the classifier.
    #[arg(long, env = "AMBIGUOUS_MIN_CHARS", default_value_t = DEFAULT_AMBIGUOUS_MIN_CHARS)]
    pub ambiguous_min_chars: usize,
    /// Who decides the ambiguous zone.
    #[arg(long, env = "CLASSIFIER", value_enum, default_value = "auto")]
    pub classifier: ClassifierKind,
    /// Base URL of the OpenAI-compatible classifier model [dev: the small tier's engine].
    #[arg(long, env = "CLASSIFIER_URL")]
    pub(crate) classifier_url: Option<String>,
    /// Model name for the OpenAI-compatible classifier [default: the first one the endpoint lists].
    #[arg(long, env = "CLASSIFIER_MODEL")]
    pub(crate) classifier_model: Option<String>,
    #[arg(long, env = "BEDROCK_MODEL_ID", help = format!(
        "Bedrock model or cross-Region inference profile for the Bedrock classifier [default: Amazon Nova Micro \
         through the inference profile of the Region (us., eu. or apac.{DEFAULT_MODEL_ID}), else {DEFAULT_MODEL_ID}]"
    ))]
    pub(crate) bedrock_model_id: Option<String>,
    /// Longest wait for the classifier before routing to small.
    #[arg(long, env = "CLASSIFIER_TIMEOUT_MS", default_value_t = DEFAULT_CLASSIFIER_TIMEOUT_MS)]
    pub(crate) classifier_timeout_ms: u64,
    /// Which tier a Batch API line's `model` runs on: model=tier pairs, comma-separated (e.g.
    /// mistral-7b=small,llama-2-70b=large). "small" and "large" always name their tier; any other model is routed
    /// by the thresholds. GET /v1/models lists them all.
    #[arg(long, env = "MODEL_TIERS", value_parser = ModelTiers::parse)]
    pub(crate) model_tiers: Option<ModelTiers>,
}

impl RoutingArgs {
    pub(crate) fn config(&self) -> RoutingConfig {
        RoutingConfig {
            prompt_length_threshold: self.prompt_length_threshold,
            max_tokens_threshold: self.max_tokens_threshold,
            ambiguous_min_chars: self.ambiguous_min_chars,
            classifier_timeout: Duration::from_millis(self.classifier_timeout_ms),
        }
    }

    /// The classifier; `local_engine` is the OpenAI-compatible endpoint used when none is configured.
    pub async fn classifier(
        &self,
        wiring: &Wiring,
        local_engine: Option<&str>,
    ) -> anyhow::Result<Option<Arc<dyn Classifier>>> {
        let url = self.classifier_url.as_deref().or(local_engine);
        let kind = match self.classifier {
            ClassifierKind::Auto if running_on_lambda() => ClassifierKind::Bedrock,
            ClassifierKind::Auto if url.is_some() => ClassifierKind::Openai,
            ClassifierKind::Auto => ClassifierKind::None,
            chosen => chosen,
        };
        Ok(match kind {
            ClassifierKind::Bedrock => {
                let client = aws_sdk_bedrockruntime::Client::new(wiring.sdk().await);
                let model_id = self.bedrock_model_id.clone().filter(|id| !id.trim().is_empty());
                Some(Arc::new(BedrockClassifier::new(client, model_id)))
            }
            ClassifierKind::Openai => {
                let Some(url) = url else {
                    bail!("--classifier openai needs --classifier-url (CLASSIFIER_URL), or use --classifier none");
                };
                let engine = EngineClient::new(&EngineConfig {
                    base_url: url.to_owned(),
                    model: self.classifier_model.clone(),
                    request_timeout: Duration::from_millis(self.classifier_timeout_ms),
                })?;
                Some(Arc::new(OpenAiClassifier::new(engine)))
            }
            ClassifierKind::None | ClassifierKind::Auto => None,
        })
    }
}

/// Which callback URLs are accepted; shared by `router`, `worker` and `dev`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CallbackPolicyArgs {
    /// Accept http:// callback URLs (local development); https only otherwise.
    #[arg(long, env = "ALLOW_HTTP_CALLBACKS")]
    pub(crate) allow_http_callbacks: bool,
    /// Let callbacks reach loopback and private-network addresses (local development); link-local and
    /// instance-metadata addresses stay refused.
    #[arg(long, env = "ALLOW_PRIVATE_CALLBACKS")]
    pub(crate) allow_private_callbacks: bool,
}

impl CallbackPolicyArgs {
    pub fn policy(&self) -> OutboundPolicy {
        OutboundPolicy { allow_http: self.allow_http_callbacks, allow_private: self.allow_private_callbacks }
    }
}

/// The local HTTP server's limits; shared by `router` and `dev` (unused on Lambda, where API Gateway fronts the API).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct HttpServerArgs {
    /// Seconds a client has to send a request's headers, counted from the connection's opening or the end of its
    /// previous response: a connection that sends nothing, half a header, or stays idle between requests this
    /// long is closed. A real client sends its headers at once.
    #[arg(long, env = "HTTP_HEADER_TIMEOUT_SECONDS", default_value_t = DEFAULT_HEADER_TIMEOUT_SECONDS, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) http_header_timeout_seconds: u64,
    /// Seconds a request's body may pause, or come slower than --http-body-min-bytes-per-second: a body that does
    /// (half sent, or trickled) gets a 400 and its connection is closed. A body that keeps coming is taken whole
    /// however long it takes; the time the server itself takes between reads does not count.
    #[arg(long, env = "HTTP_BODY_TIMEOUT_SECONDS", default_value_t = DEFAULT_BODY_TIMEOUT_SECONDS, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) http_body_timeout_seconds: u64,
    /// Bytes a second a request's body must average, with --http-body-timeout-seconds of slack (0: no rate, only
    /// no pause). The default takes a 5 MiB batch in 80 s, a 200 MB upload in 51 minutes.
    #[arg(long, env = "HTTP_BODY_MIN_BYTES_PER_SECOND", default_value_t = DEFAULT_BODY_MIN_BYTES_PER_SECOND)]
    pub(crate) http_body_min_bytes_per_second: u64,
    /// Seconds a response may wait for the client to take a byte of it: a client that stops reading (a download
    /// it leaves) loses its connection, and the slot it held under --http-max-connections.
    #[arg(long, env = "HTTP_WRITE_TIMEOUT_SECONDS", default_value_t = DEFAULT_WRITE_TIMEOUT_SECONDS, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) http_write_timeout_seconds: u64,
    /// Connections open at once; further ones wait, unaccepted, until one closes. Keep it under the process's
    /// open-file limit (ulimit -n).
    #[arg(long, env = "HTTP_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) http_max_connections: u32,
    /// Seconds a stopping server (SIGTERM, Ctrl-C) lets requests in flight finish before it drops the
    /// connections still open. A request's own work (validate, classify, enqueue) takes a few seconds at most.
    #[arg(long, env = "HTTP_SHUTDOWN_SECONDS", default_value_t = DEFAULT_SHUTDOWN_SECONDS)]
    pub(crate) http_shutdown_seconds: u64,
    /// MiB that the bodies of requests being read may hold in memory at once, across all requests: a body beyond
    /// it is refused (503, Retry-After: 1) as it arrives, so memory stays bounded whatever clients send.
    #[arg(long, env = "HTTP_BODY_MEMORY_MIB", default_value_t = DEFAULT_BODY_MEMORY_MIB, value_parser = clap::value_parser!(u64).range(6..))]
    pub(crate) http_body_memory_mib: u64,
    /// A bearer token every request but GET /healthz must carry (`Authorization: Bearer <token>`, as OpenAI's
    /// clients send their API key). Unset, the local API takes requests without one. On AWS, API Gateway's IAM
    /// authorization guards the API instead.
    #[arg(long, env = "GPUINFER_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

impl HttpServerArgs {
    /// The OpenAI-compatible API's settings: this server's API key, the routing's model map, and (on Lambda) the
    /// redirect of large downloads.
    pub fn openai(&self, routing: &RoutingArgs) -> Settings {
        Settings {
            models: routing.model_tiers.clone().unwrap_or_default(),
            redirect_downloads_over: crate::cmd::running_on_lambda()
                .then_some(crate::router::openai::LAMBDA_DOWNLOAD_LIMIT),
            api_key: self.api_key.clone(),
        }
    }

    pub(crate) fn body_budget(&self) -> BodyBudget {
        BodyBudget::new(self.http_body_memory_mib as usize * 1024 * 1024)
    }

    pub(crate) fn limits(&self) -> HttpLimits {
        HttpLimits {
            header_timeout: Duration::from_secs(self.http_header_timeout_seconds),
            body_timeout: Duration::from_secs(self.http_body_timeout_seconds),
            body_min_rate: self.http_body_min_bytes_per_second,
            write_timeout: Duration::from_secs(self.http_write_timeout_seconds),
            max_connections: self.http_max_connections,
            shutdown_timeout: Duration::from_secs(self.http_shutdown_seconds),
        }
    }
}

/// How a worker pool behaves; shared by `worker` and `dev`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct TuningArgs {
    /// Requests in flight at most. The worker adapts its in-flight limit below this ceiling to the engine's free
    /// generation slots (from its /metrics, else from latency); with --fixed-concurrency it keeps exactly this many.
    #[arg(long, env = "WORKER_CONCURRENCY", default_value_t = DEFAULT_CONCURRENCY, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub concurrency: u32,
    /// Keep --concurrency requests in flight whatever the engine's load, instead of adapting to it.
    #[arg(long, env = "WORKER_FIXED_CONCURRENCY")]
    pub(crate) fixed_concurrency: bool,
    #[arg(long, env = "VISIBILITY_TIMEOUT", help = format!(
        "Seconds a received message stays invisible (asked on every receive, whatever the queue's own visibility \
         timeout), renewed while it runs [default: {} small, {} large]",
        Tier::Small.default_visibility_timeout().as_secs(),
        Tier::Large.default_visibility_timeout().as_secs(),
    ))]
    pub visibility_timeout: Option<u64>,
    /// The queue's maxReceiveCount: the last attempt writes an error result instead of retrying.
    #[arg(long, env = "MAX_RECEIVE_COUNT", default_value_t = DEFAULT_MAX_RECEIVE_COUNT, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_receive_count: u32,
    /// First retry delay in seconds after a transient failure; doubles with each attempt.
    #[arg(long, env = "RETRY_BASE_SECONDS", default_value_t = DEFAULT_RETRY_BASE_SECONDS)]
    pub(crate) retry_base_seconds: f64,
    /// Long-poll wait of one receive, in seconds: from 1 to SQS's most; 0 would poll an idle queue in a tight loop.
    #[arg(long, env = "WAIT_TIME_SECONDS", default_value_t = DEFAULT_WAIT_TIME_SECONDS, value_parser = clap::value_parser!(u64).range(1..=crate::ports::MAX_RECEIVE_WAIT.as_secs()))]
    pub(crate) wait_time_seconds: u64,
    /// Longest single generation, in seconds, before it counts as a transient failure.
    #[arg(long, env = "ENGINE_TIMEOUT_SECONDS", default_value_t = DEFAULT_REQUEST_TIMEOUT_SECONDS)]
    pub(crate) engine_timeout_seconds: u64,
    /// Seconds the engine may fail its health probe before the worker releases its messages and exits non-zero.
    #[arg(long, env = "ENGINE_LOSS_WINDOW_SECONDS", default_value_t = DEFAULT_ENGINE_LOSS_WINDOW_SECONDS, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) engine_loss_window_seconds: u64,
    /// Seconds between two looks for a cancel while a request runs (a cancel then aborts the engine call).
    #[arg(long, env = "CANCEL_POLL_SECONDS", default_value_t = DEFAULT_CANCEL_POLL_SECONDS)]
    pub(crate) cancel_poll_seconds: f64,
    /// Seconds a stopping worker (SIGTERM) keeps finishing requests in flight before it hands the unfinished
    /// ones back to the queue; keep it below the container's stop timeout (the template: 100 of 120).
    #[arg(long, env = "DRAIN_TIMEOUT_SECONDS", default_value_t = DEFAULT_DRAIN_TIMEOUT_SECONDS)]
    pub(crate) drain_timeout_seconds: u64,
    /// Task identifier written into each result when the ECS metadata endpoint does not give one.
    #[arg(long, env = "ECS_TASK_ARN", default_value = DEFAULT_TASK_ARN)]
    pub task_arn: String,
}

/// How result callbacks are signed and sent; shared by `worker` and `dev`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WebhookArgs {
    /// Key that signs result callbacks, Standard Webhooks style: base64, `whsec_` prefix accepted
    /// [default: none, and callbacks are not sent].
    #[arg(long, env = "WEBHOOK_SECRET", hide_env_values = true)]
    pub(crate) webhook_secret: Option<WebhookSecret>,
    /// Seconds a callback is retried (back-off from 1 s to 60 s) before it is given up.
    #[arg(long, env = "WEBHOOK_RETRY_SECONDS", default_value_t = webhook::DEFAULT_RETRY_SECONDS)]
    pub(crate) webhook_retry_seconds: u64,
    #[command(flatten)]
    pub policy: CallbackPolicyArgs,
}

impl WebhookArgs {
    pub(crate) fn config(&self) -> WebhookConfig {
        WebhookConfig {
            secret: self.webhook_secret.clone(),
            policy: self.policy.policy(),
            retry_for: Duration::from_secs(self.webhook_retry_seconds),
            attempt_timeout: webhook::ATTEMPT_TIMEOUT,
        }
    }

    pub(crate) fn webhooks(&self, metrics: Emf) -> anyhow::Result<Webhooks> {
        Ok(Webhooks::new(self.config(), metrics)?)
    }
}

impl TuningArgs {
    /// The worker settings of `tier`, whose ECS service is named by `service`.
    pub(crate) fn worker_config(&self, tier: Tier, service: &ServiceArgs) -> anyhow::Result<WorkerConfig> {
        if !(self.retry_base_seconds.is_finite() && self.retry_base_seconds >= 0.0) {
            bail!("--retry-base-seconds must be a non-negative number of seconds");
        }
        if !(self.cancel_poll_seconds.is_finite() && self.cancel_poll_seconds >= 0.05) {
            bail!("--cancel-poll-seconds must be at least 0.05 seconds");
        }
        Ok(WorkerConfig {
            tier,
            concurrency: self.concurrency as usize,
            adaptive: !self.fixed_concurrency,
            wait_time: Duration::from_secs(self.wait_time_seconds),
            visibility_timeout: self
                .visibility_timeout
                .map_or(tier.default_visibility_timeout(), |seconds| Duration::from_secs(seconds.max(3))),
            max_receive_count: self.max_receive_count,
            retry_base: Duration::from_secs_f64(self.retry_base_seconds),
            health_interval: HEALTH_INTERVAL,
            engine_loss_window: Duration::from_secs(self.engine_loss_window_seconds),
            cancel_poll: Duration::from_secs_f64(self.cancel_poll_seconds),
            drain_timeout: Duration::from_secs(self.drain_timeout_seconds),
            task_arn: self.task_arn.clone(),
            service: service.service(tier),
        })
    }

    pub(crate) fn engine_config(&self, base_url: &str, model: Option<String>) -> EngineConfig {
        EngineConfig {
            base_url: base_url.to_owned(),
            model,
            request_timeout: Duration::from_secs(self.engine_timeout_seconds),
        }
    }
}

/// What each tier is scaled toward; shared by `scaler`, `dev` and `simulate`.
#[derive(Debug, Clone, clap::Args)]
pub struct PolicyArgs {
    #[arg(long, env = "QUEUE_DEPTH_THRESHOLD", value_delimiter = ',', help = format!(
        "Messages (queued, delayed or in flight) one task should carry: a backlog of B asks for ⌈B / this⌉ tasks. \
         One value (`5`) or per tier (`small=5,large=2`) [default: {DEFAULT_BACKLOG_PER_TASK}]"
    ))]
    pub(crate) queue_depth_threshold: Vec<TierSetting<u32>>,
    #[arg(long, env = "MIN_TASK_COUNT", value_delimiter = ',', help = format!(
        "Fewest tasks per tier, e.g. `0` or `small=1,large=0` [default: {DEFAULT_MIN_TASKS}]"
    ))]
    pub(crate) min_tasks: Vec<TierSetting<u32>>,
    #[arg(long, env = "MAX_TASK_COUNT", value_delimiter = ',', help = format!(
        "Most tasks per tier [default: {}]", TierSetting::per_tier(&DEFAULT_MAX_TASKS)
    ))]
    pub(crate) max_tasks: Vec<TierSetting<u32>>,
    /// GPU compute utilization, in percent, above which running tasks ask for more.
    #[arg(long, env = "GPU_UTILIZATION_TARGET", default_value_t = DEFAULT_UTILIZATION_TARGET)]
    pub(crate) utilization_target: f64,
}

impl PolicyArgs {
    pub fn policy(&self, tier: Tier) -> anyhow::Result<ScalingPolicy> {
        ScalingPolicy::new(
            TierSetting::pick(&self.queue_depth_threshold, tier, DEFAULT_BACKLOG_PER_TASK),
            TierSetting::pick(&self.min_tasks, tier, DEFAULT_MIN_TASKS),
            TierSetting::pick(&self.max_tasks, tier, *DEFAULT_MAX_TASKS.get(tier)),
            self.utilization_target,
        )
        .with_context(|| format!("scaling settings of the {tier} tier"))
    }
}

/// The scaler's loop and metric dimensions; shared by `scaler` and `dev`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ScalerArgs {
    /// Seconds between two scaling decisions of the local loop (on Lambda, the schedule decides).
    #[arg(long, env = "SCALER_INTERVAL_SECONDS", default_value_t = DEFAULT_INTERVAL_SECONDS, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) scaler_interval: u64,
    #[command(flatten)]
    pub service: ServiceArgs,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// The ECS cluster and each tier's service: the dimensions of the scaling metrics and of the workers' saturation.
#[derive(Debug, Clone, clap::Args)]
pub struct ServiceArgs {
    /// ECS cluster of the tiers' services: the `ClusterName` dimension of the scaling and saturation metrics.
    #[arg(long, env = "CLUSTER_NAME", default_value = DEFAULT_CLUSTER_NAME)]
    pub(crate) cluster_name: String,
    /// ECS service of each tier, `{tier}` standing for the tier's name: the `ServiceName` dimension.
    #[arg(long, env = "SERVICE_NAME", default_value = DEFAULT_SERVICE_NAME)]
    pub(crate) service_name: String,
}

impl ServiceArgs {
    pub fn service(&self, tier: Tier) -> Service {
        Service::of_tier(&self.cluster_name, &self.service_name, tier)
    }
}

impl ScalerArgs {
    pub(crate) fn interval(&self) -> Duration {
        Duration::from_secs(self.scaler_interval)
    }

    /// A scaler over each tier's lanes, reading task counts from `tasks` and GPU utilization from `gpu`.
    pub(crate) fn scaler(
        &self,
        queues: impl IntoIterator<Item = (Tier, Lanes<Arc<dyn Queue>>)>,
        tasks: Arc<dyn ServiceTasks>,
        gpu: Arc<dyn GpuUtilization>,
        metrics: Emf,
    ) -> anyhow::Result<Scaler> {
        let tiers: Vec<ScaledTier> = queues
            .into_iter()
            .map(|(tier, lanes)| {
                Ok(ScaledTier { tier, service: self.service.service(tier), lanes, policy: self.policy.policy(tier)? })
            })
            .collect::<anyhow::Result<_>>()?;
        if tiers.len() > 1 && !self.service.service_name.contains("{tier}") {
            let pattern = &self.service.service_name;
            bail!("SERVICE_NAME `{pattern}` must contain {{tier}} when more than one tier is scaled");
        }
        Ok(Scaler::new(tiers, tasks, gpu, metrics))
    }
}

/// A flag value for one tier (`small=10`) or for every tier (`10`); given repeated or comma-separated,
/// the last one that names a tier wins.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TierSetting<T> {
    tier: Option<Tier>,
    value: T,
}

impl<T: FromStr> FromStr for TierSetting<T>
where
    T::Err: Display,
{
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (tier, value) = match text.split_once('=') {
            Some((tier, value)) => {
                let tier = Tier::parse(tier.trim()).ok_or_else(|| format!("unknown tier `{tier}` (small or large)"))?;
                (Some(tier), value.trim())
            }
            None => (None, text.trim()),
        };
        let value = value.parse().map_err(|e| format!("`{value}`: {e}"))?;
        Ok(TierSetting { tier, value })
    }
}

impl<T: Copy> TierSetting<T> {
    /// The value `settings` give `tier`, or `default` when none names it.
    pub(crate) fn pick(settings: &[TierSetting<T>], tier: Tier, default: T) -> T {
        settings.iter().rev().find(|s| s.tier.is_none_or(|t| t == tier)).map_or(default, |s| s.value)
    }
}

impl<T: Display> TierSetting<T> {
    /// `values` as the flags take them, for the help to state a per-tier default: `small=10,large=4`.
    pub(crate) fn per_tier(values: &PerTier<T>) -> String {
        Tier::ALL.map(|tier| format!("{tier}={}", values.get(tier))).join(",")
    }
}
