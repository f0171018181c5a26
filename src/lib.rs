//! gpuinfer: an asynchronous two-tier GPU inference pipeline for AWS, in one binary.
//!
//! Layout:
//! - `cli`, `cmd::*`: the command line; one module per subcommand (flags → checked config → `run`), shared flag
//!   groups in `cmd::args`, the client behind `submit` and `get` in `cmd::client`
//! - `vocabulary`: `Tier`, `Priority`, `PerTier`, `Lanes` (imports nothing of the crate)
//! - `request`: the request contract and its validation (router and worker); `request_id`: ids kept as sent
//! - `outcome`: result and error documents
//! - `routing`: tier heuristics and the classifier call; `classifier`: the OpenAI-compatible classifier
//! - `openai`: the OpenAI-compatible Files, Uploads, Batches and Models API under /v1; `batch_line`: a batch line
//!   on the queue (its request id, the mark a worker leaves when it ends); `object_io`: whole-object reads and writes
//! - `router`: the HTTP API; `acceptance`: its record of accepted ids (retry or reuse);
//!   `body_budget`: the memory request bodies may hold at once; `worker`: lease → infer → store → delete
//! - `adaptive_limit`: the worker's in-flight limit, from `engine_load` (the engine's own gauges); `slots`: its
//!   resizable slots; `preemption`: the slot a high-priority request may take from a young normal one;
//!   `saturation_report`: its saturation (in flight ÷ limit), published for the scaler
//! - `http_server`: the local HTTP server (header, idle and body timeouts, connection cap, bounded shutdown);
//!   `http_refusals`: JSON bodies for the refusals hyper makes itself
//! - `lanes`: priority lanes (high and normal queue per tier), their share of free slots, the lane receiver;
//!   `shared_lane`: a high lane without a queue of its own
//! - `webhook`: signed result callbacks; `outbound`: where callbacks may go (URL and address rules)
//! - `ports`: the traits the core uses (Queue, ResultStore, ObjectStore, Engine, Classifier, ServiceTasks,
//!   GpuUtilization)
//! - `scaler`: the per-tier scaling decision and the tick that reads the ports and publishes it
//! - `simulate`: the discrete-event simulation of the seed's scaling policy against ours
//! - `local`: embedded backends (SQLite queues, result files, a fixed fleet); `engine`: OpenAI-compatible client;
//!   `engine_simulator`: a GPU-like OpenAI-compatible engine for tests and benchmarks (`engine-double`)
//! - `aws`: SQS, S3, Bedrock, ECS, CloudWatch adapters; `deletes`: SQS deletes coalesced into batch calls;
//!   `fetch`: parallel model download from S3
//! - `xid`: synthetic XIDs through the host's DCGM (dcgmi command lines, checks, the shell-out)
//! - `error_chain`: an error and its causes on one line
//! - `metrics`: metric names and EMF lines; `telemetry`: logging; `shutdown`: signals

pub mod acceptance;
pub mod adaptive_limit;
pub mod aws;
pub mod batch_line;
pub mod body_budget;
pub mod classifier;
pub mod cli;
pub mod cmd;
pub mod deletes;
pub mod engine;
pub mod engine_load;
pub mod engine_simulator;
pub mod error_chain;
pub mod fetch;
pub mod http_refusals;
pub mod http_server;
pub mod lanes;
pub mod local;
pub mod metrics;
pub mod object_io;
pub mod openai;
pub mod outbound;
pub mod outcome;
pub mod ports;
pub mod preemption;
pub mod request;
pub mod request_id;
pub mod router;
pub mod routing;
pub mod saturation_report;
pub mod scaler;
pub mod shared_lane;
pub mod shutdown;
pub mod simulate;
pub mod slots;
pub mod telemetry;
pub mod vocabulary;
pub mod webhook;
pub mod worker;
pub mod xid;
