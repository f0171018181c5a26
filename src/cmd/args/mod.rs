//! Argument groups shared by several subcommands: each is a set of flags (every one also an environment variable)
//! and the checked settings it turns into. A subcommand's own flags stay in its `cmd` module.

mod openai_webhook;
mod scaling;
mod tier_names;
mod tier_setting;
mod worker_pool;

pub(crate) use openai_webhook::OpenAiWebhookArgs;
pub(crate) use scaling::{ScalerArgs, ScalerSettings};

pub(crate) use scaling::{PolicyArgs, ServiceArgs};
pub(crate) use tier_setting::TierSetting;
pub(crate) use worker_pool::{CallbackPolicyArgs, TuningArgs, WebhookArgs};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use clap::ValueEnum;

use crate::aws::bedrock::{BedrockClassifier, DEFAULT_MODEL_ID};
use crate::classifier::openai::OpenAiClassifier;
use crate::cmd::backends::{QueueSource, Wiring};
use crate::contract::tier::{Lanes, PerTier, Tier};
use crate::engine::client::{EngineClient, EngineConfig};
use crate::http::server::{
    DEFAULT_BODY_MIN_BYTES_PER_SECOND, DEFAULT_BODY_TIMEOUT_SECONDS, DEFAULT_HEADER_TIMEOUT_SECONDS,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_SHUTDOWN_SECONDS, DEFAULT_WRITE_TIMEOUT_SECONDS, HttpLimits,
};
use crate::infra::runtime::running_on_lambda;
use crate::local::DEFAULT_DATA_DIR;
use crate::ports::Classifier;
use crate::router::DEFAULT_LISTEN_ADDR;
use crate::router::api_keys::{ApiKeys, KeySource};
use crate::router::body_budget::{BodyBudget, DEFAULT_BODY_MEMORY_MIB};
use crate::router::openai::settings::{DEFAULT_RESULT_WAIT_SECONDS, ModelTiers, Settings};
use crate::router::routing::{
    DEFAULT_AMBIGUOUS_MIN_CHARS, DEFAULT_CLASSIFIER_TIMEOUT_MS, DEFAULT_MAX_TOKENS_THRESHOLD,
    DEFAULT_PROMPT_LENGTH_THRESHOLD, RoutingConfig,
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
    /// Which tier a Batch API line's or a response's `model` runs on: model=tier pairs, comma-separated (e.g.
    /// mistral-7b=small,llama-2-70b=large). "small" and "large" always name their tier; any other model is routed
    /// by the thresholds. GET /v1/models lists them all.
    #[arg(long, env = "MODEL_TIERS", value_parser = ModelTiers::parse)]
    pub(crate) model_tiers: Option<ModelTiers>,
    /// A tier switched off (it starts no task: the stack's MaxTaskCount or LargeModelMaxTaskCount is 0): requests
    /// naming it (`route`, or a model of it) are refused at once, the thresholds and the classifier pick the other.
    #[arg(long, env = "TIER_OFF", value_parser = parse_tier, value_name = "small|large")]
    pub(crate) tier_off: Option<Tier>,
}

/// `small` or `large`; empty is none (as the stack passes TIER_OFF when both tiers run).
fn parse_tier(text: &str) -> Result<Tier, String> {
    Tier::parse(text.trim()).ok_or_else(|| format!("{text:?}: \"small\" or \"large\""))
}

impl RoutingArgs {
    /// The thresholds, and the classifier chosen; `local_engine` is the OpenAI-compatible endpoint asked when no
    /// classifier URL is configured.
    pub(crate) fn settings(&self, local_engine: Option<&str>) -> anyhow::Result<RoutingSettings> {
        let url = self.classifier_url.as_deref().or(local_engine);
        let kind = match self.classifier {
            ClassifierKind::Auto if running_on_lambda() => ClassifierKind::Bedrock,
            ClassifierKind::Auto if url.is_some() => ClassifierKind::Openai,
            ClassifierKind::Auto => ClassifierKind::None,
            chosen => chosen,
        };
        let classifier_timeout = Duration::from_millis(self.classifier_timeout_ms);
        let classifier = match kind {
            ClassifierKind::Bedrock => {
                ClassifierChoice::Bedrock { model_id: self.bedrock_model_id.clone().filter(|id| !id.trim().is_empty()) }
            }
            ClassifierKind::Openai => {
                let Some(url) = url else {
                    bail!("--classifier openai needs --classifier-url (CLASSIFIER_URL), or use --classifier none");
                };
                ClassifierChoice::OpenAi(EngineConfig {
                    base_url: url.to_owned(),
                    model: self.classifier_model.clone(),
                    request_timeout: classifier_timeout,
                })
            }
            ClassifierKind::None | ClassifierKind::Auto => ClassifierChoice::None,
        };
        let config = RoutingConfig {
            prompt_length_threshold: self.prompt_length_threshold,
            max_tokens_threshold: self.max_tokens_threshold,
            ambiguous_min_chars: self.ambiguous_min_chars,
            classifier_timeout,
            off: self.tier_off,
        };
        Ok(RoutingSettings { config, classifier })
    }
}

