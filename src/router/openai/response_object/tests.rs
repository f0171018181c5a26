//! The Response object at each point of a response's life.

use serde_json::Map;

use super::*;
use crate::contract::request_id::RequestId;

fn record() -> ResponseRecord {
    ResponseRecord {
        id: "resp_0123".into(),
        created_at: 1_700_000_000,
        model: "small".into(),
        instructions: Some("Be brief.".into()),
        input: vec![],
        metadata: Map::new(),
        max_output_tokens: 16,
        temperature: 0.7,
        top_p: 1.0,
        service_tier: "default".into(),
        background: true,
        owner: Some("team-a".into()),
    }
}

fn success(finish_reason: &str) -> Vec<u8> {
    json!({"requestId": RequestId::new_v4(), "status": "success", "timestamp": "2026-01-01T00:00:00Z",
        "result": {"text": "Hello", "finishReason": finish_reason,
                   "usage": {"promptTokens": 3, "completionTokens": 2, "totalTokens": 5}}})
    .to_string()
    .into_bytes()
}

#[test]
fn without_a_document_a_response_is_queued() {
    let object = response_object(&record(), None);
    assert_eq!((object["status"].as_str(), object["object"].as_str()), (Some("queued"), Some("response")));
    assert_eq!(object["output"], json!([]));
    assert!(object["usage"].is_null() && object["error"].is_null());
    assert_eq!((object["background"].as_bool(), object["store"].as_bool()), (Some(true), Some(true)));
    assert_eq!(object["instructions"], "Be brief.");
}

#[test]
fn a_completed_response_carries_its_text_and_usage() {
    let object = response_object(&record(), Some(&success("stop")));
    assert_eq!(object["status"], "completed");
    assert_eq!(
        object["output"][0]["content"][0],
        json!({"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []})
    );
    assert_eq!(object["output"][0]["role"], "assistant");
    assert_eq!(
        (object["usage"]["input_tokens"].as_u64(), object["usage"]["output_tokens"].as_u64()),
        (Some(3), Some(2))
    );
    assert_eq!(object["usage"]["total_tokens"], 5);
    assert_eq!(object["completed_at"], 1_767_225_600);
    assert!(object["incomplete_details"].is_null());
}

#[test]
fn a_response_cut_at_its_token_limit_is_incomplete() {
    let object = response_object(&record(), Some(&success("length")));
    assert_eq!(object["status"], "incomplete");
    assert_eq!(object["incomplete_details"], json!({"reason": "max_output_tokens"}));
    assert_eq!(object["output"][0]["status"], "incomplete");
    assert!(object["completed_at"].is_null());
}

#[test]
fn failures_and_cancels() {
    let id = RequestId::new_v4();
    let canceled = crate::contract::outcome::canceled(id).to_string().into_bytes();
    assert_eq!(response_object(&record(), Some(&canceled))["status"], "cancelled");
    let failed = json!({"requestId": id, "status": "error",
        "error": {"code": "engine_rejected", "message": "prompt longer than the context"}});
    let object = response_object(&record(), Some(failed.to_string().as_bytes()));
    assert_eq!(object["status"], "failed");
    assert_eq!(
        object["error"],
        json!({"code": "invalid_prompt", "message": "engine_rejected: prompt longer than the context"})
    );
}
