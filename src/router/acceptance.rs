//! How the router tells a retry from a reused requestId: the record it keeps, beside the results, of each request
//! it accepted with an id its client chose (a fingerprint of what the client sent, the tier it answered, the id as it
//! was sent). A record is kept under the id's canonical (lower-case) form, so of two spellings that differ only in
//! case, only the first is accepted. An id the router made needs no record: it is new when made, and the router
//! knows it when a client sends it back (`RequestId::is_router_made`), as an id another request holds.

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

/// What of a request as the client sent it decides its admission.
pub(crate) struct Sent {
    /// SHA-256 of its JSON with keys sorted, so the same request sent again matches whatever the order of its fields.
    fingerprint: String,
    /// Whether the client chose its requestId (else the router made one).
    names_its_id: bool,
}

impl Sent {
    pub(crate) fn of(sent: &Value) -> Sent {
        let digest = Sha256::digest(canonical(sent).as_bytes());
        Sent { fingerprint: hex::encode(digest), names_its_id: sent.get("requestId").is_some_and(|id| !id.is_null()) }
    }
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

/// Admits `request_id` for the request `sent`, routed to `tier`: an id the router just made is new; an id the client
/// chose is recorded as accepted, unless it already was, in any case, for the same request (a retry) or another one;
/// an id the router made, sent back by a client, is another request's.
pub(crate) async fn admit(
    store: &dyn ResultStore,
    request_id: RequestId,
    sent: &Sent,
    tier: Tier,
) -> Result<Admission, StoreError> {
    match (sent.names_its_id, request_id.is_router_made()) {
        (false, _) => return Ok(Admission::New),
        (true, true) => return Ok(Admission::Reused { status: status(store, request_id).await? }),
        (true, false) => {}
    }
    let record = Record { fingerprint: sent.fingerprint.clone(), tier, request_id: Some(request_id) };
    let record = serde_json::to_vec(&record).map_err(|e| StoreError::caused("encoding the acceptance record", e))?;
    if store.record_acceptance(request_id.canonical(), &record).await? == PutOutcome::Created {
        return Ok(Admission::New);
    }
    match read(store, request_id).await?.flatten() {
        Some(earlier) if earlier.fingerprint == sent.fingerprint => Ok(Admission::Retry(earlier.tier)),
        earlier => {
            let holder = earlier.and_then(|record| record.request_id).unwrap_or(request_id);
            Ok(Admission::Reused { status: status(store, holder).await? })
        }
    }
}

/// Where the accepted request `holder` stands: its document's status, else "pending".
async fn status(store: &dyn ResultStore, holder: RequestId) -> Result<String, StoreError> {
    let document = store.get(holder).await?;
    Ok(document.as_deref().and_then(Ending::read).map_or("pending".into(), |e| e.status.as_str().into()))
}

/// The id, as its request sent it, of the accepted request that holds `request_id` in any case; None when none
/// does (or its record expired). An id the router made is held as the router wrote it (lower case).
pub(crate) async fn holder(store: &dyn ResultStore, request_id: RequestId) -> Result<Option<RequestId>, StoreError> {
    if request_id.is_router_made() {
        return Ok(Some(request_id.canonical()));
    }
    let record = read(store, request_id).await?;
    Ok(record.map(|record| record.and_then(|record| record.request_id).unwrap_or(request_id)))
}

/// Drops the record of accepting `request_id` (its enqueue failed, so the client's retry must be accepted); an id
/// the router made has none.
pub(crate) async fn forget(store: &dyn ResultStore, request_id: RequestId) -> Result<(), StoreError> {
    if request_id.is_router_made() {
        return Ok(());
    }
    store.forget_acceptance(request_id.canonical()).await
}

/// What is kept for `request_id`'s identity: None when nothing is, Some(None) for bytes that are not a record
/// (counted as another request's).
async fn read(store: &dyn ResultStore, request_id: RequestId) -> Result<Option<Option<Record>>, StoreError> {
    let kept = store.acceptance(request_id.canonical()).await?;
    Ok(kept.map(|bytes| serde_json::from_slice(&bytes).ok()))
}
