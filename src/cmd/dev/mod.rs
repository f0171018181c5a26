//! `gpuinfer dev`: router, one worker pool per tier, the scaler, embedded queues and result files, in one process.

pub mod engine_fleet;
mod engine_run;
mod expiry;
mod fleet_state;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::cmd::args::{
    DataDirArgs, HttpServerArgs, OpenAiWebhookArgs, RoutingArgs, RoutingSettings, ScalerArgs, ScalerSettings,
    TierSetting, TuningArgs, WebhookArgs,
};
use crate::cmd::backends::Wiring;
use crate::cmd::dev::engine_fleet::{
    DEFAULT_IDLE_TTL_SECONDS, DEFAULT_MAX_ENGINES, DEFAULT_START_TIMEOUT_SECONDS, EngineFleet, TickNow,
};
use crate::cmd::dev::engine_run::PORT_PLACEHOLDER;
use crate::cmd::dev::fleet_state::{EngineTier, FleetSettings, PoolOutputs};
use crate::cmd::router::serve;
use crate::cmd::worker::{build, engine_lost};
use crate::contract::tier::{Lanes, PerTier, Tier};
use crate::engine::client::DEFAULT_ENGINE_URL;
use crate::engine::client::{EngineConfig, base_url};
use crate::http::server::HttpLimits;
use crate::infra::metrics::Emf;
use crate::local::RESULT_RETENTION_DAYS;
use crate::local::fleet::FixedFleet;
use crate::ports::{Queue, ResultStore};
use crate::router::body_budget::BodyBudget;
use crate::router::openai::upkeep;
use crate::router::state::AppState;
use crate::scaler::wake::WakeOnArrival;
use crate::worker::callbacks::openai_events::{EventConfig, OpenAiEvents};
use crate::worker::callbacks::webhook::{WebhookConfig, Webhooks};
use crate::worker::{Stopped, WorkerConfig};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub(crate) http: HttpServerArgs,
    #[command(flatten)]
    pub(crate) data: DataDirArgs,
    /// Engine of the small tier (any OpenAI-compatible server: vLLM, llama.cpp, SGLang…).
    #[arg(long, env = "SMALL_ENGINE_URL", default_value = DEFAULT_ENGINE_URL)]
    pub(crate) small_engine_url: String,
    /// Engine of the large tier [default: the small tier's engine].
    #[arg(long, env = "LARGE_ENGINE_URL")]
    pub(crate) large_engine_url: Option<String>,
    /// Model name for the small engine [default: the first it lists].
    #[arg(long, env = "SMALL_MODEL_NAME")]
    pub(crate) small_model: Option<String>,
    /// Model name for the large engine [default: the first it lists].
    #[arg(long, env = "LARGE_MODEL_NAME")]
    pub(crate) large_model: Option<String>,
    /// Days a result document (and the record of its request, and the Batch API's files, batches and uploads) is
    /// kept in the data directory: the template's ResultRetentionDays, as the results bucket's lifecycle rule
    /// applies it on AWS.
    #[arg(long, env = "RESULT_RETENTION_DAYS", default_value_t = RESULT_RETENTION_DAYS, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) result_retention_days: u64,
    /// Seconds between two expiry sweeps of the data directory (old documents, uploads past their hour, files past
    /// their expires_at).
    #[arg(long, env = "EXPIRY_SWEEP_SECONDS", default_value_t = expiry::EXPIRY_SWEEP_SECONDS, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) expiry_sweep_seconds: u64,
    #[command(flatten)]
    pub(crate) routing: RoutingArgs,
    #[command(flatten)]
    pub(crate) tuning: TuningArgs,
    #[command(flatten)]
    pub(crate) webhooks: WebhookArgs,
    #[command(flatten)]
    pub(crate) openai_webhook: OpenAiWebhookArgs,
    #[command(flatten)]
    pub(crate) scaler: ScalerArgs,
    // Boxed: the command enum's variants stay of comparable size.
    #[command(flatten)]
    pub(crate) engines: Box<EngineFleetArgs>,
}

/// Engines started on demand (opt-in): with an engine command, a tier's engines are started when work arrives
/// and stopped when idle, instead of using its engine URL.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct EngineFleetArgs {
    /// Command line that starts one small-tier engine listening on `{port}` of 127.0.0.1, run through `sh -c`
    /// (e.g. `vllm serve Qwen/Qwen2.5-0.5B-Instruct --host 127.0.0.1 --port {port}`) [default: none: the
    /// engine at --small-engine-url].
    #[arg(long, env = "SMALL_ENGINE_CMD")]
    pub(crate) small_engine_cmd: Option<String>,
    /// Command line that starts one large-tier engine, as --small-engine-cmd [default: the small tier's
    /// command when --large-engine-url is not given].
    #[arg(long, env = "LARGE_ENGINE_CMD")]
    pub(crate) large_engine_cmd: Option<String>,
    #[arg(long, env = "MAX_ENGINES", value_delimiter = ',', help = format!(
        "Most engines per tier started by an engine command, e.g. `2` or `small=2,large=1` [default: \
         {DEFAULT_MAX_ENGINES}]"
    ))]
    pub(crate) max_engines: Vec<TierSetting<u32>>,
    /// Seconds a tier must need fewer engines than it runs before one is stopped (drained first).
    #[arg(long, env = "ENGINE_IDLE_TTL_SECONDS", default_value_t = DEFAULT_IDLE_TTL_SECONDS)]
    pub(crate) engine_idle_ttl_seconds: u64,
    /// Seconds a started engine has to answer /health before its start counts as failed (a model load).
    #[arg(long, env = "ENGINE_START_TIMEOUT_SECONDS", default_value_t = DEFAULT_START_TIMEOUT_SECONDS, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) engine_start_timeout_seconds: u64,
}

