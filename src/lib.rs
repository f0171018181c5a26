//! gpuinfer: an asynchronous two-tier GPU inference pipeline for AWS, in one binary. The modules of `src/`, what each
//! holds and which may import which: docs/architecture.md. Every module is private; this file is the library's face:
//! it re-exports what the binary (`main.rs`), the test-only binaries (`src/bin/`), the tests, the benchmarks and the
//! fuzz targets use, and nothing else, so `unreachable_pub` (Cargo.toml) and the dead-code lint see the whole crate.

// The inference container's build (no `all-commands`) compiles every module but runs four commands: what only the
// others use is dead or unreachable there by design. The full build, which clippy also checks, keeps these lints.
#![cfg_attr(not(feature = "all-commands"), allow(dead_code, unused_imports, unreachable_pub))]

mod aws;
mod callbacks;
mod classifier;
mod cli;
mod cmd;
mod contract;
mod engine;
mod http;
mod infra;
mod local;
mod ports;
mod router;
mod scaler;
mod worker;

// The binary: its flags and its commands.
pub use cli::{COMMAND_ENV, CONTAINER_COMMANDS, Cli, Command, arguments, run};
pub use cmd::router::lambda_event;
pub use cmd::scaler::{ScheduledEvent, handle_scheduled_event};
pub use cmd::worker::build as build_worker;

// The contract: requests, their ids, tiers and the documents that end them.
pub use contract::batch_line::BatchLine;
pub use contract::engine_load::EngineLoad;
pub use contract::outcome::{ErrorCode, ResultDocument, Status, canceled as canceled_document};
pub use contract::request::{
    FIELDS as REQUEST_FIELDS, InferenceRequest, Input, Intake, MAX_REQUEST_BYTES, MAX_TOKENS_LIMIT, RequestError,
};
pub use contract::request_id::RequestId;
pub use contract::tier::{Lanes, PerTier, Priority, Tier};

// The ports, and the helpers every object store shares.
pub use ports::object_io::{one_chunk, write_json};
pub use ports::{
    CapacityControl, Classifier, ClassifyError, Engine, EngineError, FleetError, GpuUtilization, KeyStore,
    KeyStoreError, MAX_MESSAGES_PER_CALL, Message, ObjectStore, PutOutcome, Queue, QueueCounts, QueueError,
    ResultStore, Service, ServiceTasks, StoreError, TaskAges, TaskCounts,
};

// The adapters: AWS, one machine, the engine.
pub use aws::bedrock::BedrockClassifier;
pub use aws::cloudwatch::{SaturationOrGpu, newest as newest_datapoint};
pub use aws::ecs::EcsServices;
pub use aws::model_download::{FetchConfig, FetchError, fetch as fetch_model};
pub use aws::s3::{S3Location, S3Store, client as s3_client};
pub use aws::sdk_config;
pub use aws::sqs::SqsQueue;
pub use aws::sqs_deletes::{DeleteMany, SharedDeletes};
pub use engine::client::{EngineClient, EngineConfig, base_url as engine_base_url};
pub use engine::load::parse as parse_engine_load;
pub use local::LocalBackends;
pub use local::queue::LocalQueue;
pub use local::store::FileStore;

// The core: the API, the worker, the scaler and what they send.
pub use callbacks::outbound::{OutboundPolicy, Refusal};
pub use callbacks::webhook::{Callback, DeliveryError, WebhookConfig, WebhookSecret, Webhooks};
pub use router::api_keys::{
    ApiKeys, KeyDocument, KeySource, MAX_DOCUMENT_BYTES as MAX_KEY_DOCUMENT_BYTES, StoredKeys, digest as key_digest,
};
pub use router::app;
pub use router::body_budget::BodyBudget;
pub use router::openai::LAMBDA_DOWNLOAD_LIMIT;
pub use router::openai::expiry::{Kept, PREFIXES as KEPT_PREFIXES};
pub use router::openai::files::{FileObject, PAGE_BYTES as FILE_PAGE_BYTES, content_key, record_key};
pub use router::openai::ids::new as new_object_id;
pub use router::openai::upkeep::upkeep;
pub use router::routing::{Reason, RoutingConfig, route};
pub use router::state::{AppState, CallbackAcceptance, Dispatch};
pub use scaler::fallback::Fallback;
pub use scaler::{
    DEFAULT_BACKLOG_PER_TASK, DEFAULT_UTILIZATION_TARGET, Readings, ScaledTier, Scaler, ScalingPolicy, decide,
};
pub use worker::{HealthSettings, LeaseSettings, Stopped, Worker, WorkerConfig};

// Faces of their own, whole: the metric names, the scaling simulator, the XID tooling and the engine simulator.
pub use cmd::inject_xid::xid;
#[cfg(feature = "test-support")]
pub use engine::simulator;
pub use infra::metrics;
pub use scaler::simulate;
