//! The words and documents every layer shares, importing nothing else of the crate: tiers and lanes, the request,
//! its id and its labels (user, metadata), the result and error documents, the JSON error bodies, a Batch API line,
//! an OpenAI response's id and where it stands, the engine's load.

pub(crate) mod batch_line;
pub(crate) mod engine_load;
pub(crate) mod error_body;
pub(crate) mod labels;
pub(crate) mod openai_response;
pub(crate) mod outcome;
pub(crate) mod request;
pub(crate) mod request_id;
pub(crate) mod tier;
