//! The ECS task metadata endpoint v4, read once at the worker's start: the task ARN written into results (else
//! ECS_TASK_ARN, else "local"), and when ECS pulled the task's image (the first phase of its cold start).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};
use serde_json::Value;

/// What the worker takes from its task's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskMetadata {
    pub arn: String,
    /// When the pull of the task's first image started and that of its last stopped; None when not given.
    pub image_pull: Option<(SystemTime, SystemTime)>,
}

/// Asks `$ECS_CONTAINER_METADATA_URI_V4/task`; without it, or when it cannot be read, the `configured` ARN and no
/// image pull.
pub(crate) async fn task(metadata_uri: Option<&str>, configured: &str) -> TaskMetadata {
    let fallback = || TaskMetadata { arn: configured.to_owned(), image_pull: None };
    let Some(uri) = metadata_uri.filter(|u| !u.is_empty()) else { return fallback() };
    match fetch(uri).await.and_then(|task| parse(&task)) {
        Ok(task) => task,
        Err(error) => {
            tracing::warn!(%error, "could not read the ECS task metadata (task ARN, image pull); using the task ARN {configured:?}");
            fallback()
        }
    }
}

async fn fetch(uri: &str) -> Result<Value, String> {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().map_err(|e| e.to_string())?;
    client
        .get(format!("{}/task", uri.trim_end_matches('/')))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())
}

/// The task response's `TaskARN` (required), `PullStartedAt` and `PullStoppedAt` (RFC 3339; both in order, or no
/// pull).
fn parse(task: &Value) -> Result<TaskMetadata, String> {
    let arn = task["TaskARN"].as_str().ok_or("no TaskARN in the task metadata")?.to_owned();
    let instant = |field: &str| {
        let text = task[field].as_str()?;
        DateTime::parse_from_rfc3339(text).ok().map(|at| SystemTime::from(at.with_timezone(&Utc)))
    };
    let image_pull = instant("PullStartedAt")
        .zip(instant("PullStoppedAt"))
        .filter(|(started, stopped)| UNIX_EPOCH < *started && started <= stopped);
    Ok(TaskMetadata { arn, image_pull })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
