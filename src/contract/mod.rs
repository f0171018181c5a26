//! The words and documents every layer shares, importing nothing else of the crate: tiers and lanes, the request
//! and its id, the result and error documents, the JSON error bodies, a Batch API line, where an OpenAI response stands, the engine's load.

pub mod batch_line;
pub mod engine_load;
pub(crate) mod error_body;
pub mod outcome;
pub mod request;
pub mod request_id;
pub(crate) mod response_standing;
pub mod tier;
