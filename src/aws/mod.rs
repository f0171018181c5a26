//! AWS adapters (SQS, S3, Bedrock, ECS, CloudWatch, ECS metadata, Secrets Manager) and the one place SDK configuration
//! is loaded.

pub(crate) mod bedrock;
pub(crate) mod cloudwatch;
pub(crate) mod ecs;
pub(crate) mod ecs_metadata;
pub(crate) mod model_download;
pub(crate) mod s3;
pub(crate) mod s3_objects;
mod sdk;
pub(crate) mod secrets_manager;
pub(crate) mod sqs;
pub(crate) mod sqs_deletes;
pub(crate) mod sqs_results;

pub use sdk::sdk_config;
