//! AWS adapters (SQS, S3, Bedrock, ECS, CloudWatch, ECS metadata, Secrets Manager) and the one place SDK configuration
//! is loaded.

pub mod bedrock;
pub mod cloudwatch;
pub mod ecs;
pub(crate) mod ecs_metadata;
pub mod model_download;
pub mod s3;
pub(crate) mod s3_objects;
mod sdk;
pub mod secrets_manager;
pub mod sqs;
pub mod sqs_deletes;
pub(crate) mod sqs_results;

pub use sdk::sdk_config;
