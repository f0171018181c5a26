//! How the router tells a retry from a reused requestId: the record it keeps, beside the results, of each request
//! it accepted (a fingerprint of what the client sent, the tier it answered, the id as it was sent). A record is
//! kept under the id's canonical (lower-case) form, so of two spellings that differ only in case, only the first
//! is accepted.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::contract::outcome::Ending;
use crate::contract::request_id::RequestId;
use crate::contract::tier::Tier;
use crate::ports::{PutOutcome, ResultStore, StoreError};

/// What accepting a request with an id means for this request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Admission {
    /// The id is new: enqueue the request.
    New,
    /// The same request was accepted before (a client's retry): answer as then, enqueue nothing.
    Retry(Tier),
    /// Another request holds this id; `status` is where that one stands ("pending", "success", "error").
    Reused { status: String },
}

#[derive(Debug, Serialize, Deserialize)]
struct Record {
    fingerprint: String,
    tier: Tier,
    /// The id as its request sent it; absent in records kept before ids were compared without case.
    #[serde(rename = "requestId", default, skip_serializing_if = "Option::is_none")]
    request_id: Option<RequestId>,
}

/// The fingerprint of a request as the client sent it: SHA-256 of its JSON with keys sorted, so the same request
/// sent again matches whatever the order of its fields.
pub(crate) fn fingerprint(sent: &Value) -> String {
    let digest = Sha256::digest(canonical(sent).as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by_key(|(key, _)| key.as_str());
            let fields: Vec<String> = entries
                .iter()
                .map(|(key, value)| format!("{}:{}", Value::from(key.as_str()), canonical(value)))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => format!("[{}]", items.iter().map(canonical).collect::<Vec<_>>().join(",")),
        scalar => scalar.to_string(),
    }
}

/// Records that `request_id` is accepted for the request with `fingerprint`, routed to `tier` — unless it already
/// was, in any case, for the same request (a retry) or another one.
pub(crate) async fn admit(
    store: &dyn ResultStore,
    request_id: RequestId,
    fingerprint: &str,
    tier: Tier,
) -> Result<Admission, StoreError> {
    let record = Record { fingerprint: fingerprint.to_owned(), tier, request_id: Some(request_id) };
    let record = serde_json::to_vec(&record).map_err(|e| StoreError::caused("encoding the acceptance record", e))?;
    if store.record_acceptance(request_id.canonical(), &record).await? == PutOutcome::Created {
        return Ok(Admission::New);
    }
    match read(store, request_id).await?.flatten() {
        Some(earlier) if earlier.fingerprint == fingerprint => Ok(Admission::Retry(earlier.tier)),
        earlier => {
            let holder = earlier.and_then(|record| record.request_id).unwrap_or(request_id);
            let document = store.get(holder).await?;
            let status =
                document.as_deref().and_then(Ending::read).map_or("pending".into(), |e| e.status.as_str().into());
            Ok(Admission::Reused { status })
        }
    }
}

/// The id, as its request sent it, of the accepted request that holds `request_id` in any case; None when none
/// does (or its record expired).
pub(crate) async fn holder(store: &dyn ResultStore, request_id: RequestId) -> Result<Option<RequestId>, StoreError> {
    let record = read(store, request_id).await?;
    Ok(record.map(|record| record.and_then(|record| record.request_id).unwrap_or(request_id)))
}

/// Drops the record of accepting `request_id` (its enqueue failed, so the client's retry must be accepted).
pub(crate) async fn forget(store: &dyn ResultStore, request_id: RequestId) -> Result<(), StoreError> {
    store.forget_acceptance(request_id.canonical()).await
}

/// What is kept for `request_id`'s identity: None when nothing is, Some(None) for bytes that are not a record
/// (counted as another request's).
async fn read(store: &dyn ResultStore, request_id: RequestId) -> Result<Option<Option<Record>>, StoreError> {
    let kept = store.acceptance(request_id.canonical()).await?;
    Ok(kept.map(|bytes| serde_json::from_slice(&bytes).ok()))
}
