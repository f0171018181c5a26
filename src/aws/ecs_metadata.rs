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
mod tests {
    //! The task response read: its ARN, and the image pull only when both of its instants are given, in order.

    use std::time::{Duration, UNIX_EPOCH};

    use serde_json::json;

    use super::parse;

    const ARN: &str = "arn:aws:ecs:us-east-1:123456789012:task/inference/0123456789abcdef";

    #[test]
    fn the_pull_is_read_to_the_nanosecond() {
        let task = json!({"TaskARN": ARN, "PullStartedAt": "2020-10-02T00:43:06.202617438Z", "PullStoppedAt": "2020-10-02T00:43:06.31288465Z"});
        let read = parse(&task).unwrap();
        let started = UNIX_EPOCH + Duration::new(1_601_599_386, 202_617_438);
        assert_eq!(read.arn, ARN);
        assert_eq!(read.image_pull, Some((started, UNIX_EPOCH + Duration::new(1_601_599_386, 312_884_650))));
    }

    #[test]
    fn a_pull_missing_an_instant_or_out_of_order_is_no_pull() {
        for (started, stopped) in [
            (None, Some("2020-10-02T00:43:06Z")),
            (Some("2020-10-02T00:43:07Z"), Some("2020-10-02T00:43:06Z")),
            (Some("0001-01-01T00:00:00Z"), Some("2020-10-02T00:43:06Z")),
        ] {
            let task = json!({"TaskARN": ARN, "PullStartedAt": started, "PullStoppedAt": stopped});
            assert_eq!(parse(&task).unwrap().image_pull, None, "{task}");
        }
    }

    #[test]
    fn a_response_without_an_arn_is_refused() {
        assert!(parse(&json!({"PullStartedAt": "2020-10-02T00:43:06Z"})).is_err());
    }
}
