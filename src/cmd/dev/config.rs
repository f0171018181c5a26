//! `gpuinfer dev`'s flags (`Args`, in groups) and the checked configuration they become (`Config`).

use std::net::SocketAddr;
use std::time::Duration;

use crate::callbacks::openai_events::EventConfig;
use crate::callbacks::webhook::WebhookConfig;
use crate::cmd::args::{
    DataDirArgs, HttpServerArgs, OpenAiWebhookArgs, RoutingArgs, RoutingSettings, ScalerArgs, ScalerSettings,
    TierSetting, TuningArgs, WebhookArgs,
};
use crate::cmd::backends::Wiring;
use crate::cmd::dev::engine_fleet::{DEFAULT_IDLE_TTL_SECONDS, DEFAULT_MAX_ENGINES, DEFAULT_START_TIMEOUT_SECONDS};
use crate::cmd::dev::engine_run::PORT_PLACEHOLDER;
use crate::cmd::dev::expiry::EXPIRY_SWEEP_SECONDS;
use crate::cmd::dev::fleet_state::FleetSettings;
use crate::contract::tier::{PerTier, Tier};
use crate::engine::client::{DEFAULT_ENGINE_URL, EngineConfig};
use crate::http::server::HttpLimits;
use crate::local::RESULT_RETENTION_DAYS;
use crate::router::body_budget::BodyBudget;
use crate::router::openai::settings::Settings;
use crate::worker::WorkerConfig;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    http: HttpServerArgs,
    #[command(flatten)]
    data: DataDirArgs,
    #[command(flatten)]
    engine_urls: EngineUrlArgs,
    #[command(flatten)]
    retention: RetentionArgs,
    #[command(flatten)]
    routing: RoutingArgs,
    #[command(flatten)]
    tuning: TuningArgs,
    #[command(flatten)]
    webhooks: WebhookArgs,
    #[command(flatten)]
    openai_webhook: OpenAiWebhookArgs,
    #[command(flatten)]
    scaler: ScalerArgs,
    // Boxed: the command enum's variants stay of comparable size.
    #[command(flatten)]
    engines: Box<EngineFleetArgs>,
}

/// Each tier's engine at a fixed URL, and the model asked of it.
#[derive(Debug, clap::Args)]
struct EngineUrlArgs {
    /// Engine of the small tier (any OpenAI-compatible server: vLLM, llama.cpp, SGLang…).
    #[arg(long, env = "SMALL_ENGINE_URL", default_value = DEFAULT_ENGINE_URL)]
    small_engine_url: String,
    /// Engine of the large tier [default: the small tier's engine].
    #[arg(long, env = "LARGE_ENGINE_URL")]
    large_engine_url: Option<String>,
    /// Model name for the small engine [default: the first it lists].
    #[arg(long, env = "SMALL_MODEL_NAME")]
    small_model: Option<String>,
    /// Model name for the large engine [default: the first it lists].
    #[arg(long, env = "LARGE_MODEL_NAME")]
    large_model: Option<String>,
}

/// How long the data directory keeps what it holds, and how often it is swept.
#[derive(Debug, clap::Args)]
struct RetentionArgs {
    /// Days a result document (and the record of its request, and the Batch API's files, batches and uploads) is
    /// kept in the data directory: the template's ResultRetentionDays, as the results bucket's lifecycle rule
    /// applies it on AWS.
    #[arg(long, env = "RESULT_RETENTION_DAYS", default_value_t = RESULT_RETENTION_DAYS, value_parser = clap::value_parser!(u64).range(1..))]
    result_retention_days: u64,
    /// Seconds between two expiry sweeps of the data directory (old documents, uploads past their hour, files past
    /// their expires_at).
    #[arg(long, env = "EXPIRY_SWEEP_SECONDS", default_value_t = EXPIRY_SWEEP_SECONDS, value_parser = clap::value_parser!(u64).range(1..))]
    expiry_sweep_seconds: u64,
}

/// Engines started on demand (opt-in): with an engine command, a tier's engines are started when work arrives
/// and stopped when idle, instead of using its engine URL.
#[derive(Debug, Clone, clap::Args)]
struct EngineFleetArgs {
    /// Command line that starts one small-tier engine listening on `{port}` of 127.0.0.1, run through `sh -c`
    /// (e.g. `vllm serve Qwen/Qwen2.5-0.5B-Instruct --host 127.0.0.1 --port {port}`) [default: none: the
    /// engine at --small-engine-url].
    #[arg(long, env = "SMALL_ENGINE_CMD")]
    small_engine_cmd: Option<String>,
    /// Command line that starts one large-tier engine, as --small-engine-cmd [default: the small tier's
    /// command when --large-engine-url is not given].
    #[arg(long, env = "LARGE_ENGINE_CMD")]
    large_engine_cmd: Option<String>,
    #[arg(long, env = "MAX_ENGINES", value_delimiter = ',', help = format!(
        "Most engines per tier started by an engine command, e.g. `2` or `small=2,large=1` [default: \
         {DEFAULT_MAX_ENGINES}]"
    ))]
    max_engines: Vec<TierSetting<u32>>,
    /// Seconds a tier must need fewer engines than it runs before one is stopped (drained first).
    #[arg(long, env = "ENGINE_IDLE_TTL_SECONDS", default_value_t = DEFAULT_IDLE_TTL_SECONDS)]
    engine_idle_ttl_seconds: u64,
    /// Seconds a started engine has to answer /health before its start counts as failed (a model load).
    #[arg(long, env = "ENGINE_START_TIMEOUT_SECONDS", default_value_t = DEFAULT_START_TIMEOUT_SECONDS, value_parser = clap::value_parser!(u64).range(1..))]
    engine_start_timeout_seconds: u64,
}

