//! `gpuinfer scaler`: every tier's scaling metric, as a local loop over the embedded queues of a data
//! directory, or as a Lambda function invoked by an EventBridge schedule (one invocation scales every tier).

use std::sync::Arc;

use lambda_runtime::LambdaEvent;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::aws::cloudwatch::SaturationOrGpu;
use crate::aws::ecs::EcsServices;
use crate::cmd::args::{DataDirArgs, ScalerArgs, ScalerSettings, TierQueueArgs};
use crate::cmd::backends::{QueueSource, Wiring};
use crate::contract::tier::{Lanes, PerTier, Tier};
use crate::infra::metrics::Emf;
use crate::infra::runtime::running_on_lambda;
use crate::local::fleet::FixedFleet;
use crate::ports::Queue;
use crate::scaler::{Scaler, TierReport};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Tiers to scale, repeated or comma-separated.
    #[arg(long = "tier", env = "SCALER_TIERS", value_enum, value_delimiter = ',', default_values_t = Tier::ALL)]
    pub tiers: Vec<Tier>,
    /// With every tier's queue URLs, the scaler reads SQS (every lane), ECS and CloudWatch.
    #[command(flatten)]
    pub(crate) queues: TierQueueArgs,
    #[command(flatten)]
    pub(crate) data: DataDirArgs,
    /// Worker pools taken as running in each tier on the embedded backends (they cannot count them).
    #[arg(long, env = "LOCAL_RUNNING_TASKS", default_value_t = 1)]
    pub(crate) local_running_tasks: u32,
    #[command(flatten)]
    pub(crate) scaler: ScalerArgs,
}

pub struct Config {
    tiers: Vec<Tier>,
    queues: PerTier<Lanes<QueueSource>>,
    local_running_tasks: u32,
    scaler: ScalerSettings,
    wiring: Wiring,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        let queues = self.queues.sources(&self.tiers)?;
        Ok(Config {
            scaler: self.scaler.settings(self.tiers.len())?,
            tiers: self.tiers,
            queues,
            local_running_tasks: self.local_running_tasks,
            wiring: Wiring::new(self.data.data_dir),
        })
    }
}

impl Config {
    /// On SQS: ECS task counts (and the Spot fallback's control) and the workers' saturation (else Container Insights
    /// GPU); else the embedded queues and a fixed fleet.
    async fn scaler(&self) -> anyhow::Result<Scaler> {
        let mut queues: Vec<(Tier, Lanes<Arc<dyn Queue>>)> = Vec::new();
        for &tier in &self.tiers {
            // The scaler only counts messages: visibility and receive counts never apply to it.
            let lanes = self.wiring.lanes(self.queues.get(tier), tier, tier.queue_visibility_timeout(), u32::MAX);
            queues.push((tier, lanes.await?));
        }
        let on_sqs = self.tiers.iter().any(|&tier| !self.queues.get(tier).normal.is_embedded());
        if on_sqs {
            let sdk = self.wiring.sdk().await;
            let ecs = Arc::new(EcsServices::new(aws_sdk_ecs::Client::new(sdk)));
            let gpu = Arc::new(SaturationOrGpu::new(aws_sdk_cloudwatch::Client::new(sdk)));
            return Ok(self.scaler.scaler(queues, ecs.clone(), gpu, Emf::stdout()).with_capacity_control(ecs));
        }
        let fleet = Arc::new(FixedFleet { tasks_per_tier: self.local_running_tasks });
        Ok(self.scaler.scaler(queues, fleet.clone(), fleet, Emf::stdout()))
    }
}

pub(crate) async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let scaler = config.scaler().await?;
    if running_on_lambda() {
        return serve_lambda(scaler, shutdown).await;
    }
    let interval = config.scaler.interval();
    tracing::info!(interval_s = interval.as_secs(), "scaler running");
    scaler.run(interval, shutdown, |_| {}).await;
    Ok(())
}

/// The fields of an EventBridge scheduled event the scaler uses; any other JSON (a test `{}`) is accepted.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ScheduledEvent {
    #[serde(default)]
    pub(crate) time: Option<String>,
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
