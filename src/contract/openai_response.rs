//! An OpenAI response as the pipeline knows it: its id, which maps to its request's and back (`resp_` and the 32 hex
//! digits of the requestId's UUID), and where it stands by its request's result document (none yet is `queued`; the
//! engine stopped on the length limit is `incomplete`; a cancel is `cancelled`). The Responses API and the events
//! sent at a response's end (`response.completed`, …) both read it.

use serde::Deserialize;
use uuid::Uuid;

use crate::contract::outcome::{ErrorCode, ErrorDetail, Generation, Status};
use crate::contract::request_id::RequestId;

const ID_PREFIX: &str = "resp_";

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

/// What the Response object reads of a result document (a cancel document carries no more than this).
#[derive(Debug, Deserialize)]
pub(crate) struct Stored {
    pub(crate) status: Status,
    #[serde(default)]
    pub(crate) result: Option<Generation>,
    #[serde(default)]
    pub(crate) error: Option<ErrorDetail>,
    #[serde(default)]
    pub(crate) timestamp: Option<String>,
}

/// Where a response stands, by its result document.
pub(crate) enum Standing {
    /// No document yet: queued or running (the pipeline does not tell them apart).
    Queued,
    Completed(Generation),
    /// The engine stopped at `max_output_tokens`.
    Incomplete(Generation),
    Failed(ErrorDetail),
    Cancelled,
}

impl Standing {
    pub(crate) fn of(stored: Option<Stored>) -> Standing {
        let Some(stored) = stored else { return Standing::Queued };
        match (stored.status, stored.result, stored.error) {
            (Status::Success, Some(generation), _) if generation.finish_reason == "length" => {
                Standing::Incomplete(generation)
            }
            (Status::Success, Some(generation), _) => Standing::Completed(generation),
            (_, _, Some(error)) if error.code == ErrorCode::Canceled => Standing::Cancelled,
            (_, _, error) => Standing::Failed(error.unwrap_or_else(|| ErrorDetail {
                code: ErrorCode::AttemptsExhausted,
                message: "the result document records no result".into(),
            })),
        }
    }

    pub(crate) fn status(&self) -> &'static str {
        match self {
            Standing::Queued => "queued",
            Standing::Completed(_) => "completed",
            Standing::Incomplete(_) => "incomplete",
            Standing::Failed(_) => "failed",
            Standing::Cancelled => "cancelled",
        }
    }
}

impl Stored {
    pub(crate) fn read(document: &[u8]) -> Option<Self> {
        serde_json::from_slice(document).ok()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Unit tests of `contract/openai_response.rs`: response ids map to their request and back; nothing else is taken for one.

    use super::*;

    #[test]
    fn a_response_id_maps_to_its_request_and_back() {
        let request = RequestId::router_made();
        let id = response_id(request);
        assert_eq!(id, format!("resp_{}", request.uuid().simple()));
        assert_eq!(request_id(&id), Some(request));
    }

    #[test]
    fn only_ids_made_as_response_ids_are_taken() {
        let uuid = uuid::Uuid::new_v4();
        for id in [
            format!("resp_{}", uuid.hyphenated()),
            format!("resp_{}", uuid.simple().to_string().to_uppercase()),
            format!("batch_{}", uuid.simple()),
            format!("resp_{}", uuid::Uuid::now_v7().simple()),
            "resp_".into(),
            "resp_../../results/x".into(),
        ] {
            assert_eq!(request_id(&id), None, "{id}");
        }
    }
}
