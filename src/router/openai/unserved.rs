//! OpenAI endpoints gpuinfer does not serve, each refused in OpenAI's shape with what would serve the call: the
//! synchronous completions (the pipeline is asynchronous: Batch or Responses carry the same bodies) and embeddings
//! (no tier runs an embedding model).

use axum::http::StatusCode;

use super::error::OpenAiError;

/// POST /v1/chat/completions and /v1/completions: the same body runs as a Batch line or a Response.
pub(crate) async fn completions() -> OpenAiError {
    OpenAiError::refused(
        StatusCode::NOT_FOUND,
        "gpuinfer answers asynchronously: send this body as a line of a batch (POST /v1/files, then POST /v1/batches \
         with this endpoint), as a response (POST /v1/responses, background or waited for), or as POST /infer",
    )
}

/// POST /v1/embeddings: every tier runs a generative model.
pub(crate) async fn embeddings() -> OpenAiError {
    OpenAiError::refused(
        StatusCode::NOT_FOUND,
        "embeddings are not served: each tier runs a generative model; an engine serving an embedding model (vLLM \
         runs them with its pooling runner) would, which gpuinfer does not start",
    )
}
