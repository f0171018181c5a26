//! A batch as the Batches API keeps it: the Batch object OpenAI's reference defines, and where it, its lines'
//! secret and its marks are stored.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::batch_input::Endpoint;
use super::error::OpenAiError;
use super::owner::{Owned, find_record, write_owned};
use crate::ports::object_io::read_all;
use crate::ports::{ObjectStore, StoreError};
use crate::router::api_keys::Caller;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct RequestCounts {
    pub(crate) total: u64,
    pub(crate) completed: u64,
    pub(crate) failed: u64,
}

/// OpenAI's Batch object, as stored and as answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Batch {
    pub id: String,
    pub(crate) object: String,
    #[serde(flatten)]
    pub(crate) order: BatchOrder,
    pub status: String,
    pub(crate) errors: Option<Value>,
    pub(crate) output_file_id: Option<String>,
    pub(crate) error_file_id: Option<String>,
    #[serde(flatten)]
    pub(crate) times: BatchTimes,
    pub(crate) request_counts: RequestCounts,
    /// The project the batch belongs to, and its output and error files with it.
    #[serde(default, skip_serializing)]
    pub(crate) owner: Option<String>,
}

/// What the client asked for when it created the batch.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BatchOrder {
    pub(crate) endpoint: String,
    pub(crate) input_file_id: String,
    pub(crate) completion_window: String,
    pub(crate) metadata: Option<Map<String, Value>>,
}

/// When the batch was created, will expire, and reached each status (Unix seconds).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct BatchTimes {
    pub(crate) created_at: i64,
    pub(crate) expires_at: i64,
    pub(crate) in_progress_at: Option<i64>,
    pub(crate) finalizing_at: Option<i64>,
    pub(crate) completed_at: Option<i64>,
    pub(crate) failed_at: Option<i64>,
    pub(crate) expired_at: Option<i64>,
    pub(crate) cancelling_at: Option<i64>,
    pub(crate) cancelled_at: Option<i64>,
}

impl Batch {
    pub(super) fn endpoint(&self) -> Endpoint {
        Endpoint::parse(&self.order.endpoint).unwrap_or(Endpoint::ChatCompletions)
    }

    pub(super) fn is_running(&self) -> bool {
        matches!(self.status.as_str(), "in_progress" | "cancelling" | "finalizing")
    }

    pub(super) fn expires(&self) -> DateTime<Utc> {
        DateTime::from_timestamp(self.times.expires_at, 0).unwrap_or_else(Utc::now)
    }

    pub(super) fn failed(&mut self, errors: impl Serialize) {
        let data = serde_json::to_value(errors).unwrap_or_default();
        self.errors = Some(serde_json::json!({ "object": "list", "data": data }));
        self.status = "failed".into();
        self.times.failed_at = Some(Utc::now().timestamp());
    }
}

impl Owned for Batch {
    fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }
}

/// Where batches, their secrets and their marks are kept.
pub(crate) const PREFIX: &str = "batches/";

pub(crate) fn record_key(id: &str) -> String {
    format!("{PREFIX}{id}.json")
}

/// The batch's secret for its lines' request ids (`BatchLine::request_id`): an object of its own, so the Batch
/// object the API answers (and lists) never carries it.
pub(super) fn line_key_key(id: &str) -> String {
    format!("{PREFIX}{id}.key")
}

/// A new batch's secret: 32 bytes from the operating system's random source (two v4 UUIDs).
pub(super) fn new_line_key() -> Vec<u8> {
    [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()].iter().flat_map(|u| *u.as_bytes()).collect()
}

/// The batch's secret for its lines' ids; None for a batch created before its lines had one.
pub(super) async fn line_key(objects: &dyn ObjectStore, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
    read_all(objects, &line_key_key(id)).await
}

/// The batch's record when `caller` may see it, or 404.
pub(super) async fn find(objects: &dyn ObjectStore, caller: &Caller, id: &str) -> Result<Batch, OpenAiError> {
    find_record(objects, caller, ("batch", "batch_"), record_key, id).await
}

pub(super) async fn save(objects: &dyn ObjectStore, batch: &Batch) -> Result<(), OpenAiError> {
    write_owned(objects, &record_key(&batch.id), batch).await.map_err(|e| OpenAiError::store(&e))
}
