//! What the OpenAI API does with no client asking: objects from before the project index indexed (once), batches
//! being admitted stepped on, every running batch brought up to date (finished, with its
//! event, once all its lines have ended), and every event whose attempt is due sent again. A router serving HTTP
//! runs it every few seconds (`gpuinfer dev` every second); on AWS a schedule invokes the router's function every
//! minute with an upkeep event.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::batch_admission;
use super::batch_lifecycle;
use super::batch_record;
use super::files;
use super::project_index;
use crate::ports::ObjectStore;
use crate::router::state::AppState;

/// Seconds between two upkeeps of a router serving HTTP.
pub(crate) const SERVER_PERIOD: Duration = Duration::from_secs(5);
/// Seconds between two upkeeps of `gpuinfer dev`, where a store call costs nothing.
pub(crate) const DEV_PERIOD: Duration = Duration::from_secs(1);

/// One upkeep: the batches looked at and the events attempted. Failures are logged; the next upkeep tries again.
pub async fn upkeep(state: &AppState) -> (usize, usize) {
    let Some(objects) = state.store.objects() else { return (0, 0) };
    // One listing of the running batches serves both (each batch's record is read afresh by each).
    let batches = match batch_lifecycle::running(objects).await {
        Ok(running) => {
            admit_waiting(state, objects, &running).await;
            batch_lifecycle::refresh_running(state, objects, &running).await
        }
        Err(error) => Err(error),
    };
    let batches = batches.unwrap_or_else(|error| {
        tracing::warn!(?error, "bringing running batches up to date failed; trying again at the next upkeep");
        0
    });
    let attempted = match &state.events {
        Some(events) => events.deliver_due(objects, chrono::Utc::now().timestamp()).await.unwrap_or_else(|error| {
            tracing::warn!(%error, "sending the OpenAI events due failed; trying again at the next upkeep");
            0
        }),
        None => 0,
    };
    // Last: a long first build (many objects from before the index) must not keep batches and events waiting.
    if let Err(error) = project_index::build(objects, [files::PREFIX, batch_record::PREFIX]).await {
        tracing::warn!(%error, "indexing the objects made before each project's list failed; trying again at the next upkeep");
    }
    (batches, attempted)
}

/// Steps the admission of every batch of `running` being admitted that no process holds (one whose creator stopped
/// midway, or every new one on Lambda), until `batch_admission::STEP` has passed.
async fn admit_waiting(state: &AppState, objects: &dyn ObjectStore, running: &[String]) {
    let deadline = Instant::now() + batch_admission::STEP;
    for id in running {
        if Instant::now() >= deadline {
            return;
        }
        if let Err(error) = batch_admission::step(state, objects, id, deadline).await {
            tracing::warn!(batch_id = %id, ?error, "a step of the batch's admission failed; trying again at the next upkeep");
        }
    }
}

/// Runs `upkeep` every `period` until `shutdown`.
pub(crate) async fn run_periodically(state: Arc<AppState>, period: Duration, shutdown: CancellationToken) {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = shutdown.cancelled() => return,
        }
        upkeep(&state).await;
    }
}
