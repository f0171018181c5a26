//! `gpuinfer router`: the HTTP API as a local server over the embedded backends of a data directory.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::ValueEnum;
use tokio_util::sync::CancellationToken;

use crate::classifier::OpenAiClassifier;
use crate::engine::{EngineClient, EngineConfig};
use crate::local::LocalBackends;
use crate::metrics::Emf;
use crate::ports::{Classifier, Queue};
use crate::router::{AppState, app};
use crate::routing::{PerTier, RoutingConfig, Tier};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClassifierKind {
    /// No classifier: the ambiguous zone goes to the small tier.
    None,
    /// Ask a model behind an OpenAI-compatible endpoint (--classifier-url).
    Openai,
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
    #[arg(long, env = "CLASSIFIER", value_enum, default_value = "openai")]
    pub classifier: ClassifierKind,
    /// Base URL of the OpenAI-compatible classifier model [default: the small tier's engine].
    #[arg(long, env = "CLASSIFIER_URL")]
    pub classifier_url: Option<String>,
    /// Model name for the classifier [default: the first one the endpoint lists].
    #[arg(long, env = "CLASSIFIER_MODEL")]
    pub classifier_model: Option<String>,
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

    /// The classifier, reaching `default_url` unless --classifier-url says otherwise.
    pub fn classifier(&self, default_url: Option<&str>) -> anyhow::Result<Option<Arc<dyn Classifier>>> {
        if self.classifier == ClassifierKind::None {
            return Ok(None);
        }
        let Some(url) = self.classifier_url.as_deref().or(default_url) else {
            bail!("--classifier openai needs --classifier-url (CLASSIFIER_URL), or use --classifier none");
        };
        let engine = EngineClient::new(&EngineConfig {
            base_url: url.to_owned(),
            model: self.classifier_model.clone(),
            request_timeout: Duration::from_millis(self.classifier_timeout_ms),
        })?;
        Ok(Some(Arc::new(OpenAiClassifier::new(engine))))
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address of the local HTTP server.
    #[arg(long, env = "LISTEN_ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// SQS queue of the small tier (AWS mode; not supported by this build).
    #[arg(long, env = "SMALL_QUEUE_URL")]
    pub small_queue_url: Option<String>,
    /// SQS queue of the large tier (AWS mode; not supported by this build).
    #[arg(long, env = "LARGE_QUEUE_URL")]
    pub large_queue_url: Option<String>,
    /// Where results are read from: a local folder [default: the data directory].
    #[arg(long, env = "OUTPUT_DESTINATION")]
    pub output_destination: Option<String>,
    /// Data directory of the embedded queues and results.
    #[arg(long, env = "GPUINFER_DATA_DIR", default_value = ".gpuinfer")]
    pub data_dir: PathBuf,
    #[command(flatten)]
    pub routing: RoutingArgs,
}

pub struct Config {
    listen: SocketAddr,
    state: AppState,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        if self.small_queue_url.is_some() || self.large_queue_url.is_some() {
            bail!(
                "SQS queue URLs are set, but this build runs on the embedded queues only; unset SMALL_QUEUE_URL/LARGE_QUEUE_URL or use `gpuinfer dev`"
            );
        }
        let data_dir = local_output(self.output_destination.as_deref(), &self.data_dir)?;
        let backends = LocalBackends::open(&data_dir).context("opening the embedded backends")?;
        let queue = |tier| -> Arc<dyn Queue> { backends.queue_handle(tier) };
        Ok(Config {
            listen: self.listen,
            state: AppState {
                queues: PerTier { small: queue(Tier::Small), large: queue(Tier::Large) },
                store: backends.store.clone(),
                routing: self.routing.config(),
                classifier: self.routing.classifier(None)?,
                metrics: Emf::stdout(),
            },
        })
    }
}

/// The folder an OUTPUT_DESTINATION names, or the data directory when none is given.
pub fn local_output(destination: Option<&str>, data_dir: &std::path::Path) -> anyhow::Result<PathBuf> {
    match destination {
        None | Some("") => Ok(data_dir.to_owned()),
        Some(d) if d.starts_with("s3://") || d.starts_with("https://") => {
            bail!("OUTPUT_DESTINATION {d} needs the AWS adapters, which this build does not have; give a local folder")
        }
        Some(d) => Ok(PathBuf::from(d.strip_prefix("file://").unwrap_or(d))),
    }
}

pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    serve(config.listen, Arc::new(config.state), shutdown).await
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
