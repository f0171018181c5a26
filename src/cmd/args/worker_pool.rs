//! The flag groups of a worker pool: its tuning, how its callbacks are signed and sent, which callback URLs are
//! accepted; shared by `worker`, `router` and `dev`.

use std::time::Duration;

use anyhow::bail;

use crate::callbacks::outbound::OutboundPolicy;
use crate::callbacks::webhook::{self, WebhookConfig, WebhookSecret};
use crate::contract::tier::Tier;
use crate::engine::client::{DEFAULT_REQUEST_TIMEOUT_SECONDS, EngineConfig};
use crate::ports::DEFAULT_MAX_RECEIVE_COUNT;
use crate::worker::{
    DEFAULT_CANCEL_POLL_SECONDS, DEFAULT_CONCURRENCY, DEFAULT_DRAIN_TIMEOUT_SECONDS,
    DEFAULT_ENGINE_LOSS_WINDOW_SECONDS, DEFAULT_LEASE_SECONDS, DEFAULT_RETRY_BASE_SECONDS, DEFAULT_TASK_ARN,
    DEFAULT_WAIT_TIME_SECONDS, HEALTH_INTERVAL, HealthSettings, LeaseSettings, TaskIdentity, WorkerConfig,
};

use crate::cmd::args::scaling::ServiceArgs;

/// Which callback URLs are accepted; shared by `router`, `worker` and `dev`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CallbackPolicyArgs {
    /// Accept http:// callback URLs (local development); https only otherwise.
    #[arg(long, env = "ALLOW_HTTP_CALLBACKS")]
    pub(crate) allow_http_callbacks: bool,
    /// Let callbacks reach loopback and private-network addresses (local development); link-local and
    /// instance-metadata addresses stay refused.
    #[arg(long, env = "ALLOW_PRIVATE_CALLBACKS")]
    pub(crate) allow_private_callbacks: bool,
}

impl CallbackPolicyArgs {
    pub(crate) fn policy(&self) -> OutboundPolicy {
        OutboundPolicy { allow_http: self.allow_http_callbacks, allow_private: self.allow_private_callbacks }
    }
}

/// How a worker pool behaves; shared by `worker` and `dev`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct TuningArgs {
    /// Requests in flight at most. The worker adapts its in-flight limit below this ceiling to the engine's free
    /// generation slots (from its /metrics, else from latency); with --fixed-concurrency it keeps exactly this many.
    #[arg(long, env = "WORKER_CONCURRENCY", default_value_t = DEFAULT_CONCURRENCY, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub concurrency: u32,
    /// Keep --concurrency requests in flight whatever the engine's load, instead of adapting to it.
    #[arg(long, env = "WORKER_FIXED_CONCURRENCY")]
    pub(crate) fixed_concurrency: bool,
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// Long-poll wait of one receive, in seconds: from 1 to SQS's most; 0 would poll an idle queue in a tight loop.
    #[arg(long, env = "WAIT_TIME_SECONDS", default_value_t = DEFAULT_WAIT_TIME_SECONDS, value_parser = clap::value_parser!(u64).range(1..=crate::ports::MAX_RECEIVE_WAIT.as_secs()))]
    pub(crate) wait_time_seconds: u64,
    /// Longest single generation, in seconds, before it counts as a transient failure.
    #[arg(long, env = "ENGINE_TIMEOUT_SECONDS", default_value_t = DEFAULT_REQUEST_TIMEOUT_SECONDS)]
    pub(crate) engine_timeout_seconds: u64,
    /// Seconds the engine may fail its health probe before the worker gives its messages back and exits non-zero.
    #[arg(long, env = "ENGINE_LOSS_WINDOW_SECONDS", default_value_t = DEFAULT_ENGINE_LOSS_WINDOW_SECONDS, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) engine_loss_window_seconds: u64,
    /// Seconds between two reads of the cancel mark while requests run (one read for all of them; when it changed,
    /// each running request looks for its document, and a cancel aborts its engine call).
    #[arg(long, env = "CANCEL_POLL_SECONDS", default_value_t = DEFAULT_CANCEL_POLL_SECONDS)]
    pub(crate) cancel_poll_seconds: f64,
    /// Seconds a stopping worker (SIGTERM) keeps finishing requests in flight before it gives the unfinished
    /// ones back to the queue; keep it below the container's stop timeout (the template: 100 of 120).
    #[arg(long, env = "DRAIN_TIMEOUT_SECONDS", default_value_t = DEFAULT_DRAIN_TIMEOUT_SECONDS)]
    pub(crate) drain_timeout_seconds: u64,
    /// Task identifier written into each result when the ECS metadata endpoint does not give one.
    #[arg(long, env = "ECS_TASK_ARN", default_value = DEFAULT_TASK_ARN)]
    pub task_arn: String,
}

