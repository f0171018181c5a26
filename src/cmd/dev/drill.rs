//! `gpuinfer dev`'s drills: `POST /dev/drills/spot-interruption?tier=small` gives the tier's running engines a Spot
//! instance's two-minute notice (`EngineFleet::interrupt`), so a user sees locally what an interruption does: the
//! requests that can end within the drain finish, the others are given back at once and run on the engine that
//! replaces it. Only for engines dev starts (`--small-engine-cmd`); served beside the router on dev's listener.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::routing::post;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::cmd::dev::engine_fleet::{DrillRefused, EngineFleet};
use crate::contract::tier::Tier;

pub(crate) const SPOT_INTERRUPTION: &str = "/dev/drills/spot-interruption";

#[derive(Deserialize)]
struct Drill {
    tier: Tier,
}

/// The drill routes, over `fleet` (None: no tier's engine is started by dev, and every drill says so).
pub(crate) fn routes(fleet: Option<Arc<EngineFleet>>) -> axum::Router {
    axum::Router::new().route(SPOT_INTERRUPTION, post(spot_interruption)).with_state(fleet)
}

async fn spot_interruption(
    State(fleet): State<Option<Arc<EngineFleet>>>,
    Query(drill): Query<Drill>,
) -> (StatusCode, Json<Value>) {
    let tier = drill.tier;
    let refused = |why: String| (StatusCode::CONFLICT, Json(json!({ "error": why })));
    let outcome = fleet.as_deref().map_or(Err(DrillRefused::FixedEngine), |fleet| fleet.interrupt(tier));
    match outcome {
        Ok(engines) => (StatusCode::ACCEPTED, Json(json!({ "tier": tier, "engines": engines }))),
        Err(DrillRefused::FixedEngine) => refused(format!(
            "tier: {tier}'s engine is at a fixed URL, which dev neither started nor can stop; drills need an engine \
             dev starts (--{tier}-engine-cmd)"
        )),
        Err(DrillRefused::NoEngine) => {
            refused(format!("tier: {tier} has no engine running to interrupt; send it a request first"))
        }
    }
}
