//! What the Responses API keeps of a response beside its result document: a small record written once at create
//! (what the client sent that the request document does not carry), found by the response's id
//! (`contract::openai_response`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::OpenAiError;
use super::owner::{Owned, visible_to, write_owned};
use super::response_shape::InputItem;
use crate::contract::openai_response::{request_id, response_id};
use crate::contract::request::Sampling;
use crate::contract::request_id::RequestId;
use crate::ports::object_io::read_json;
use crate::ports::{ObjectStore, StoreError};
use crate::router::api_keys::Caller;

/// Where response records are kept (beside the results, expired with them).
pub(crate) const PREFIX: &str = "responses/";

/// A response's record: the fields of the Response object that are the client's, and when it was created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ResponseRecord {
    pub(crate) id: String,
    pub(crate) created_at: i64,
    /// The model as the client named it.
    pub(crate) model: String,
    #[serde(flatten)]
    pub(crate) asked: Asked,
    pub(crate) metadata: Map<String, Value>,
    #[serde(flatten)]
    pub(crate) limits: ResponseLimits,
    #[serde(flatten)]
    pub(crate) shape: AnswerShape,
    pub(crate) service_tier: String,
    pub(crate) background: bool,
    /// The project the response belongs to.
    #[serde(default, skip_serializing)]
    pub(crate) owner: Option<String>,
}

/// What the response was asked: its instructions and input as sent, and the conversation it continues.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Asked {
    pub(crate) instructions: Option<String>,
    pub(crate) input: Vec<InputItem>,
    /// The response this one continues (`previous_response_id`).
    #[serde(default)]
    pub(crate) previous_response_id: Option<String>,
    /// The earlier turns it continues, in order: each one's input and answer (their instructions are not carried).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) context: Vec<InputItem>,
}

/// What the answer may be, as the client wrote it in Responses' shapes (echoed by the Response object).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct AnswerShape {
    #[serde(default = "plain_text")]
    pub(crate) text: Value,
    #[serde(default)]
    pub(crate) tools: Vec<Value>,
    #[serde(default = "no_tool_choice")]
    pub(crate) tool_choice: Value,
    #[serde(default)]
    pub(crate) parallel_tool_calls: bool,
}

impl Default for AnswerShape {
    fn default() -> Self {
        AnswerShape { text: plain_text(), tools: Vec::new(), tool_choice: no_tool_choice(), parallel_tool_calls: false }
    }
}

fn plain_text() -> Value {
    serde_json::json!({ "format": { "type": "text" } })
}

fn no_tool_choice() -> Value {
    Value::from("none")
}

/// The limits the request runs with (the pipeline's defaults where the client gave none).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct ResponseLimits {
    pub(crate) max_output_tokens: u32,
    pub(crate) temperature: f64,
    pub(crate) top_p: f64,
    #[serde(default)]
    pub(crate) top_logprobs: Option<u8>,
}

impl From<&Sampling> for ResponseLimits {
    fn from(sampling: &Sampling) -> Self {
        ResponseLimits {
            max_output_tokens: sampling.max_tokens,
            temperature: sampling.temperature,
            top_p: sampling.top_p,
            top_logprobs: sampling.top_logprobs,
        }
    }
}

impl Owned for ResponseRecord {
    fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }
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

/// Whether the request `request_id` is a response of a project other than `caller`'s: /results then answers it as
/// an id it does not know. A caller without a project (no keys) is everyone's.
pub(crate) async fn of_another_project(
    objects: &dyn ObjectStore,
    caller: &Caller,
    request_id: RequestId,
) -> Result<bool, StoreError> {
    if caller.project.is_none() {
        return Ok(false);
    }
    let record: Option<ResponseRecord> = read_json(objects, &record_key(&response_id(request_id))).await?;
    Ok(record.is_some_and(|record| !caller.owns(record.owner())))
}

pub(crate) async fn remove(objects: &dyn ObjectStore, id: &str) -> Result<(), OpenAiError> {
    objects.delete(&record_key(id)).await.map_err(|e| OpenAiError::store(&e))
}
