//! `gpuinfer dev`: router, one worker pool per tier, the scaler, embedded queues and result files, in one process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::cmd::backends::Wiring;
use crate::cmd::router::{RoutingArgs, serve};
use crate::cmd::scaler::ScalerArgs;
use crate::cmd::worker::{TuningArgs, WebhookArgs, build, engine_lost};
use crate::engine::base_url;
use crate::lanes::Lanes;
use crate::local::fleet::FixedFleet;
use crate::metrics::Emf;
use crate::ports::{Queue, ResultStore};
use crate::router::AppState;
use crate::routing::{PerTier, Tier};
use crate::worker::Stopped;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address of the router's HTTP server.
    #[arg(long, env = "LISTEN_ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Data directory: queue.db (embedded queues), results/, metrics.jsonl (EMF lines).
    #[arg(long, env = "GPUINFER_DATA_DIR", default_value = ".gpuinfer")]
    pub data_dir: PathBuf,
    /// Engine of the small tier (any OpenAI-compatible server: vLLM, llama.cpp, SGLang…).
    #[arg(long, env = "SMALL_ENGINE_URL", default_value = "http://127.0.0.1:8000")]
    pub small_engine_url: String,
    /// Engine of the large tier [default: the small tier's engine].
    #[arg(long, env = "LARGE_ENGINE_URL")]
    pub large_engine_url: Option<String>,
    /// Model name for the small engine [default: the first it lists].
    #[arg(long, env = "SMALL_MODEL_NAME")]
    pub small_model: Option<String>,
    /// Model name for the large engine [default: the first it lists].
    #[arg(long, env = "LARGE_MODEL_NAME")]
    pub large_model: Option<String>,
    #[command(flatten)]
    pub routing: RoutingArgs,
    #[command(flatten)]
    pub tuning: TuningArgs,
    #[command(flatten)]
    pub webhooks: WebhookArgs,
    #[command(flatten)]
    pub scaler: ScalerArgs,
}

pub struct Config {
    args: Args,
    wiring: Wiring,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        let wiring = Wiring::new(self.data_dir.clone());
        wiring.local()?;
        Ok(Config { args: self, wiring })
    }
}

pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let Config { args, wiring } = config;
    let backends = wiring.local()?;
    let store: Arc<dyn ResultStore> = backends.store.clone();
    let metrics_path = args.data_dir.join("metrics.jsonl");
    let metrics_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&metrics_path)
        .with_context(|| format!("cannot open {}", metrics_path.display()))?;
    let metrics = Emf::to_writer(metrics_file);
    let engine_urls = PerTier {
        small: args.small_engine_url.clone(),
        large: args.large_engine_url.clone().unwrap_or_else(|| args.small_engine_url.clone()),
    };
    let models = PerTier { small: args.small_model.clone(), large: args.large_model.clone() };
    let configs =
        PerTier { small: args.tuning.worker_config(Tier::Small)?, large: args.tuning.worker_config(Tier::Large)? };

    let lanes = |tier: Tier| -> Lanes<Arc<dyn Queue>> {
        let config = configs.get(tier);
        backends.tier_lanes(tier, config.visibility_timeout, config.max_receive_count).map(|q| q as Arc<dyn Queue>)
    };

    let webhooks = args.webhooks.webhooks(metrics.clone())?;
    let mut pools = tokio::task::JoinSet::new();
    for tier in Tier::ALL {
        let engine = args.tuning.engine_config(engine_urls.get(tier), models.get(tier).clone());
        let worker = build(lanes(tier), Arc::clone(&store), &engine, configs.get(tier).clone(), metrics.clone())?
            .with_webhooks(webhooks.clone());
        let shutdown = shutdown.clone();
        pools.spawn(async move {
            let stopped = worker.run(shutdown.clone()).await;
            if stopped != Stopped::Drained {
                shutdown.cancel(); // a lost engine stops the whole pipeline, so the process exits non-zero
            }
            (tier, stopped)
        });
    }
    let fleet = Arc::new(FixedFleet { tasks_per_tier: 1 });
    let scaler =
        args.scaler.scaler(Tier::ALL.map(|tier| (tier, lanes(tier))), fleet.clone(), fleet, metrics.clone())?;
    let scaler = tokio::spawn(scaler.run(args.scaler.interval(), shutdown.clone()));
    let state = Arc::new(AppState {
        queues: PerTier { small: lanes(Tier::Small), large: lanes(Tier::Large) },
        store,
        routing: args.routing.config(),
        classifier: args.routing.classifier(&wiring, Some(&engine_urls.small)).await?,
        callbacks: args.webhooks.policy.policy(),
        metrics,
    });
    print_banner(&args, &engine_urls, &metrics_path);
    let served = serve(args.listen, state, shutdown.clone()).await;
    shutdown.cancel();
    let mut lost = None;
    while let Some(done) = pools.join_next().await {
        if let Ok((tier, Stopped::EngineLost { released })) = done {
            lost = Some(engine_lost(configs.get(tier), engine_urls.get(tier), released));
        }
    }
    let _ = scaler.await;
    served?;
    lost.map_or(Ok(()), Err)
}

fn print_banner(args: &Args, engines: &PerTier<String>, metrics_path: &std::path::Path) {
    let url = format!("http://{}", args.listen);
    println!("gpuinfer dev: router on {url}");
    println!("  data      {}", args.data_dir.display());
    println!("  engines   small {}   large {}", base_url(&engines.small), base_url(&engines.large));
    println!(
        "  send      curl -s {url}/infer -H 'content-type: application/json' -d '{{\"prompt\":\"What is Amazon ECS? Answer briefly.\",\"maxTokens\":64}}'"
    );
    println!("  result    curl -s {url}/results/<requestId>    (cancel: curl -X DELETE …)");
    println!("  client    gpuinfer submit --url {url} --wait 'What is Amazon ECS?'");
    println!(
        "  scaler    a decision per tier every {} s in the log; EMF lines in {}",
        args.scaler.scaler_interval,
        metrics_path.display()
    );
    println!("  stop      Ctrl-C (requests in flight finish first; queued ones wait in the data directory)");
}
