//! `gpuinfer router`: the HTTP API, as an AWS Lambda (API Gateway HTTP API) or a local HTTP server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::ValueEnum;
use lambda_http::LambdaEvent;
use lambda_http::request::LambdaRequest;
use tokio_util::sync::CancellationToken;

use crate::aws::bedrock::{BedrockClassifier, DEFAULT_MODEL_ID};
use crate::classifier::OpenAiClassifier;
use crate::cmd::backends::{Destination, QueueSource, TierQueueArgs, Wiring};
use crate::engine::{EngineClient, EngineConfig};
use crate::lanes::Lanes;
use crate::metrics::Emf;
use crate::outbound::OutboundPolicy;
use crate::ports::Classifier;
use crate::router::{AppState, app, lambda_event};
use crate::routing::{PerTier, RoutingConfig, Tier};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClassifierKind {
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
pub struct RoutingArgs {
    /// Prompts longer than this many characters go to the large tier.
    #[arg(long, env = "PROMPT_LENGTH_THRESHOLD", default_value_t = 2000)]
    pub prompt_length_threshold: usize,
    /// Requests with maxTokens above this go to the large tier.
    #[arg(long, env = "MAX_TOKENS_THRESHOLD", default_value_t = 1024)]
    pub max_tokens_threshold: u32,
    /// Prompts longer than this (and under the thresholds) are asked of the classifier.
    #[arg(long, env = "AMBIGUOUS_MIN_CHARS", default_value_t = 500)]
    pub ambiguous_min_chars: usize,
    /// Who decides the ambiguous zone.
    #[arg(long, env = "CLASSIFIER", value_enum, default_value = "auto")]
    pub classifier: ClassifierKind,
    /// Base URL of the OpenAI-compatible classifier model [dev: the small tier's engine].
    #[arg(long, env = "CLASSIFIER_URL")]
    pub classifier_url: Option<String>,
    /// Model name for the OpenAI-compatible classifier [default: the first one the endpoint lists].
    #[arg(long, env = "CLASSIFIER_MODEL")]
    pub classifier_model: Option<String>,
    /// Bedrock model for the Bedrock classifier.
    #[arg(long, env = "BEDROCK_MODEL_ID", default_value = DEFAULT_MODEL_ID)]
    pub bedrock_model_id: String,
    /// Longest wait for the classifier before routing to small.
    #[arg(long, env = "CLASSIFIER_TIMEOUT_MS", default_value_t = 1500)]
    pub classifier_timeout_ms: u64,
}

impl RoutingArgs {
    pub fn config(&self) -> RoutingConfig {
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
                Some(Arc::new(BedrockClassifier::new(client, self.bedrock_model_id.clone())))
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
pub struct CallbackPolicyArgs {
    /// Accept http:// callback URLs (local development); https only otherwise.
    #[arg(long, env = "ALLOW_HTTP_CALLBACKS")]
    pub allow_http_callbacks: bool,
    /// Let callbacks reach loopback and private-network addresses (local development); link-local and
    /// instance-metadata addresses stay refused.
    #[arg(long, env = "ALLOW_PRIVATE_CALLBACKS")]
    pub allow_private_callbacks: bool,
}

impl CallbackPolicyArgs {
    pub fn policy(&self) -> OutboundPolicy {
        OutboundPolicy { allow_http: self.allow_http_callbacks, allow_private: self.allow_private_callbacks }
    }
}

fn running_on_lambda() -> bool {
    std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some()
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address of the local HTTP server (unused on Lambda).
    #[arg(long, env = "LISTEN_ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub queues: TierQueueArgs,
    /// Where results are read from: s3://bucket/prefix/ or a folder [default: --data-dir].
    #[arg(long, env = "OUTPUT_DESTINATION")]
    pub output_destination: Option<String>,
    /// Data directory of the embedded queues and results.
    #[arg(long, env = "GPUINFER_DATA_DIR", default_value = ".gpuinfer")]
    pub data_dir: PathBuf,
    #[command(flatten)]
    pub routing: RoutingArgs,
    #[command(flatten)]
    pub callbacks: CallbackPolicyArgs,
}

pub struct Config {
    listen: SocketAddr,
    queues: PerTier<Lanes<QueueSource>>,
    destination: Destination,
    routing: RoutingArgs,
    callbacks: OutboundPolicy,
    wiring: Wiring,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        let queues = self.queues.sources(&Tier::ALL)?;
        Ok(Config {
            listen: self.listen,
            queues,
            destination: Destination::parse(self.output_destination.as_deref(), &self.data_dir)?,
            routing: self.routing,
            callbacks: self.callbacks.policy(),
            wiring: Wiring::new(self.data_dir),
        })
    }
}

pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let wiring = &config.wiring;
    let lanes = |tier: Tier| wiring.lanes(config.queues.get(tier), tier, Duration::from_secs(300), 3);
    let state = Arc::new(AppState {
        queues: PerTier { small: lanes(Tier::Small).await?, large: lanes(Tier::Large).await? },
        store: wiring.store(&config.destination).await?,
        routing: config.routing.config(),
        classifier: config.routing.classifier(wiring, None).await?,
        callbacks: config.callbacks,
        metrics: Emf::stdout(),
    });
    if running_on_lambda() {
        let service = lambda_http::tower::ServiceBuilder::new()
            .map_request(|event: LambdaEvent<LambdaRequest>| LambdaEvent {
                payload: lambda_event(event.payload),
                ..event
            })
            .service(lambda_http::Adapter::from(app(state)));
        return lambda_http::lambda_runtime::run(service)
            .await
            .map_err(|e| anyhow::anyhow!("Lambda runtime failed: {e}"));
    }
    serve(config.listen, state, shutdown).await
}

/// Serves the API until `shutdown`, then lets open requests finish.
pub async fn serve(listen: SocketAddr, state: Arc<AppState>, shutdown: CancellationToken) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen} (in use? choose another with --listen)"))?;
    tracing::info!(address = %listen, "router listening");
    axum::serve(listener, app(state))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
        .context("HTTP server failed")
}
