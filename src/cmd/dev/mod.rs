//! `gpuinfer dev`: router, one worker pool per tier, the scaler, embedded queues and result files, in one process.
//!
//! `config`: its flags and the configuration they become; `run` is a sequence of steps, each a method of `Dev`.

mod config;
mod drill;
pub(crate) mod engine_fleet;
mod engine_run;
mod expiry;
mod fleet_state;

pub(crate) use config::{Args, Config};

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::callbacks::openai_events::OpenAiEvents;
use crate::callbacks::webhook::Webhooks;
use crate::cmd::dev::engine_fleet::{EngineFleet, TickNow};
use crate::cmd::dev::fleet_state::{EngineTier, PoolOutputs};
use crate::cmd::router::serve;
use crate::cmd::worker::{build, engine_lost};
use crate::contract::tier::{Lanes, PerTier, Tier};
use crate::engine::client::base_url;
use crate::infra::metrics::Emf;
use crate::local::LocalBackends;
use crate::local::fleet::FixedFleet;
use crate::ports::{ArrivalWake, Queue, ResultStore};
use crate::router::openai::upkeep;
use crate::router::state::{AppState, CallbackAcceptance, Dispatch};
use crate::scaler::wake::WakeOnArrival;
use crate::worker::Stopped;

/// Runs the whole pipeline until `shutdown`; an error when the server failed or an engine was lost.
pub(crate) async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let dev = Dev::open(&config, shutdown)?;
    let outputs = dev.outputs()?;
    let pools = dev.start_pools(&outputs)?;
    let scaling = dev.start_scaler(&outputs);
    let expiry = dev.start_expiry();
    let state = dev.router_state(outputs, scaling.wake.clone()).await?;
    let upkeep = tokio::spawn(upkeep::run_periodically(Arc::clone(&state), upkeep::DEV_PERIOD, dev.shutdown.clone()));
    print_banner(&config, &dev.metrics_path);
    let app = crate::router::app(state).merge(drill::routes(scaling.fleet.clone()));
    let served = serve(config.server.listen, app, config.server.http, dev.shutdown.clone()).await;
    dev.shutdown.cancel();
    let lost = dev.wait_for_stop(pools, scaling, expiry, upkeep).await;
    served?;
    lost.map_or(Ok(()), Err)
}

/// The data directory opened and held, and what every part of the process writes to.
struct Dev<'a> {
    config: &'a Config,
    backends: &'a LocalBackends,
    /// Held for the life of the process: a second `gpuinfer dev` on the same data directory is refused.
    _lock: File,
    store: Arc<dyn ResultStore>,
    metrics: Emf,
    metrics_path: PathBuf,
    shutdown: CancellationToken,
}

/// The scaler's task, and what it scales: the engines started on demand and the wake on arrival, if any.
struct Scaling {
    task: JoinHandle<()>,
    fleet: Option<Arc<EngineFleet>>,
    wake: Option<Arc<dyn ArrivalWake>>,
}

