//! The worker: lease a message from a tier's lanes → heartbeat → infer → store the result → delete, then the
//! callback; retry policy, deadlines, cancels, drain, engine loss. This file is its face: each job is a module of its
//! own (`assembly`, `run`, `receive_loop`, `request_run`, `lease`, `engine_watch`, `limit_loop`, `finish`,
//! `endings`).

pub(crate) mod adaptive_limit;
mod assembly;
mod cancel_watch;
pub(crate) mod cold_start;
mod config;
mod endings;
mod engine_watch;
mod finish;
pub(crate) mod lanes;
mod lease;
mod limit_loop;
mod pace;
pub(crate) mod preemption;
mod receive_loop;
mod request_run;
mod run;
pub(crate) mod saturation_report;
pub(crate) mod shared_lane;
pub(crate) mod slots;

pub use assembly::{Stopped, Worker};
pub(crate) use config::TaskIdentity;
pub(crate) use config::{
    DEFAULT_CANCEL_POLL_SECONDS, DEFAULT_CONCURRENCY, DEFAULT_DRAIN_TIMEOUT_SECONDS,
    DEFAULT_ENGINE_LOSS_WINDOW_SECONDS, DEFAULT_LEASE_SECONDS, DEFAULT_RETRY_BASE_SECONDS, DEFAULT_TASK_ARN,
    DEFAULT_WAIT_TIME_SECONDS, HEALTH_INTERVAL,
};
pub use config::{HealthSettings, LeaseSettings, WorkerConfig};
