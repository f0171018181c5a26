//! Where a deployment's OpenAI-shaped webhook events go (`response.completed`, `batch.completed`, …); shared by
//! `router`, `worker` and `dev`, which all send them.

use std::time::Duration;

use anyhow::Context;
use reqwest::Url;

use crate::callbacks::openai_events::{DEFAULT_RETRY_SECONDS, EventConfig};
use crate::callbacks::outbound::OutboundPolicy;
use crate::callbacks::webhook::WebhookSecret;

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct OpenAiWebhookArgs {
    /// The endpoint that hears, as OpenAI's webhooks do, of every response and batch that ends (`response.completed`,
    /// `response.failed`, `response.cancelled`, `response.incomplete`, `batch.completed`, …), signed with
    /// --openai-webhook-secret; the callback URL rules apply to it [default: none, no events are sent].
    #[arg(long, env = "OPENAI_WEBHOOK_URL")]
    pub(crate) openai_webhook_url: Option<String>,
    /// The `whsec_…` secret that signs the events (Standard Webhooks), which receivers give OpenAI's SDKs as their
    /// webhook secret: `OpenAI(webhook_secret=...).webhooks.unwrap(body, headers)`.
    #[arg(long, env = "OPENAI_WEBHOOK_SECRET", hide_env_values = true)]
    pub(crate) openai_webhook_secret: Option<WebhookSecret>,
    /// Seconds an event is retried (back-off from 5 s to an hour) before it is given up.
    #[arg(long, env = "OPENAI_WEBHOOK_RETRY_SECONDS", default_value_t = DEFAULT_RETRY_SECONDS)]
    pub(crate) openai_webhook_retry_seconds: u64,
}

impl OpenAiWebhookArgs {
    /// Whether events are asked for but their secret is not given.
    pub(crate) fn wants_secret(&self) -> bool {
        self.openai_webhook_url.as_deref().is_some_and(|u| !u.trim().is_empty()) && self.openai_webhook_secret.is_none()
    }

    /// The events' settings, checked against `policy` now; None when no endpoint is set.
    pub(crate) fn config(&self, policy: OutboundPolicy) -> anyhow::Result<Option<EventConfig>> {
        let Some(url) = self.openai_webhook_url.as_deref().filter(|u| !u.trim().is_empty()) else {
            return Ok(None);
        };
        let url = Url::parse(url.trim()).with_context(|| format!("OPENAI_WEBHOOK_URL {url:?} is not a URL"))?;
        policy.check_url(&url).map_err(|refusal| anyhow::anyhow!("OPENAI_WEBHOOK_URL is refused: {refusal}"))?;
        let secret = self.openai_webhook_secret.clone().context(
            "OPENAI_WEBHOOK_URL is set but OPENAI_WEBHOOK_SECRET is not: events are never sent unsigned (give the \
             whsec_ secret your receiver checks)",
        )?;
        let retry_for = Duration::from_secs(self.openai_webhook_retry_seconds);
        Ok(Some(EventConfig { url, secret, retry_for, policy }))
    }
}
