//! What every API request passes first: the API-key check (which names the caller), and the framework's own
//! refusals answered in the API's JSON shape.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::contract::error_body;
use crate::router::api_error::ApiError;
use crate::router::api_keys::Caller;
use crate::router::state::AppState;

/// Largest framework refusal text turned into JSON (they are a line or two).
const REFUSAL_TEXT_BYTES: usize = 16 * 1024;

/// Answers the framework's own refusals (a query, path or multipart body it cannot read, a body over a route's
/// limit: text/plain from axum) in the API's JSON shape, OpenAI's under /v1.
pub(super) async fn refusals_as_json(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let openai = request.uri().path().starts_with("/v1/");
    let response = next.run(request).await;
    let status = response.status();
    let content_type = response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    if !(status.is_client_error() || status.is_server_error()) || !content_type.is_some_and(|t| t.starts_with("text/"))
    {
        return response;
    }
    let text = match axum::body::to_bytes(response.into_body(), REFUSAL_TEXT_BYTES).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_owned(),
        Err(_) => status.canonical_reason().unwrap_or("refused").to_owned(),
    };
    refusal(openai, status, text)
}

/// A refusal in the API's JSON shape: OpenAI's error object under /v1, `{"error": "..."}` elsewhere.
fn refusal(openai: bool, status: StatusCode, text: String) -> Response {
    if openai {
        crate::router::openai::error::OpenAiError::refused(status, text).into_response()
    } else {
        ApiError::new(status, text).into_response()
    }
}

/// Refuses a request without one of the configured API keys (401 in OpenAI's error shape, which its clients read)
/// before anything of it is read, on the routes its key source guards; and every one of those when the keys cannot
/// be read (503), so none is let through unchecked. A request it lets through carries its `Caller`, the key's
/// project.
pub(super) async fn require_api_key(
    State(state): State<Arc<AppState>>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(source) = state.openai.api_keys.as_ref().filter(|source| source.guards(request.uri().path())) else {
        request.extensions_mut().insert(Caller::default());
        return next.run(request).await;
    };
    let sent = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    // The scheme is case-insensitive (RFC 9110 §11.1): "bearer" and "BEARER" are Bearer too.
    let token = sent.and_then(|v| v.split_once(' ')).filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"));
    let project = match token.map(|(_, token)| token.trim()).filter(|token| !token.is_empty()) {
        Some(token) => source.project_of(token).await,
        None => Ok(None),
    };
    match project {
        Ok(Some(project)) => {
            request.extensions_mut().insert(Caller::of(&project));
            next.run(request).await
        }
        Ok(None) => {
            let message = format!("a valid API key is required: {}", source.what_to_send());
            let error = error_body::openai(StatusCode::UNAUTHORIZED.as_u16(), &message, None, Some("invalid_api_key"));
            (StatusCode::UNAUTHORIZED, Json(error)).into_response()
        }
        Err(error) => {
            tracing::error!(error = %error, "API keys unreadable: request refused");
            let message = "the API keys cannot be read just now: retry shortly";
            let status = StatusCode::SERVICE_UNAVAILABLE;
            let error = error_body::openai(status.as_u16(), message, None, Some("api_keys_unavailable"));
            (status, [(header::RETRY_AFTER, "1")], Json(error)).into_response()
        }
    }
}
