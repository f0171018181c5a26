//! The worker's settings: `WorkerConfig`, its defaults (which the command line reads too), the retry back-off.

use std::time::Duration;

use crate::contract::tier::Tier;
use crate::ports::{DEFAULT_CLUSTER_NAME, DEFAULT_MAX_RECEIVE_COUNT, DEFAULT_SERVICE_NAME, Service};

/// The ceiling of the adaptive in-flight limit unless configured: above the generation slots of any one engine it
/// serves, with room for the queue the limit keeps inside it (`adaptive_limit`). vLLM's OpenAI server runs at most
/// 256 sequences at once by default on a GPU under 70 GiB (the L40S of both tiers), 1024 on larger ones.
pub(crate) const DEFAULT_CONCURRENCY: u32 = 2048;
/// Long-poll wait of one receive unless configured: SQS's most.
pub(crate) const DEFAULT_WAIT_TIME_SECONDS: u64 = crate::ports::MAX_RECEIVE_WAIT.as_secs();
/// How long a received message stays hidden unless configured, renewed every third of it while its request runs:
/// work held by a worker that dies without a word (an instance reclaimed, kill -9) runs again this soon, not after
/// the queue's own visibility timeout (300 s, 600 s).
pub(crate) const DEFAULT_LEASE_SECONDS: u64 = 30;
/// First retry delay after a transient failure unless configured.
pub(crate) const DEFAULT_RETRY_BASE_SECONDS: f64 = 2.0;
/// How long the engine may fail its health probes unless configured.
pub(crate) const DEFAULT_ENGINE_LOSS_WINDOW_SECONDS: u64 = 30;
/// How often a running request looks for a cancel unless configured.
pub(crate) const DEFAULT_CANCEL_POLL_SECONDS: f64 = 5.0;
/// How long a stopping worker finishes requests in flight unless configured (the template: 100 of a 120 s stop).
pub(crate) const DEFAULT_DRAIN_TIMEOUT_SECONDS: u64 = 100;
/// The task identifier written into results when the ECS metadata endpoint gives none.
pub(crate) const DEFAULT_TASK_ARN: &str = "local";

/// How often the engine's health is probed, before receiving and all along.
pub(crate) const HEALTH_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub tier: Tier,
    /// Requests in flight at most: the ceiling of the adaptive limit, which follows the engine's free slots.
    /// Never receives more messages than free slots.
    pub concurrency: usize,
    /// Whether the in-flight limit adapts to the engine's load (else it stays at `concurrency`).
    pub adaptive: bool,
    /// Long-poll wait of one receive.
    pub wait_time: Duration,
    pub lease: LeaseSettings,
    pub health: HealthSettings,
    /// How often a running request looks for a document stored meanwhile (a cancel): then its engine call is
    /// dropped, which aborts the generation in vLLM (the local llama.cpp engine finishes it anyway).
    pub cancel_poll: Duration,
    /// How long a stopping worker keeps finishing the requests in flight; then it gives every unfinished
    /// message back (visibility 0), so a stop timeout shorter than a long generation costs no visibility wait.
    pub drain_timeout: Duration,
    pub task: TaskIdentity,
}

/// The ECS task a worker runs as.
#[derive(Debug, Clone)]
pub struct TaskIdentity {
    /// Written into every result document (`processing.taskArn`).
    pub arn: String,
    /// The ECS service the task belongs to: the dimensions its saturation is published under (`saturation_report`).
    pub service: Service,
}

/// A received message's life on the queue: how long it stays hidden, its attempts, the back-off between them.
#[derive(Debug, Clone, Copy)]
pub struct LeaseSettings {
    /// Visibility asked on each receive and renewed by the heartbeat, every third of it, while a request runs.
    pub visibility_timeout: Duration,
    /// The queue's maxReceiveCount: the attempt with this receive count is the last.
    pub max_receive_count: u32,
    /// Back-off after a transient failure: base × 2^(attempt−1), at most the visibility timeout.
    pub retry_base: Duration,
}

/// How the engine's health is watched.
#[derive(Debug, Clone, Copy)]
pub struct HealthSettings {
    /// How often to probe the engine's health: before starting, and all along while running.
    pub interval: Duration,
    /// How long the engine may fail its health probes before the worker gives up on it (GPU lost).
    pub loss_window: Duration,
}

impl WorkerConfig {
    pub fn new(tier: Tier) -> Self {
        WorkerConfig {
            tier,
            concurrency: DEFAULT_CONCURRENCY as usize,
            adaptive: true,
            wait_time: Duration::from_secs(DEFAULT_WAIT_TIME_SECONDS),
            lease: LeaseSettings::default(),
            health: HealthSettings::default(),
            cancel_poll: Duration::from_secs_f64(DEFAULT_CANCEL_POLL_SECONDS),
            drain_timeout: Duration::from_secs(DEFAULT_DRAIN_TIMEOUT_SECONDS),
            task: TaskIdentity {
                arn: DEFAULT_TASK_ARN.into(),
                service: Service::of_tier(DEFAULT_CLUSTER_NAME, DEFAULT_SERVICE_NAME, tier),
            },
        }
    }
}

impl Default for LeaseSettings {
    /// The short lease, the queue's receive count, the back-off base.
    fn default() -> Self {
        LeaseSettings {
            visibility_timeout: Duration::from_secs(DEFAULT_LEASE_SECONDS),
            max_receive_count: DEFAULT_MAX_RECEIVE_COUNT,
            retry_base: Duration::from_secs_f64(DEFAULT_RETRY_BASE_SECONDS),
        }
    }
}

impl LeaseSettings {
    /// Delay before a message that failed on attempt `receive_count` is seen again.
    pub fn retry_delay(&self, receive_count: u32) -> Duration {
        let exponent = receive_count.saturating_sub(1).min(16);
        self.retry_base.saturating_mul(1 << exponent).min(self.visibility_timeout)
    }
}

impl Default for HealthSettings {
    fn default() -> Self {
        HealthSettings {
            interval: HEALTH_INTERVAL,
            loss_window: Duration::from_secs(DEFAULT_ENGINE_LOSS_WINDOW_SECONDS),
        }
    }
}
