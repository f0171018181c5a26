//! GET /v1/models: the models a Batch API line may name (`MODEL_TIERS`, and the tier names `small` and `large`).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::router::state::AppState;

/// GET /v1/models: the models lines may name, in OpenAI's list shape.
pub(crate) async fn list(State(state): State<Arc<AppState>>) -> Json<Value> {
    let data: Vec<Value> = state
        .openai
        .models
        .names()
        .into_iter()
        .map(|(name, tier)| json!({ "id": name, "object": "model", "created": 0, "owned_by": format!("gpuinfer-{tier}") }))
        .collect();
    Json(json!({ "object": "list", "data": data }))
}