impl<'a> Dev<'a> {
    /// Opens the data directory's backends, takes its lock and opens its metrics file.
    fn open(config: &'a Config, shutdown: CancellationToken) -> anyhow::Result<Self> {
        let backends = config.wiring.local()?;
        let lock = lock_data_dir(config.wiring.data_dir())?;
        // With the lock, every lease in the queues is a stopped dev's: its messages run again now, not after their
        // visibility timeout.
        let taken = backends.take_back_leases().context("taking back the leases of a stopped gpuinfer dev")?;
        if taken > 0 {
            tracing::info!(messages = taken, "messages a stopped gpuinfer dev held are visible again");
        }
        let store: Arc<dyn ResultStore> = backends.store.clone();
        let metrics_path = config.wiring.data_dir().join("metrics.jsonl");
        let metrics_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&metrics_path)
            .with_context(|| format!("cannot open {}", metrics_path.display()))?;
        let metrics = Emf::to_writer(metrics_file);
        Ok(Dev { config, backends, _lock: lock, store, metrics, metrics_path, shutdown })
    }

    /// `tier`'s lanes in the data directory, with its worker pool's visibility timeout and receive count.
    fn lanes(&self, tier: Tier) -> Lanes<Arc<dyn Queue>> {
        let worker = self.config.tiers.workers.get(tier);
        self.backends
            .tier_lanes(tier, worker.lease.visibility_timeout, worker.lease.max_receive_count)
            .map(|q| q as Arc<dyn Queue>)
    }

    /// Where every worker pool sends results, metrics, callbacks and OpenAI events.
    fn outputs(&self) -> anyhow::Result<PoolOutputs> {
        let config = self.config;
        let webhooks = Webhooks::new(config.webhooks.clone(), self.metrics.clone())?;
        let events = config.events.clone().map(|events| OpenAiEvents::new(events, self.metrics.clone())).transpose()?;
        Ok(PoolOutputs { store: Arc::clone(&self.store), metrics: self.metrics.clone(), webhooks, events })
    }

    /// Starts the worker pool of each tier whose engine is at a fixed URL; a lost engine stops the process.
    fn start_pools(&self, outputs: &PoolOutputs) -> anyhow::Result<JoinSet<(Tier, Stopped)>> {
        let tiers = &self.config.tiers;
        let mut pools = JoinSet::new();
        for tier in Tier::ALL.into_iter().filter(|&tier| tiers.commands.commands.get(tier).is_none()) {
            let worker = build(
                self.lanes(tier),
                Arc::clone(&outputs.store),
                tiers.engines.get(tier),
                tiers.workers.get(tier).clone(),
                outputs.metrics.clone(),
            )?
            .with_webhooks(outputs.webhooks.clone())
            .with_openai_events(outputs.events.clone());
            let shutdown = self.shutdown.clone();
            pools.spawn(async move {
                let stopped = worker.run(shutdown.clone()).await;
                if stopped != Stopped::Drained {
                    shutdown.cancel(); // a lost engine stops the whole pipeline, so the process exits non-zero
                }
                (tier, stopped)
            });
        }
        Ok(pools)
    }

    /// The tiers whose engines are started on demand, each with its command and settings.
    fn engine_tiers(&self) -> Vec<EngineTier> {
        let tiers = &self.config.tiers;
        Tier::ALL
            .into_iter()
            .filter_map(|tier| {
                let (command, max_engines) = tiers.commands.commands.get(tier).clone()?;
                Some(EngineTier {
                    tier,
                    command,
                    max_engines,
                    engine: tiers.engines.get(tier).clone(),
                    worker: tiers.workers.get(tier).clone(),
                    lanes: self.lanes(tier),
                })
            })
            .collect()
    }

    /// Starts the scaler: over a fixed fleet of one task per tier, or over the engines it starts on demand, which
    /// the router then wakes on arrival.
    fn start_scaler(&self, outputs: &PoolOutputs) -> Scaling {
        let settings = &self.config.scaler;
        let scaled = Tier::ALL.map(|tier| (tier, self.lanes(tier)));
        let engine_tiers = self.engine_tiers();
        if engine_tiers.is_empty() {
            let fleet = Arc::new(FixedFleet { tasks_per_tier: 1 });
            let scaler = settings.scaler(scaled, fleet.clone(), fleet, self.metrics.clone());
            let task = tokio::spawn(scaler.run(settings.interval(), self.shutdown.clone(), |_| {}));
            return Scaling { task, fleet: None, wake: None };
        }
        let services = Tier::ALL.map(|tier| (settings.service(tier).name.clone(), tier));
        let fleet = Arc::new(EngineFleet::new(
            services.into(),
            engine_tiers,
            outputs.clone(),
            self.config.tiers.commands.settings.clone(),
            self.shutdown.clone(),
        ));
        let scaler = settings.scaler(scaled, fleet.clone(), fleet.clone(), self.metrics.clone());
        // Looking at a local fleet costs nothing: every arrival looks.
        let services =
            PerTier { small: settings.service(Tier::Small).clone(), large: settings.service(Tier::Large).clone() };
        let first_task = Arc::new(TickNow(scaler.tick_now()));
        let wake = Arc::new(WakeOnArrival::new(services, fleet.clone(), first_task, Duration::ZERO));
        let on_tick = Arc::clone(&fleet);
        let task = tokio::spawn(scaler.run(settings.interval(), self.shutdown.clone(), move |reports| {
            on_tick.apply(reports);
        }));
        Scaling { task, fleet: Some(fleet), wake: Some(wake) }
    }

    /// Starts the data directory's expiry sweep.
    fn start_expiry(&self) -> JoinHandle<()> {
        let expiry = &self.config.expiry;
        tokio::spawn(expiry::sweep_periodically(
            Arc::clone(&self.backends.store),
            expiry.retention,
            expiry.sweep,
            self.shutdown.clone(),
        ))
    }

    /// What the router's handlers share, its classifier built.
    async fn router_state(
        &self,
        outputs: PoolOutputs,
        wake: Option<Arc<dyn ArrivalWake>>,
    ) -> anyhow::Result<Arc<AppState>> {
        let config = self.config;
        Ok(Arc::new(AppState {
            dispatch: Dispatch {
                queues: PerTier { small: self.lanes(Tier::Small), large: self.lanes(Tier::Large) },
                routing: config.routing.config.clone(),
                // Boxed: the classifier's making (the AWS SDK's configuration) is a large future.
                classifier: Box::pin(config.routing.classifier(&config.wiring)).await?,
                wake,
            },
            store: outputs.store,
            callbacks: CallbackAcceptance { policy: config.webhooks.policy, sent: config.webhooks.secret.is_some() },
            metrics: outputs.metrics,
            bodies: config.server.bodies.clone(),
            openai: config.openai.clone(),
            events: outputs.events,
        }))
    }

    /// Waits for every part to stop once shutdown is asked: the pools (the error of an engine lost, if one was),
    /// the scaler, the engines started on demand, the expiry sweep and the upkeep.
    async fn wait_for_stop(
        &self,
        mut pools: JoinSet<(Tier, Stopped)>,
        scaling: Scaling,
        expiry: JoinHandle<()>,
        upkeep: JoinHandle<()>,
    ) -> Option<anyhow::Error> {
        let tiers = &self.config.tiers;
        let mut lost = None;
        while let Some(done) = pools.join_next().await {
            if let Ok((tier, Stopped::EngineLost { given_back })) = done {
                lost = Some(engine_lost(tiers.workers.get(tier), &tiers.engines.get(tier).base_url, given_back));
            }
        }
        let _ = scaling.task.await;
        if let Some(fleet) = scaling.fleet {
            fleet.stopped().await;
        }
        let _ = expiry.await;
        let _ = upkeep.await;
        lost
    }
}

/// Takes `<data_dir>/dev.lock`, or says which process holds the directory and what to do.
fn lock_data_dir(data_dir: &Path) -> anyhow::Result<std::fs::File> {
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

/// Says where the router listens, where each tier's engine is, and how to send a request and read its result.
fn print_banner(config: &Config, metrics_path: &Path) {
    let url = format!("http://{}", config.server.listen);
    let engines = &config.tiers.engines;
    let commands = &config.tiers.commands;
    println!("gpuinfer dev: router on {url}");
    println!("  data      {}", config.wiring.data_dir().display());
    let engine = |tier: Tier| match commands.commands.get(tier) {
        Some((command, max)) => {
            format!("on demand, up to {max}, stopped after {} s idle: {command}", commands.settings.idle_ttl.as_secs())
        }
        None => base_url(&engines.get(tier).base_url),
    };
    if commands.commands.small.is_none() && commands.commands.large.is_none() {
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
    if commands.commands.small.is_some() || commands.commands.large.is_some() {
        println!(
            "  drill     curl -X POST '{url}{}?tier=small'    (a Spot notice to its engines)",
            drill::SPOT_INTERRUPTION
        );
    }
    println!("  stop      Ctrl-C (requests in flight finish first; queued ones wait in the data directory)");
}
