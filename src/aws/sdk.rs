//! The one place SDK configuration is loaded, and whether an endpoint other than AWS's own is set.

use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, SdkConfig};

/// Loads region, credentials and retries the standard way. `AWS_ENDPOINT_URL` and its
/// per-service variants (`AWS_ENDPOINT_URL_SQS`, …) point the SDK at an emulator such as moto;
/// `endpoint` overrides both (tests use it).
pub async fn sdk_config(endpoint: Option<&str>) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest()).retry_config(
        RetryConfig::standard().with_max_attempts(5).with_initial_backoff(std::time::Duration::from_millis(100)),
    );
    if let Some(endpoint) = endpoint {
        loader = loader.endpoint_url(endpoint);
    }
    loader.load().await
}

/// True when requests go to an endpoint other than AWS's own (then S3 needs path-style addressing).
pub(crate) fn endpoint_overridden(config: &SdkConfig, service_env: &str) -> bool {
    config.endpoint_url().is_some()
        || std::env::var_os("AWS_ENDPOINT_URL").is_some()
        || std::env::var_os(format!("AWS_ENDPOINT_URL_{service_env}")).is_some()
}