/// The checked engine commands: per tier, the command and its most engines, or None for a fixed engine URL.
struct EngineCommands {
    commands: PerTier<Option<(String, u32)>>,
    settings: FleetSettings,
}

impl EngineFleetArgs {
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

pub struct Config {
    listen: SocketAddr,
    http: HttpLimits,
    bodies: BodyBudget,
    data_dir: PathBuf,
    engines: PerTier<EngineConfig>,
    workers: PerTier<WorkerConfig>,
    routing: RoutingSettings,
    webhooks: WebhookConfig,
    events: Option<EventConfig>,
    scaler: ScalerSettings,
    retention: Duration,
    expiry_sweep: Duration,
    wiring: Wiring,
    engine_commands: EngineCommands,
    openai: crate::router::openai::settings::Settings,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        let engine_commands = self.engines.commands(self.large_engine_url.as_deref())?;
        let large_engine_url = self.large_engine_url.as_deref().unwrap_or(&self.small_engine_url);
        let engines = PerTier {
            small: self.tuning.engine_config(&self.small_engine_url, self.small_model.clone()),
            large: self.tuning.engine_config(large_engine_url, self.large_model.clone()),
        };
        let service = &self.scaler.service;
        let workers = PerTier {
            small: self.tuning.worker_config(Tier::Small, service)?,
            large: self.tuning.worker_config(Tier::Large, service)?,
        };
        let wiring = Wiring::new(self.data.data_dir.clone());
        Ok(Config {
            listen: self.http.listen,
            http: self.http.limits(),
            bodies: self.http.body_budget(),
            openai: self.http.openai(&self.routing)?,
            data_dir: self.data.data_dir,
            engines,
            workers,
            // An engine started on demand is not there to classify: only a configured classifier then decides.
            routing: self
                .routing
                .settings(engine_commands.commands.small.is_none().then_some(self.small_engine_url.as_str()))?,
            webhooks: self.webhooks.config(),
            events: self.openai_webhook.config(self.webhooks.policy.policy())?,
            scaler: self.scaler.settings(Tier::ALL.len())?,
            retention: Duration::from_secs(self.result_retention_days * 24 * 3600),
            expiry_sweep: Duration::from_secs(self.expiry_sweep_seconds),
            wiring,
            engine_commands,
        })
    }
}

pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let backends = config.wiring.local()?;
    // Held for the life of the process: a second `gpuinfer dev` on the same data directory is refused.
    let _lock = lock_data_dir(&config.data_dir)?;
    let store: Arc<dyn ResultStore> = backends.store.clone();
    let metrics_path = config.data_dir.join("metrics.jsonl");
    let metrics_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&metrics_path)
        .with_context(|| format!("cannot open {}", metrics_path.display()))?;
    let metrics = Emf::to_writer(metrics_file);
    let lanes = |tier: Tier| -> Lanes<Arc<dyn Queue>> {
        let worker = config.workers.get(tier);
        backends.tier_lanes(tier, worker.visibility_timeout, worker.max_receive_count).map(|q| q as Arc<dyn Queue>)
    };

    let webhooks = Webhooks::new(config.webhooks.clone(), metrics.clone())?;
    let events = config.events.clone().map(|events| OpenAiEvents::new(events, metrics.clone())).transpose()?;
    let mut pools = tokio::task::JoinSet::new();
    let commands = &config.engine_commands.commands;
    for tier in Tier::ALL.into_iter().filter(|&tier| commands.get(tier).is_none()) {
        let worker = build(
            lanes(tier),
            Arc::clone(&store),
            config.engines.get(tier),
            config.workers.get(tier).clone(),
            metrics.clone(),
        )?
        .with_webhooks(webhooks.clone())
        .with_openai_events(events.clone());
        let shutdown = shutdown.clone();
        pools.spawn(async move {
            let stopped = worker.run(shutdown.clone()).await;
            if stopped != Stopped::Drained {
                shutdown.cancel(); // a lost engine stops the whole pipeline, so the process exits non-zero
            }
            (tier, stopped)
        });
    }
    let scaled = Tier::ALL.map(|tier| (tier, lanes(tier)));
    let engine_tiers: Vec<EngineTier> = Tier::ALL
        .into_iter()
        .filter_map(|tier| {
            let (command, max_engines) = commands.get(tier).clone()?;
            Some(EngineTier {
                tier,
                command,
                max_engines,
                engine: config.engines.get(tier).clone(),
                worker: config.workers.get(tier).clone(),
                lanes: lanes(tier),
            })
        })
        .collect();
    let mut engine_fleet = None;
    let mut wake = None;
    let scaler = if engine_tiers.is_empty() {
        let fleet = Arc::new(FixedFleet { tasks_per_tier: 1 });
        let scaler = config.scaler.scaler(scaled, fleet.clone(), fleet, metrics.clone());
        tokio::spawn(scaler.run(config.scaler.interval(), shutdown.clone(), |_| {}))
    } else {
        let services = Tier::ALL.map(|tier| (config.scaler.service(tier).name.clone(), tier));
        let fleet = Arc::new(EngineFleet::new(
            services.into(),
            engine_tiers,
            PoolOutputs {
                store: Arc::clone(&store),
                metrics: metrics.clone(),
                webhooks: webhooks.clone(),
                events: events.clone(),
            },
            config.engine_commands.settings.clone(),
            shutdown.clone(),
        ));
        engine_fleet = Some(Arc::clone(&fleet));
        let scaler = config.scaler.scaler(scaled, fleet.clone(), fleet.clone(), metrics.clone());
        // Looking at a local fleet costs nothing: every arrival looks.
        let services = PerTier {
            small: config.scaler.service(Tier::Small).clone(),
            large: config.scaler.service(Tier::Large).clone(),
        };
        let first_task = Arc::new(TickNow(scaler.tick_now()));
        wake = Some(Arc::new(WakeOnArrival::new(services, fleet.clone(), first_task, Duration::ZERO)));
        tokio::spawn(scaler.run(config.scaler.interval(), shutdown.clone(), move |reports| fleet.apply(reports)))
    };
    let expiry = tokio::spawn(expiry::sweep_periodically(
        Arc::clone(&backends.store),
        config.retention,
        config.expiry_sweep,
        shutdown.clone(),
    ));
    let state = Arc::new(AppState {
        queues: PerTier { small: lanes(Tier::Small), large: lanes(Tier::Large) },
        store,
        routing: config.routing.config.clone(),
        classifier: config.routing.classifier(&config.wiring).await?,
        callbacks: config.webhooks.policy,
        callbacks_sent: config.webhooks.secret.is_some(),
        metrics,
        bodies: config.bodies.clone(),
        openai: config.openai.clone(),
        wake,
        events,
    });
    let upkeep = tokio::spawn(upkeep::run_periodically(Arc::clone(&state), upkeep::DEV_PERIOD, shutdown.clone()));
    print_banner(&config, &metrics_path);
    let served = serve(config.listen, state, config.http, shutdown.clone()).await;
    shutdown.cancel();
    let mut lost = None;
    while let Some(done) = pools.join_next().await {
        if let Ok((tier, Stopped::EngineLost { released })) = done {
            lost = Some(engine_lost(config.workers.get(tier), &config.engines.get(tier).base_url, released));
        }
    }
    let _ = scaler.await;
    if let Some(fleet) = engine_fleet {
        fleet.stopped().await;
    }
    let _ = expiry.await;
    let _ = upkeep.await;
    served?;
    lost.map_or(Ok(()), Err)
}

/// Takes `<data_dir>/dev.lock`, or says which process holds the directory and what to do.
fn lock_data_dir(data_dir: &std::path::Path) -> anyhow::Result<std::fs::File> {
    let path = data_dir.join("dev.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "another gpuinfer dev is running on the data directory {} (it holds {}): stop it, or give this one \
             its own --data-dir",
            data_dir.display(),
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => Err(e).with_context(|| format!("cannot lock {}", path.display())),
    }
}

fn print_banner(config: &Config, metrics_path: &std::path::Path) {
    let url = format!("http://{}", config.listen);
    let engines = &config.engines;
    println!("gpuinfer dev: router on {url}");
    println!("  data      {}", config.data_dir.display());
    let engine = |tier: Tier| match config.engine_commands.commands.get(tier) {
        Some((command, max)) => format!(
            "on demand, up to {max}, stopped after {} s idle: {command}",
            config.engine_commands.settings.idle_ttl.as_secs()
        ),
        None => base_url(&engines.get(tier).base_url),
    };
    if config.engine_commands.commands.small.is_none() && config.engine_commands.commands.large.is_none() {
        println!("  engines   small {}   large {}", engine(Tier::Small), engine(Tier::Large));
    } else {
        println!("  engines   small {}", engine(Tier::Small));
        println!("            large {}", engine(Tier::Large));
    }
    println!(
        "  send      curl -s {url}/infer -H 'content-type: application/json' -d '{{\"prompt\":\"What is Amazon ECS? Answer briefly.\",\"maxTokens\":64}}'"
    );
    println!("  result    curl -s {url}/results/<requestId>    (cancel: curl -X DELETE …)");
    println!("  client    gpuinfer submit --url {url} --wait 'What is Amazon ECS?'");
    println!(
        "  scaler    a decision per tier every {} s in the log; EMF lines in {}",
        config.scaler.interval().as_secs(),
        metrics_path.display()
    );
    println!("  stop      Ctrl-C (requests in flight finish first; queued ones wait in the data directory)");
}
