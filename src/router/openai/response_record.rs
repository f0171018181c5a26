//! What the Responses API keeps of a response beside its result document: a small record written once at create
//! (what the client sent that the request document does not carry), and the id that maps a response to its
//! pipeline request and back (`resp_` and the 32 hex digits of the requestId's UUID).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use super::OpenAiError;
use super::object_io::read_json;
use super::owner::{Owned, visible_to, write_owned};
use crate::contract::request_id::RequestId;
use crate::ports::ObjectStore;
use crate::router::api_keys::Caller;

/// Where response records are kept (beside the results, expired with them).
pub(crate) const PREFIX: &str = "responses/";
const ID_PREFIX: &str = "resp_";

/// One message of a response's input, as the client sent it: its role and its text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct InputMessage {
    pub(crate) role: String,
    pub(crate) text: String,
}

/// A response's record: the fields of the Response object that are the client's, and when it was created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ResponseRecord {
    pub(crate) id: String,
    pub(crate) created_at: i64,
    /// The model as the client named it.
    pub(crate) model: String,
    pub(crate) instructions: Option<String>,
    pub(crate) input: Vec<InputMessage>,
    pub(crate) metadata: Map<String, Value>,
    /// The limits the request runs with (the pipeline's defaults where the client gave none).
    pub(crate) max_output_tokens: u32,
    pub(crate) temperature: f64,
    pub(crate) top_p: f64,
    pub(crate) service_tier: String,
    pub(crate) background: bool,
    /// The project the response belongs to.
    #[serde(default, skip_serializing)]
    pub(crate) owner: Option<String>,
}

impl Owned for ResponseRecord {
    fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }
}

/// The response id of the pipeline request `request_id`.
pub(crate) fn response_id(request_id: RequestId) -> String {
    format!("{ID_PREFIX}{}", request_id.uuid().simple())
}

/// The pipeline request of the response `id`, when `id` is one as `response_id` makes them.
pub(crate) fn request_id(id: &str) -> Option<RequestId> {
    let hex = id.strip_prefix(ID_PREFIX)?;
    let plain = hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let uuid = Uuid::try_parse(hex).ok().filter(|uuid| plain && uuid.get_version_num() == 4)?;
    Some(RequestId::from(uuid))
}

pub(crate) fn record_key(id: &str) -> String {
    format!("{PREFIX}{id}.json")
}

pub(crate) async fn save(objects: &dyn ObjectStore, record: &ResponseRecord) -> Result<(), OpenAiError> {
    write_owned(objects, &record_key(&record.id), record).await.map_err(|e| OpenAiError::store(&e))
}

/// The record of the response `id` and its request when `caller` may see it; or 404, another project's exactly as
/// one that does not exist.
pub(crate) async fn find(
    objects: &dyn ObjectStore,
    caller: &Caller,
    id: &str,
) -> Result<(RequestId, ResponseRecord), OpenAiError> {
    let not_found = || OpenAiError::not_found("response", id);
    let request_id = request_id(id).ok_or_else(not_found)?;
    let record = read_json(objects, &record_key(id)).await.map_err(|e| OpenAiError::store(&e))?;
    Ok((request_id, visible_to(caller, record).ok_or_else(not_found)?))
}

pub(crate) async fn remove(objects: &dyn ObjectStore, id: &str) -> Result<(), OpenAiError> {
    objects.delete(&record_key(id)).await.map_err(|e| OpenAiError::store(&e))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
