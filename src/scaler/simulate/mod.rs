//! The scaling simulator behind `gpuinfer simulate`: the AWS sample's policy and ours on the same traffic, in
//! simulated time, so their cost, losses and latency can be compared before anything is deployed.
//!
//! Layout:
//! - `time`: simulated time and its units; `tier_model`: one tier's environment and scaling settings
//! - `trace`: request arrivals from a seeded generator (Poisson, on/off bursts, a daily cycle) or a CSV file
//! - `autoscaling`: CloudWatch alarms, step scaling policies and the scalable target, by AWS's documented rules
//! - `policy`: the two policies under comparison: their metric and their alarms
//! - `cold_start`: a task's cold start by phase; `warm_window`: hours a tier keeps a task; `capacity`: On-Demand or
//!   Spot; `spot`: Spot, priced and compared
//! - `event_loop`: one tier under one policy: queue, tasks with cold starts, the scaler's ticks, our wake on arrival
//! - `report`: the side-by-side table; `lone_request`: one request on an idle tier, phase by phase;
//!   `trade`: our policy's cost and latency by idle window and with a warm window; `plot`: tasks and backlog as SVG

pub mod autoscaling;
pub mod capacity;
pub mod cold_start;
pub mod event_loop;
pub mod lone_request;
pub mod plot;
pub mod policy;
pub mod report;
pub mod spot;
mod tier_model;
mod time;
pub mod trace;
pub mod trade;
pub mod warm_window;

pub use tier_model::TierModel;
pub(crate) use time::seconds;
pub use time::{HOUR, MINUTE, Millis, SECOND};
