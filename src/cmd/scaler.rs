//! `gpuinfer scaler`: every tier's scaling metric, as a local loop over the embedded queues of a data
//! directory, or as a Lambda function invoked by an EventBridge schedule (one invocation scales every tier).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use lambda_runtime::LambdaEvent;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::cli::TierSetting;
use crate::lanes::Lanes;
use crate::local::LocalBackends;
use crate::local::fleet::FixedFleet;
use crate::metrics::Emf;
use crate::ports::{GpuUtilization, Queue, Service, ServiceTasks};
use crate::routing::{PerTier, Tier};
use crate::scaler::{ScaledTier, Scaler, ScalingPolicy, TierReport};

/// Most tasks per tier when MAX_TASK_COUNT does not say (the seed's MaxTaskCount, LargeModelMaxTaskCount).
const MAX_TASKS: PerTier<u32> = PerTier { small: 10, large: 4 };

/// What each tier is scaled toward; shared by `scaler`, `dev` and `simulate`.
#[derive(Debug, Clone, clap::Args)]
pub struct PolicyArgs {
    /// Messages (queued, delayed or in flight) one task should carry: a backlog of B asks for ⌈B / this⌉
    /// tasks. One value (`5`) or per tier (`small=5,large=2`) [default: 5].
    #[arg(long, env = "QUEUE_DEPTH_THRESHOLD", value_delimiter = ',')]
    pub queue_depth_threshold: Vec<TierSetting<u32>>,
    /// Fewest tasks per tier, e.g. `0` or `small=1,large=0` [default: 0].
    #[arg(long, env = "MIN_TASK_COUNT", value_delimiter = ',')]
    pub min_tasks: Vec<TierSetting<u32>>,
    /// Most tasks per tier [default: small=10,large=4].
    #[arg(long, env = "MAX_TASK_COUNT", value_delimiter = ',')]
    pub max_tasks: Vec<TierSetting<u32>>,
    /// GPU compute utilization, in percent, above which running tasks ask for more.
    #[arg(long, env = "GPU_UTILIZATION_TARGET", default_value_t = 80.0)]
    pub utilization_target: f64,
}

impl PolicyArgs {
    pub fn policy(&self, tier: Tier) -> anyhow::Result<ScalingPolicy> {
        ScalingPolicy::new(
            TierSetting::pick(&self.queue_depth_threshold, tier, 5),
            TierSetting::pick(&self.min_tasks, tier, 0),
            TierSetting::pick(&self.max_tasks, tier, *MAX_TASKS.get(tier)),
            self.utilization_target,
        )
        .with_context(|| format!("scaling settings of the {tier} tier"))
    }
}

/// The scaler's loop and metric dimensions; shared by `scaler` and `dev`.
#[derive(Debug, Clone, clap::Args)]
pub struct ScalerArgs {
    /// Seconds between two scaling decisions of the local loop (on Lambda, the schedule decides).
    #[arg(long, env = "SCALER_INTERVAL_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub scaler_interval: u64,
    /// ECS cluster of the tiers' services: the `ClusterName` dimension of the scaling metrics.
    #[arg(long, env = "CLUSTER_NAME", default_value = "local")]
    pub cluster_name: String,
    /// ECS service of each tier, `{tier}` standing for the tier's name: the `ServiceName` dimension.
    #[arg(long, env = "SERVICE_NAME", default_value = "gpuinfer-{tier}")]
    pub service_name: String,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

impl ScalerArgs {
    pub fn interval(&self) -> Duration {
        Duration::from_secs(self.scaler_interval)
    }

