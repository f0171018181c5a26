//! What a request's ending reports to, beyond the store and the queue: metrics, the result callback, the OpenAI
//! event, the worker's cold start.

use crate::callbacks::openai_events::OpenAiEvents;
use crate::callbacks::webhook::Webhooks;
use crate::infra::metrics::Emf;
use crate::worker::cold_start::ColdStart;

/// What a request's ending reports to: its metrics, its callback, its OpenAI event, the worker's cold start.
pub(super) struct Endings {
    pub(super) metrics: Emf,
    /// Sends result callbacks; without it, callbackUrl is ignored.
    pub(super) webhooks: Option<Webhooks>,
    /// Records and sends the OpenAI-shaped event of every response that ends; None where no endpoint is set.
    pub(super) events: Option<OpenAiEvents>,
    /// The instants of its start, reported once with its first result.
    pub(super) cold_start: ColdStart,
}
