//! Which OpenAI object a request is, when it is one: a Batch API line (set by the Batch API), or a response (set by
//! the Responses API; its end is told to the deployment's OpenAI webhook). On the queue, `batch` or `response`.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use super::refusal::RequestError;
use crate::contract::batch_line::BatchLine;

#[derive(Debug, Clone, Default, PartialEq)]
pub enum Origin {
    /// A request of its own (POST /infer).
    #[default]
    Plain,
    BatchLine(BatchLine),
    Response,
}

impl Origin {
    pub(crate) fn batch_line(&self) -> Option<&BatchLine> {
        match self {
            Origin::BatchLine(line) => Some(line),
            _ => None,
        }
    }

    pub(crate) fn is_response(&self) -> bool {
        *self == Origin::Response
    }
}

impl Serialize for Origin {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        match self {
            Origin::Plain => {}
            Origin::BatchLine(line) => map.serialize_entry("batch", line)?,
            Origin::Response => map.serialize_entry("response", &true)?,
        }
        map.end()
    }
}

/// Takes `batch` and `response` out of a body: only the queue carries them (the APIs set them, never a client).
pub(super) fn take_origin(object: &mut Map<String, Value>, from_queue: bool) -> Result<Origin, RequestError> {
    let (batch, response) = (object.remove("batch"), object.remove("response"));
    let given = |value: &Option<Value>| value.as_ref().is_some_and(|v| !v.is_null());
    if !from_queue {
        if given(&batch) {
            return Err(RequestError::invalid("batch", "set by the Batch API (POST /v1/batches), not by clients"));
        }
        if given(&response) {
            let why = "set by the Responses API (POST /v1/responses), not by clients";
            return Err(RequestError::invalid("response", why));
        }
        return Ok(Origin::Plain);
    }
    let response = match response {
        None | Some(Value::Null) => false,
        Some(value) => value.as_bool().ok_or_else(|| RequestError::invalid("response", "true or false"))?,
    };
    match (batch, response) {
        (None | Some(Value::Null), false) => Ok(Origin::Plain),
        (None | Some(Value::Null), true) => Ok(Origin::Response),
        (Some(_), true) => Err(RequestError::invalid("response", "a batch line is not a response")),
        (Some(value), false) => serde_json::from_value(value)
            .map(Origin::BatchLine)
            .map_err(|e| RequestError::invalid("batch", format!("not a batch line ({e})"))),
    }
}