    /// A scaler over each tier's lanes, reading task counts from `tasks` and GPU utilization from `gpu`.
    pub fn scaler(
        &self,
        queues: impl IntoIterator<Item = (Tier, Lanes<Arc<dyn Queue>>)>,
        tasks: Arc<dyn ServiceTasks>,
        gpu: Arc<dyn GpuUtilization>,
        metrics: Emf,
    ) -> anyhow::Result<Scaler> {
        let tiers: Vec<ScaledTier> = queues
            .into_iter()
            .map(|(tier, lanes)| {
                Ok(ScaledTier {
                    tier,
                    service: Service {
                        cluster: self.cluster_name.clone(),
                        name: self.service_name.replace("{tier}", tier.as_str()),
                    },
                    lanes,
                    policy: self.policy.policy(tier)?,
                })
            })
            .collect::<anyhow::Result<_>>()?;
        if tiers.len() > 1 && !self.service_name.contains("{tier}") {
            bail!("SERVICE_NAME `{}` must contain {{tier}} when more than one tier is scaled", self.service_name);
        }
        Ok(Scaler::new(tiers, tasks, gpu, metrics))
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Tiers to scale, repeated or comma-separated.
    #[arg(long = "tier", env = "SCALER_TIERS", value_enum, value_delimiter = ',', default_values_t = Tier::ALL)]
    pub tiers: Vec<Tier>,
    /// Data directory of the embedded queues.
    #[arg(long, env = "GPUINFER_DATA_DIR", default_value = ".gpuinfer")]
    pub data_dir: PathBuf,
    /// Worker pools taken as running in each tier (the embedded backends cannot count them).
    #[arg(long, env = "LOCAL_RUNNING_TASKS", default_value_t = 1)]
    pub local_running_tasks: u32,
    #[command(flatten)]
    pub scaler: ScalerArgs,
}

pub struct Config {
    scaler: Scaler,
    interval: Duration,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        let backends = LocalBackends::open(&self.data_dir).context("opening the embedded backends")?;
        let queues = self.tiers.iter().map(|&tier| (tier, backends.lane_handles(tier).map(|q| q as Arc<dyn Queue>)));
        let fleet = Arc::new(FixedFleet { tasks_per_tier: self.local_running_tasks });
        Ok(Config {
            scaler: self.scaler.scaler(queues, fleet.clone(), fleet, Emf::stdout())?,
            interval: self.scaler.interval(),
        })
    }
}

pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some() {
        return serve_lambda(config.scaler, shutdown).await;
    }
    tracing::info!(interval_s = config.interval.as_secs(), "scaler running");
    config.scaler.run(config.interval, shutdown).await;
    Ok(())
}

/// The fields of an EventBridge scheduled event the scaler uses; any other JSON (a test `{}`) is accepted.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ScheduledEvent {
    #[serde(default)]
    pub time: Option<String>,
}

/// The answer to one invocation: the schedule time it served and every tier's report.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InvocationReport {
    pub event_time: Option<String>,
    pub tiers: Vec<TierReport>,
}

/// A tier could not be read, so its metric is missing this minute; the invocation counts as failed.
#[derive(Debug, thiserror::Error)]
#[error("no scaling metric published for {0}")]
pub struct UnreadTiers(String);

/// The Lambda handler: one tick over every tier. It fails (Lambda counts an error) when a tier went unread,
/// after publishing the others.
pub async fn handle_scheduled_event(
    event: LambdaEvent<ScheduledEvent>,
    scaler: &Scaler,
) -> Result<InvocationReport, UnreadTiers> {
    let tiers = scaler.tick().await;
    let unread: Vec<String> = tiers
        .iter()
        .filter_map(|report| report.unread_error().map(|error| format!("{} ({error})", report.tier)))
        .collect();
    if !unread.is_empty() {
        return Err(UnreadTiers(unread.join("; ")));
    }
    Ok(InvocationReport { event_time: event.payload.time, tiers })
}

async fn serve_lambda(scaler: Scaler, shutdown: CancellationToken) -> anyhow::Result<()> {
    let scaler = Arc::new(scaler);
    let handler = lambda_runtime::service_fn(move |event: LambdaEvent<ScheduledEvent>| {
        let scaler = Arc::clone(&scaler);
        async move { handle_scheduled_event(event, &scaler).await.map_err(lambda_runtime::Error::from) }
    });
    tokio::select! {
        served = lambda_runtime::run(handler) => served.map_err(|e| anyhow::anyhow!("Lambda runtime failed: {e}")),
        () = shutdown.cancelled() => Ok(()),
    }
}
