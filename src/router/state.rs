//! What the HTTP API's handlers share (its own file, so that the app and the `/v1` handlers both import it and
//! neither imports the other back).

use std::sync::Arc;

use crate::callbacks::openai_events::OpenAiEvents;
use crate::callbacks::outbound::OutboundPolicy;
use crate::contract::tier::{Lanes, PerTier, Tier};
use crate::infra::metrics::Emf;
use crate::ports::{ArrivalWake, Classifier, Queue, ResultStore};
use crate::router::body_budget::BodyBudget;
use crate::router::openai::settings::Settings;
use crate::router::routing::RoutingConfig;

/// Everything the handlers share.
pub struct AppState {
    pub dispatch: Dispatch,
    pub store: Arc<dyn ResultStore>,
    pub callbacks: CallbackAcceptance,
    pub metrics: Emf,
    /// The memory request bodies being read may hold at once, across every request.
    pub bodies: BodyBudget,
    /// The OpenAI-compatible Files, Uploads, Batches and Models API.
    pub openai: Settings,
    /// Records and sends the OpenAI-shaped events of responses and batches that end; None where no endpoint is set.
    pub events: Option<OpenAiEvents>,
}

/// Where an accepted request goes: its tier (the routing rules, and the classifier where one is set), its lane's
/// queue, and the wake of a tier at zero.
#[derive(Clone)]
pub struct Dispatch {
    /// Each tier's lanes: requests go to the lane of their `priority`.
    pub queues: PerTier<Lanes<Arc<dyn Queue>>>,
    pub routing: RoutingConfig,
    pub classifier: Option<Arc<dyn Classifier>>,
    /// Asks a tier at zero for its first task as soon as work is enqueued for it; None where the tiers' capacity
    /// is not the router's to ask for (fixed pools, or a stack whose image is not pushed yet).
    pub wake: Option<Arc<dyn ArrivalWake>>,
}

/// Which callback URLs a request may name.
#[derive(Debug, Clone, Copy)]
pub struct CallbackAcceptance {
    /// What callback URLs are accepted (checked again, with DNS, when the callback is sent).
    pub policy: OutboundPolicy,
    /// Whether the workers behind this API can sign and send callbacks. False where the process that sends them
    /// is known to hold no signing key (`gpuinfer dev` without a webhook secret): a callbackUrl is then refused at
    /// POST rather than accepted and never sent. The standalone router cannot know (its workers hold the key, as
    /// the stack's WebhookSecret gives every task one), so it takes them as able.
    pub sent: bool,
}

impl CallbackAcceptance {
    /// Callbacks to the URLs `policy` accepts, sent by the workers.
    pub fn sent_under(policy: OutboundPolicy) -> Self {
        CallbackAcceptance { policy, sent: true }
    }
}

impl AppState {
    /// Work was just enqueued for `tier`: wakes it if it has no task (see `ports::ArrivalWake`).
    pub(crate) async fn enqueued(&self, tier: Tier) {
        if let Some(wake) = &self.dispatch.wake {
            wake.enqueued(tier).await;
        }
    }
}
