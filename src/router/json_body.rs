//! Reading a JSON request body: its content type, its size limit, and the server's body budget as it arrives.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, header};
use http_body_util::BodyExt;

use crate::router::api_error::ApiError;
use crate::router::body_budget::Held;
use crate::router::state::AppState;

/// The whole body after a content-type check, refused with 413 as soon as it is known to exceed `limit`: at
/// once when Content-Length says so, else when the bytes read pass it. An empty body gets its own message.
/// The bytes are held against the server's body budget as they arrive, until the returned `Held` is dropped; a
/// body the budget cannot take now is refused with 503 (and Retry-After) as it arrives, so bodies in flight never
/// hold more memory than the budget.
pub(super) async fn read_body(
    state: &AppState,
    headers: &HeaderMap,
    mut body: Body,
    limit: usize,
) -> Result<(Bytes, Held), ApiError> {
    check_content_type(headers)?;
    let too_large =
        || ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, format!("body: larger than the {limit} byte limit"));
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(too_large());
    }
    let busy = || {
        let mib = state.bodies.total() / (1024 * 1024);
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("body: the server holds as many request bodies as it may ({mib} MiB); retry later"),
        )
    };
    // Held against the budget as the bytes arrive, not as declared: a body announced and never sent holds none.
    let mut held = state.bodies.none();
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let unreadable = |error| ApiError::new(StatusCode::BAD_REQUEST, format!("body: could not be read ({error})"));
        let Ok(data) = frame.map_err(unreadable)?.into_data() else { continue };
        if bytes.len() + data.len() > limit {
            return Err(too_large());
        }
        if !state.bodies.take(&mut held, data.len()) {
            return Err(busy());
        }
        bytes.extend_from_slice(&data);
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "body: empty; send a JSON request object"));
    }
    Ok((Bytes::from(bytes), held))
}

/// The refusal of a Content-Type whose `charset` is not UTF-8 (RFC 8259 §8.1: JSON exchanged between systems is
/// UTF-8), or None: such a body is refused rather than read as UTF-8, here and under `/v1`.
pub(crate) fn foreign_charset(headers: &HeaderMap) -> Option<String> {
    let text = headers.get(header::CONTENT_TYPE)?.to_str().unwrap_or_default().to_ascii_lowercase();
    let charset = text.split(';').map(str::trim).filter_map(|p| p.strip_prefix("charset=")).next()?;
    let charset = charset.trim_matches('"');
    (!matches!(charset, "utf-8" | "utf8"))
        .then(|| format!("content-type: charset {charset:?} is not read; send the JSON in UTF-8"))
}

/// JSON bodies only, in UTF-8 (RFC 8259 §8.1: JSON exchanged between systems is UTF-8; a `charset` that names
/// another is refused rather than read as UTF-8). A missing Content-Type, or the form type `curl -d` sends without
/// `-H`, is read as JSON.
fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else { return Ok(()) };
    if let Some(refused) = foreign_charset(headers) {
        return Err(ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, refused));
    }
    let text = value.to_str().unwrap_or_default().to_ascii_lowercase();
    let media = text.split(';').next().unwrap_or_default().trim();
    if media == "application/json" || media == "application/x-www-form-urlencoded" || media.ends_with("+json") {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("content-type: must be application/json, got {media:?}"),
        ))
    }
}