/// The checked engine commands: per tier, the command and its most engines, or None for a fixed engine URL.
pub(super) struct EngineCommands {
    pub(super) commands: PerTier<Option<(String, u32)>>,
    pub(super) settings: FleetSettings,
}

impl EngineFleetArgs {
    /// Each tier's engine command checked, with its most engines; `large_engine_url`: the large tier's own engine.
    fn commands(&self, large_engine_url: Option<&str>) -> anyhow::Result<EngineCommands> {
        let large = self
            .large_engine_cmd
            .clone()
            .or_else(|| large_engine_url.is_none().then(|| self.small_engine_cmd.clone()).flatten());
        let check = |tier: Tier, command: Option<String>| -> anyhow::Result<Option<(String, u32)>> {
            let Some(command) = command else { return Ok(None) };
            if !command.contains(PORT_PLACEHOLDER) {
                anyhow::bail!(
                    "the {tier} tier's engine command must contain {PORT_PLACEHOLDER}, the port it is to listen on: `{command}`"
                );
            }
            let max = TierSetting::pick(&self.max_engines, tier, DEFAULT_MAX_ENGINES);
            if max == 0 {
                anyhow::bail!("--max-engines must be at least 1 for the {tier} tier");
            }
            Ok(Some((command, max)))
        };
        Ok(EngineCommands {
            commands: PerTier {
                small: check(Tier::Small, self.small_engine_cmd.clone())?,
                large: check(Tier::Large, large)?,
            },
            settings: FleetSettings {
                idle_ttl: Duration::from_secs(self.engine_idle_ttl_seconds),
                start_timeout: Duration::from_secs(self.engine_start_timeout_seconds),
            },
        })
    }
}

/// `gpuinfer dev`'s checked configuration.
pub struct Config {
    pub(super) server: Server,
    pub(super) wiring: Wiring,
    pub(super) tiers: Tiers,
    pub(super) routing: RoutingSettings,
    pub(super) webhooks: WebhookConfig,
    pub(super) events: Option<EventConfig>,
    pub(super) openai: Settings,
    pub(super) scaler: ScalerSettings,
    pub(super) expiry: Expiry,
}

/// The HTTP server: where it listens, its limits, the memory the bodies being read may hold.
pub(super) struct Server {
    pub(super) listen: SocketAddr,
    pub(super) http: HttpLimits,
    pub(super) bodies: BodyBudget,
}

/// Each tier's engine and worker pool, and the engines started on demand.
pub(super) struct Tiers {
    pub(super) engines: PerTier<EngineConfig>,
    pub(super) workers: PerTier<WorkerConfig>,
    pub(super) commands: EngineCommands,
}

/// How long the data directory keeps a document, and how often it is swept.
pub(super) struct Expiry {
    pub(super) retention: Duration,
    pub(super) sweep: Duration,
}

impl Args {
    /// The flags checked, as the configuration `run` takes.
    pub fn into_config(self) -> anyhow::Result<Config> {
        let urls = &self.engine_urls;
        let commands = self.engines.commands(urls.large_engine_url.as_deref())?;
        let large_engine_url = urls.large_engine_url.as_deref().unwrap_or(&urls.small_engine_url);
        let engines = PerTier {
            small: self.tuning.engine_config(&urls.small_engine_url, urls.small_model.clone()),
            large: self.tuning.engine_config(large_engine_url, urls.large_model.clone()),
        };
        let service = &self.scaler.service;
        let workers = PerTier {
            small: self.tuning.worker_config(Tier::Small, service)?,
            large: self.tuning.worker_config(Tier::Large, service)?,
        };
        let wiring = Wiring::new(self.data.data_dir);
        // An engine started on demand is not there to classify: only a configured classifier then decides.
        let classifying_engine = commands.commands.small.is_none().then_some(urls.small_engine_url.as_str());
        Ok(Config {
            server: Server { listen: self.http.listen, http: self.http.limits(), bodies: self.http.body_budget() },
            openai: self.http.openai(&self.routing)?,
            routing: self.routing.settings(classifying_engine)?,
            tiers: Tiers { engines, workers, commands },
            webhooks: self.webhooks.config(),
            events: self.openai_webhook.config(self.webhooks.policy.policy())?,
            scaler: self.scaler.settings(Tier::ALL.len())?,
            expiry: Expiry {
                retention: Duration::from_secs(self.retention.result_retention_days * 24 * 3600),
                sweep: Duration::from_secs(self.retention.expiry_sweep_seconds),
            },
            wiring,
        })
    }
}