/// How long a received message stays hidden, how often it is tried, the back-off between tries.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct LeaseArgs {
    /// Seconds a received message stays invisible (asked on every receive, whatever the queue's own visibility
    /// timeout), renewed every third of it while its request runs: a worker that dies without a word holds its
    /// messages this long at most.
    #[arg(long, env = "VISIBILITY_TIMEOUT", default_value_t = DEFAULT_LEASE_SECONDS, value_parser = clap::value_parser!(u64).range(3..=43_200))]
    pub visibility_timeout: u64,
    /// The queue's maxReceiveCount: the last attempt writes an error result instead of retrying.
    #[arg(long, env = "MAX_RECEIVE_COUNT", default_value_t = DEFAULT_MAX_RECEIVE_COUNT, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_receive_count: u32,
    /// First retry delay in seconds after a transient failure; doubles with each attempt.
    #[arg(long, env = "RETRY_BASE_SECONDS", default_value_t = DEFAULT_RETRY_BASE_SECONDS)]
    pub(crate) retry_base_seconds: f64,
}

impl LeaseArgs {
    fn settings(&self) -> LeaseSettings {
        LeaseSettings {
            visibility_timeout: Duration::from_secs(self.visibility_timeout),
            max_receive_count: self.max_receive_count,
            retry_base: Duration::from_secs_f64(self.retry_base_seconds),
        }
    }
}

/// How result callbacks are signed and sent; shared by `worker` and `dev`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WebhookArgs {
    /// Key that signs result callbacks, Standard Webhooks style: base64, `whsec_` prefix accepted
    /// [default: none; callbacks are not sent].
    #[arg(long, env = "WEBHOOK_SECRET", hide_env_values = true)]
    pub(crate) webhook_secret: Option<WebhookSecret>,
    /// Seconds a callback is retried (back-off from 1 s to 60 s) before it is given up.
    #[arg(long, env = "WEBHOOK_RETRY_SECONDS", default_value_t = webhook::DEFAULT_RETRY_SECONDS)]
    pub(crate) webhook_retry_seconds: u64,
    #[command(flatten)]
    pub policy: CallbackPolicyArgs,
}

impl WebhookArgs {
    pub(crate) fn config(&self) -> WebhookConfig {
        WebhookConfig {
            secret: self.webhook_secret.clone(),
            policy: self.policy.policy(),
            retry_for: Duration::from_secs(self.webhook_retry_seconds),
            attempt_timeout: webhook::ATTEMPT_TIMEOUT,
        }
    }
}

impl TuningArgs {
    /// The worker settings of `tier`, whose ECS service is named by `service`.
    pub(crate) fn worker_config(&self, tier: Tier, service: &ServiceArgs) -> anyhow::Result<WorkerConfig> {
        if !(self.lease.retry_base_seconds.is_finite() && self.lease.retry_base_seconds >= 0.0) {
            bail!("--retry-base-seconds must be a non-negative number of seconds");
        }
        if !(self.cancel_poll_seconds.is_finite() && self.cancel_poll_seconds >= 0.05) {
            bail!("--cancel-poll-seconds must be at least 0.05 seconds");
        }
        Ok(WorkerConfig {
            tier,
            concurrency: self.concurrency as usize,
            adaptive: !self.fixed_concurrency,
            wait_time: Duration::from_secs(self.wait_time_seconds),
            lease: self.lease.settings(),
            health: HealthSettings {
                interval: HEALTH_INTERVAL,
                loss_window: Duration::from_secs(self.engine_loss_window_seconds),
            },
            cancel_poll: Duration::from_secs_f64(self.cancel_poll_seconds),
            drain_timeout: Duration::from_secs(self.drain_timeout_seconds),
            task: TaskIdentity { arn: self.task_arn.clone(), service: service.service(tier) },
        })
    }

    pub(crate) fn engine_config(&self, base_url: &str, model: Option<String>) -> EngineConfig {
        EngineConfig {
            base_url: base_url.to_owned(),
            model,
            request_timeout: Duration::from_secs(self.engine_timeout_seconds),
        }
    }
}
