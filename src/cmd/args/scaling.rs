//! The flag groups of scaling: what each tier is scaled toward, the scaler's loop and its metric dimensions;
//! shared by `scaler`, `dev` and `simulate`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::contract::tier::{Lanes, PerTier, Tier};
use crate::infra::metrics::Emf;
use crate::ports::{DEFAULT_CLUSTER_NAME, DEFAULT_SERVICE_NAME, GpuUtilization, Queue, Service, ServiceTasks};
use crate::scaler::fallback::Fallback;
use crate::scaler::{
    DEFAULT_BACKLOG_PER_TASK, DEFAULT_INTERVAL_SECONDS, DEFAULT_MAX_TASKS, DEFAULT_MIN_TASKS,
    DEFAULT_UTILIZATION_TARGET, ScaledTier, Scaler, ScalingPolicy,
};

use crate::cmd::args::tier_setting::TierSetting;

/// What each tier is scaled toward; shared by `scaler`, `dev` and `simulate`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct PolicyArgs {
    #[arg(long, env = "QUEUE_DEPTH_THRESHOLD", value_delimiter = ',', help = format!(
        "Messages (queued, delayed or in flight) one task should carry: a backlog of B asks for ⌈B / this⌉ tasks. \
         One value (`5`) or per tier (`small=5,large=2`) [default: {DEFAULT_BACKLOG_PER_TASK}]"
    ))]
    pub(crate) queue_depth_threshold: Vec<TierSetting<u32>>,
    #[arg(long, env = "MIN_TASK_COUNT", value_delimiter = ',', help = format!(
        "Fewest tasks per tier, e.g. `0` or `small=1,large=0` [default: {DEFAULT_MIN_TASKS}]"
    ))]
    pub(crate) min_tasks: Vec<TierSetting<u32>>,
    #[arg(long, env = "MAX_TASK_COUNT", value_delimiter = ',', help = format!(
        "Most tasks per tier [default: {}]", TierSetting::per_tier(&DEFAULT_MAX_TASKS)
    ))]
    pub(crate) max_tasks: Vec<TierSetting<u32>>,
    /// GPU compute utilization, in percent, above which running tasks ask for more.
    #[arg(long, env = "GPU_UTILIZATION_TARGET", default_value_t = DEFAULT_UTILIZATION_TARGET)]
    pub(crate) utilization_target: f64,
}

impl PolicyArgs {
    pub(crate) fn policy(&self, tier: Tier) -> anyhow::Result<ScalingPolicy> {
        ScalingPolicy::new(
            TierSetting::pick(&self.queue_depth_threshold, tier, DEFAULT_BACKLOG_PER_TASK),
            TierSetting::pick(&self.min_tasks, tier, DEFAULT_MIN_TASKS),
            TierSetting::pick(&self.max_tasks, tier, *DEFAULT_MAX_TASKS.get(tier)),
            self.utilization_target,
        )
        .with_context(|| format!("scaling settings of the {tier} tier"))
    }
}

/// The scaler's loop and metric dimensions; shared by `scaler` and `dev`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ScalerArgs {
    /// Seconds between two scaling decisions of the local loop (on Lambda, the schedule decides).
    #[arg(long, env = "SCALER_INTERVAL_SECONDS", default_value_t = DEFAULT_INTERVAL_SECONDS, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) scaler_interval: u64,
    #[command(flatten)]
    pub service: ServiceArgs,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Tiers on Spot with an On-Demand fallback, repeated or comma-separated: while a Spot task of theirs waits
    /// SPOT_FALLBACK_MINUTES for an instance, the scaler starts On-Demand tasks of their fallback service (the tier's
    /// SERVICE_NAME and `-fallback`) [default: none].
    #[arg(long = "fallback-tier", env = "SPOT_FALLBACK_TIERS", value_enum, value_delimiter = ',')]
    pub(crate) fallback_tiers: Vec<Tier>,
    /// Minutes a Spot task may wait for an instance before its tier's fallback starts; also how long Spot must serve
    /// the tier again before the fallback stops.
    #[arg(long, env = "SPOT_FALLBACK_MINUTES", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub(crate) spot_fallback_minutes: u64,
}

/// The ECS cluster and each tier's service: the dimensions of the scaling metrics and of the workers' saturation.
#[derive(Debug, Clone, clap::Args)]
pub struct ServiceArgs {
    /// ECS cluster of the tiers' services: the `ClusterName` dimension of the scaling and saturation metrics.
    #[arg(long, env = "CLUSTER_NAME", default_value = DEFAULT_CLUSTER_NAME)]
    pub(crate) cluster_name: String,
    /// ECS service of each tier, `{tier}` standing for the tier's name: the `ServiceName` dimension.
    #[arg(long, env = "SERVICE_NAME", default_value = DEFAULT_SERVICE_NAME)]
    pub(crate) service_name: String,
}

impl ServiceArgs {
    pub fn service(&self, tier: Tier) -> Service {
        Service::of_tier(&self.cluster_name, &self.service_name, tier)
    }
}

impl ScalerArgs {
    /// Checks each tier's policy, and that `tiers_scaled` tiers (more than one) get a service each.
    pub(crate) fn settings(&self, tiers_scaled: usize) -> anyhow::Result<ScalerSettings> {
        if tiers_scaled > 1 && !self.service.service_name.contains("{tier}") {
            let pattern = &self.service.service_name;
            bail!("SERVICE_NAME `{pattern}` must contain {{tier}} when more than one tier is scaled");
        }
        let tier = |tier| {
            let service = self.service.service(tier);
            let fallback = self.fallback_tiers.contains(&tier).then(|| Fallback {
                service: Service { cluster: service.cluster.clone(), name: format!("{}-fallback", service.name) },
                bound: Duration::from_secs(self.spot_fallback_minutes * 60),
            });
            anyhow::Ok((service, self.policy.policy(tier)?, fallback))
        };
        Ok(ScalerSettings {
            tiers: PerTier { small: tier(Tier::Small)?, large: tier(Tier::Large)? },
            interval: Duration::from_secs(self.scaler_interval),
        })
    }
}

/// The scaler's checked settings: each tier's service (its metrics' dimensions) and policy, the loop's interval.
#[derive(Debug, Clone)]
pub(crate) struct ScalerSettings {
    tiers: PerTier<(Service, ScalingPolicy, Option<Fallback>)>,
    interval: Duration,
}

impl ScalerSettings {
    pub(crate) fn interval(&self) -> Duration {
        self.interval
    }

    pub(crate) fn service(&self, tier: Tier) -> &Service {
        &self.tiers.get(tier).0
    }

    /// A scaler over each tier's lanes, reading task counts from `tasks` and GPU utilization from `gpu`.
    pub(crate) fn scaler(
        &self,
        queues: impl IntoIterator<Item = (Tier, Lanes<Arc<dyn Queue>>)>,
        tasks: Arc<dyn ServiceTasks>,
        gpu: Arc<dyn GpuUtilization>,
        metrics: Emf,
    ) -> Scaler {
        let tiers = queues
            .into_iter()
            .map(|(tier, lanes)| {
                let (service, policy, fallback) = self.tiers.get(tier).clone();
                ScaledTier { tier, service, lanes, policy, fallback }
            })
            .collect();
        Scaler::new(tiers, tasks, gpu, metrics)
    }
}
