//! `gpuinfer scaler`: every tier's scaling metric, as a local loop over the embedded queues of a data
//! directory, or as a Lambda function invoked by an EventBridge schedule (one invocation scales every tier).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use lambda_runtime::LambdaEvent;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::aws::cloudwatch::ContainerInsightsGpu;
use crate::aws::ecs::EcsServices;
use crate::cli::TierSetting;
use crate::cmd::backends::{QueueSource, TierQueueArgs, Wiring};
use crate::lanes::Lanes;
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
    /// With every tier's queue URLs, the scaler reads SQS (both lanes), ECS and CloudWatch.
    #[command(flatten)]
    pub queues: TierQueueArgs,
    /// Data directory of the embedded queues (when no queue URL is set).
    #[arg(long, env = "GPUINFER_DATA_DIR", default_value = ".gpuinfer")]
    pub data_dir: PathBuf,
    /// Worker pools taken as running in each tier on the embedded backends (they cannot count them).
    #[arg(long, env = "LOCAL_RUNNING_TASKS", default_value_t = 1)]
    pub local_running_tasks: u32,
    #[command(flatten)]
    pub scaler: ScalerArgs,
}

pub struct Config {
    tiers: Vec<Tier>,
    queues: PerTier<Lanes<QueueSource>>,
    local_running_tasks: u32,
    scaler: ScalerArgs,
    wiring: Wiring,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        let queues = self.queues.sources(&self.tiers)?;
        self.scaler.policy.policy(Tier::Small)?;
        self.scaler.policy.policy(Tier::Large)?;
        Ok(Config {
            tiers: self.tiers,
            queues,
            local_running_tasks: self.local_running_tasks,
            scaler: self.scaler,
            wiring: Wiring::new(self.data_dir),
        })
    }
}

impl Config {
    /// On SQS: ECS task counts and Container Insights GPU readings; else the embedded queues and a fixed fleet.
    async fn scaler(&self) -> anyhow::Result<Scaler> {
        let mut queues: Vec<(Tier, Lanes<Arc<dyn Queue>>)> = Vec::new();
        for &tier in &self.tiers {
            let visibility = Duration::from_secs(300);
            queues.push((tier, self.wiring.lanes(self.queues.get(tier), tier, visibility, u32::MAX).await?));
        }
        let on_sqs = self.tiers.iter().any(|&tier| !self.queues.get(tier).normal.is_embedded());
        let (tasks, gpu): (Arc<dyn ServiceTasks>, Arc<dyn GpuUtilization>) = if on_sqs {
            let sdk = self.wiring.sdk().await;
            (
                Arc::new(EcsServices::new(aws_sdk_ecs::Client::new(sdk))),
                Arc::new(ContainerInsightsGpu::new(aws_sdk_cloudwatch::Client::new(sdk))),
            )
        } else {
            let fleet = Arc::new(FixedFleet { tasks_per_tier: self.local_running_tasks });
            (fleet.clone(), fleet)
        };
        self.scaler.scaler(queues, tasks, gpu, Emf::stdout())
    }
}

pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let scaler = config.scaler().await?;
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some() {
        return serve_lambda(scaler, shutdown).await;
    }
    let interval = config.scaler.interval();
    tracing::info!(interval_s = interval.as_secs(), "scaler running");
    scaler.run(interval, shutdown).await;
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