/// The routing's checked settings: the thresholds, and the classifier the ambiguous zone asks.
#[derive(Debug, Clone)]
pub(crate) struct RoutingSettings {
    pub(crate) config: RoutingConfig,
    classifier: ClassifierChoice,
}

/// The classifier of the ambiguous zone, once chosen.
#[derive(Debug, Clone)]
enum ClassifierChoice {
    None,
    /// A Bedrock model or inference profile; None: Nova Micro through the Region's profile.
    Bedrock {
        model_id: Option<String>,
    },
    OpenAi(EngineConfig),
}

impl RoutingSettings {
    /// The classifier's client (Bedrock's needs the AWS SDK's configuration).
    pub(crate) async fn classifier(&self, wiring: &Wiring) -> anyhow::Result<Option<Arc<dyn Classifier>>> {
        Ok(match &self.classifier {
            ClassifierChoice::None => None,
            ClassifierChoice::Bedrock { model_id } => {
                let client = aws_sdk_bedrockruntime::Client::new(wiring.sdk().await);
                Some(Arc::new(BedrockClassifier::new(client, model_id.clone())))
            }
            ClassifierChoice::OpenAi(engine) => {
                let client = EngineClient::new(engine)?;
                let endpoint = client.base().to_owned();
                Some(Arc::new(OpenAiClassifier::new(client, endpoint)))
            }
        })
    }
}

/// The local HTTP server's limits; shared by `router` and `dev` (unused on Lambda, where API Gateway fronts the API).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct HttpServerArgs {
    /// Address of the local HTTP server (unused on Lambda).
    #[arg(long, env = "LISTEN_ADDR", default_value = DEFAULT_LISTEN_ADDR)]
    pub(crate) listen: SocketAddr,
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
    /// API keys, one of which every request but GET /healthz must carry (`Authorization: Bearer <key>`, as OpenAI's
    /// clients send theirs): `[project=]key`, repeated or comma-separated. What a key's requests create under /v1
    /// (files, uploads, batches, responses) is its project's, and only its project's keys see it; a key without a
    /// project is a project of its own. Unset, the local API takes requests without a key and shows everything.
    #[arg(long, env = "GPUINFER_API_KEY", hide_env_values = true, value_delimiter = ',')]
    pub api_key: Vec<String>,
    /// The longest, in seconds, a call waits for its result: POST /v1/responses without `background` (OpenAI's
    /// default; then it answers the response as it stands, which the client polls) and POST /infer?wait=N (N at most
    /// this; then it answers 202). Applies on Lambda too, where API Gateway ends a request at 30 s.
    #[arg(long, env = "RESULT_WAIT_SECONDS", default_value_t = DEFAULT_RESULT_WAIT_SECONDS)]
    pub(crate) result_wait_seconds: u64,
}

impl HttpServerArgs {
    /// The OpenAI-compatible API's settings: this server's API key, the routing's model map, and (on Lambda) the
    /// redirect of large downloads.
    pub(crate) fn openai(&self, routing: &RoutingArgs) -> anyhow::Result<Settings> {
        let api_keys = ApiKeys::parse_local(&self.api_key).map_err(|e| anyhow::anyhow!("--api-key: {e}"))?;
        Ok(Settings {
            models: routing.model_tiers.clone().unwrap_or_default(),
            redirect_downloads_over: running_on_lambda().then_some(crate::router::openai::LAMBDA_DOWNLOAD_LIMIT),
            api_keys: api_keys.map(KeySource::Local),
            result_wait: Duration::from_secs(self.result_wait_seconds),
        })
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
