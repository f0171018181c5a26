//! Signed webhooks: the result callback a worker sends when a result is stored, the OpenAI-shaped events of a
//! deployment's responses and batches, and the rules for where one may go.

pub(crate) mod openai_events;
pub(crate) mod outbound;
pub(crate) mod webhook;
