//! The task ARN written into results: from the ECS task metadata endpoint v4, else ECS_TASK_ARN, else "local".

use std::time::Duration;

/// Asks `$ECS_CONTAINER_METADATA_URI_V4/task` for the task ARN; falls back to `configured`.
pub(crate) async fn task_arn(metadata_uri: Option<&str>, configured: &str) -> String {
    let Some(uri) = metadata_uri.filter(|u| !u.is_empty()) else { return configured.to_owned() };
    match fetch(uri).await {
        Ok(arn) => arn,
        Err(error) => {
            tracing::warn!(%error, "could not read the task ARN from the ECS metadata endpoint; using {configured:?}");
            configured.to_owned()
        }
    }
}

async fn fetch(uri: &str) -> Result<String, String> {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().map_err(|e| e.to_string())?;
    let task: serde_json::Value = client
        .get(format!("{}/task", uri.trim_end_matches('/')))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    task["TaskARN"].as_str().map(str::to_owned).ok_or_else(|| "no TaskARN in the task metadata".into())
}
