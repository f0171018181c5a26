//! Where this process runs: as an AWS Lambda function, or on a machine of its own.

/// Whether this process runs as an AWS Lambda function (the runtime API is set), not on a machine of its own.
pub(crate) fn running_on_lambda() -> bool {
    std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some()
}
