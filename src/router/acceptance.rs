//! How the router tells a retry from a reused requestId: the record it keeps, beside the results, of each request
//! it accepted (a fingerprint of what the client sent, and the tier it answered).

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
/// was, for the same request (a retry) or another one.
pub(crate) async fn admit(
    store: &dyn ResultStore,
    request_id: RequestId,
    fingerprint: &str,
    tier: Tier,
) -> Result<Admission, StoreError> {
    let record = serde_json::to_vec(&Record { fingerprint: fingerprint.to_owned(), tier })
        .map_err(|e| StoreError::caused("encoding the acceptance record", e))?;
    if store.record_acceptance(request_id, &record).await? == PutOutcome::Created {
        return Ok(Admission::New);
    }
    let earlier = store.acceptance(request_id).await?.and_then(|bytes| serde_json::from_slice::<Record>(&bytes).ok());
    match earlier {
        Some(earlier) if earlier.fingerprint == fingerprint => Ok(Admission::Retry(earlier.tier)),
        _ => {
            let document = store.get(request_id).await?;
            let status =
                document.as_deref().and_then(Ending::read).map_or("pending".into(), |e| e.status.as_str().into());
            Ok(Admission::Reused { status })
        }
    }
}

/// Whether a request with this id was accepted (and its record has not expired).
pub(crate) async fn was_accepted(store: &dyn ResultStore, request_id: RequestId) -> Result<bool, StoreError> {
    Ok(store.acceptance(request_id).await?.is_some())
}
