//! What every answer of the API must look like, whatever was asked: shared by the property tests and the
//! cargo-fuzz targets (fuzz/), which include this file.

use axum::http::StatusCode;
use serde_json::Value;

/// Panics unless the answer is one the API promises: 202 accepted, 200 health or result, 404 pending,
/// or a 4xx with `{"error": "<field>: <what is wrong>"}`; never a 5xx while the backends work.
pub(crate) fn assert_clear_answer(status: StatusCode, body: &Value) {
    match status.as_u16() {
        202 => assert!(body["requestId"].is_string() && body["tier"].is_string(), "202 {body}"),
        200 => assert!(body.is_object(), "200 {body}"),
        404 if body["status"] == "pending" => assert!(body["requestId"].is_string(), "404 {body}"),
        400..=499 => {
            let message = body["error"].as_str().unwrap_or_else(|| panic!("{status} without an error message: {body}"));
            let (field, problem) =
                message.split_once(": ").unwrap_or_else(|| panic!("{status} {message:?} names no field"));
            assert!(!field.is_empty() && !problem.trim().is_empty(), "{status} {message:?}");
        }
        _ => panic!("unexpected answer {status} {body}"),
    }
}
