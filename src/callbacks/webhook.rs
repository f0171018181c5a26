//! Result callbacks, signed the Standard Webhooks way: the secret, the signature, and delivery in the background
//! with back-off for a bounded time, through the outbound policy's guarded resolver. A delivery never blocks or
//! fails the request it reports on; its failures are logged and counted (`WebhookFailures`).
//!
//! Each POST carries the stored result document as its body and three headers:
//! `webhook-id` (the requestId, the same on every attempt, so receivers can drop duplicates),
//! `webhook-timestamp` (Unix seconds of the attempt) and
//! `webhook-signature: v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}">`,
//! keyed with the base64-decoded secret (`whsec_` prefix accepted).

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use reqwest::Url;
use sha2::Sha256;
use tokio_util::task::TaskTracker;

use crate::callbacks::outbound::{OutboundPolicy, Refusal, refusal_in};
use crate::contract::request_id::RequestId;
use crate::contract::tier::Tier;
use crate::infra::metrics::{self, Emf, Metric};

/// First wait between two attempts; it doubles up to [`MAX_BACKOFF`].
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_secs(1);
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long a stopping worker waits for deliveries still in progress.
pub(crate) const DRAIN_GRACE: Duration = Duration::from_secs(10);
/// How long one callback is retried unless configured.
pub(crate) const DEFAULT_RETRY_SECONDS: u64 = 300;
/// Longest wait for one attempt's answer.
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// The signing key shared with receivers.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(Vec<u8>);

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(…)")
    }
}

impl FromStr for WebhookSecret {
    type Err = String;

    /// Base64, optionally prefixed with `whsec_`; at least 16 bytes once decoded.
    fn from_str(text: &str) -> Result<Self, String> {
        let encoded = text.trim();
        let encoded = encoded.strip_prefix("whsec_").unwrap_or(encoded);
        let key = BASE64.decode(encoded).map_err(|e| format!("not base64 ({e}); give whsec_<base64> or <base64>"))?;
        if key.len() < 16 {
            return Err(format!("{} bytes once decoded; use at least 16 random bytes", key.len()));
        }
        Ok(WebhookSecret(key))
    }
}

impl WebhookSecret {
    /// The `webhook-signature` header value for one attempt.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .unwrap_or_else(|e| unreachable!("HMAC takes keys of any length: {e}"));
        mac.update(format!("{id}.{timestamp}.").as_bytes());
        mac.update(body);
        format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
    }
}

/// How callbacks are sent.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// None: callbacks are refused (and counted as failures) rather than sent unsigned.
    pub secret: Option<WebhookSecret>,
    pub policy: OutboundPolicy,
    /// How long one callback is retried after its first attempt.
    pub retry_for: Duration,
    /// Longest wait for one attempt's answer.
    pub attempt_timeout: Duration,
}

/// One document to deliver.
#[derive(Debug, Clone)]
pub struct Callback {
    pub url: String,
    pub request_id: RequestId,
    pub tier: Tier,
    pub body: Vec<u8>,
}

/// Why a callback was not delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    #[error("no webhook secret is configured (set WEBHOOK_SECRET); callbacks are never sent unsigned")]
    NoSecret,
    #[error("callback URL is not valid: {0}")]
    InvalidUrl(String),
    #[error("callback URL refused: {0}")]
    Refused(Refusal),
    #[error("the receiver answered HTTP {0}, which retrying cannot change")]
    Rejected(u16),
    #[error("gave up after {attempts} attempts; last: {last}")]
    GaveUp { attempts: u32, last: String },
}

/// Sends callbacks in the background; cheap to clone.
#[derive(Debug, Clone)]
pub struct Webhooks {
    http: reqwest::Client,
    config: WebhookConfig,
    metrics: Emf,
    deliveries: TaskTracker,
}

impl Webhooks {
    pub fn new(config: WebhookConfig, metrics: Emf) -> Result<Self, reqwest::Error> {
        let http = outbound_client(&config.policy, config.attempt_timeout)?;
        Ok(Webhooks { http, config, metrics, deliveries: TaskTracker::new() })
    }

    /// Delivers `callback` in the background; logs and counts the outcome.
    pub(crate) fn send(&self, callback: Callback) {
        let webhooks = self.clone();
        self.deliveries.spawn(async move {
            let started = Instant::now();
            let outcome = webhooks.deliver(&callback).await;
            let host = Url::parse(&callback.url).ok().and_then(|u| u.host_str().map(str::to_owned)).unwrap_or_default();
            let dimensions = [("Tier", callback.tier.as_str())];
            match outcome {
                Ok(attempts) => {
                    tracing::info!(request_id = %callback.request_id, %host, attempts, elapsed_ms = started.elapsed().as_millis() as u64, "callback delivered");
                    webhooks.metrics.emit(&dimensions, &[Metric::count(metrics::WEBHOOKS_DELIVERED, 1)]);
                }
                Err(error) => {
                    tracing::warn!(request_id = %callback.request_id, %host, %error, "callback not delivered");
                    webhooks.metrics.emit(&dimensions, &[Metric::count(metrics::WEBHOOK_FAILURES, 1)]);
                }
            }
        });
    }

    /// Attempts until the receiver answers 2xx, refuses for good, or the retry window closes; returns the
    /// number of attempts made.
    pub async fn deliver(&self, callback: &Callback) -> Result<u32, DeliveryError> {
        let secret = self.config.secret.as_ref().ok_or(DeliveryError::NoSecret)?;
        let url = Url::parse(&callback.url).map_err(|e| DeliveryError::InvalidUrl(e.to_string()))?;
        self.config.policy.check_url(&url).map_err(DeliveryError::Refused)?;
        let id = callback.request_id.to_string();
        let started = Instant::now();
        let mut backoff = FIRST_BACKOFF;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let last = match post_signed(&self.http, &url, secret, &id, &callback.body).await {
                Attempt::Delivered => return Ok(attempts),
                Attempt::Final(error) => return Err(error),
                Attempt::Retry(last) => last,
            };
            if started.elapsed() + backoff > self.config.retry_for {
                return Err(DeliveryError::GaveUp { attempts, last });
            }
            tracing::debug!(request_id = %callback.request_id, attempts, %last, retry_in_s = backoff.as_secs(), "callback failed; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Waits up to `grace` for deliveries in progress (a stopping worker); returns how many were abandoned.
    pub(crate) async fn finish(&self, grace: Duration) -> usize {
        self.deliveries.close();
        if tokio::time::timeout(grace, self.deliveries.wait()).await.is_err() {
            let abandoned = self.deliveries.len();
            tracing::warn!(abandoned, grace_s = grace.as_secs(), "stopping with callbacks still being retried");
            return abandoned;
        }
        0
    }
}

/// The HTTP client signed webhooks go out through: DNS through the outbound policy's guarded resolver, no
/// redirects, no proxy.
pub(crate) fn outbound_client(policy: &OutboundPolicy, attempt_timeout: Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .dns_resolver(policy.resolver())
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(Duration::from_secs(5))
        .timeout(attempt_timeout)
        .user_agent(concat!("gpuinfer/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// How one attempt at a signed webhook went.
pub(crate) enum Attempt {
    /// The receiver answered 2xx.
    Delivered,
    /// Worth trying again (a 5xx, 408 or 429, or no answer): what happened.
    Retry(String),
    /// Retrying cannot change it.
    Final(DeliveryError),
}

/// POSTs `body` to `url`, signed the Standard Webhooks way with `id` and the attempt's timestamp.
pub(crate) async fn post_signed(
    http: &reqwest::Client,
    url: &Url,
    secret: &WebhookSecret,
    id: &str,
    body: &[u8],
) -> Attempt {
    let timestamp = chrono::Utc::now().timestamp();
    let sent = http
        .post(url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", secret.sign(id, timestamp, body))
        .body(body.to_vec())
        .send()
        .await;
    match sent {
        Ok(response) if response.status().is_success() => Attempt::Delivered,
        Ok(response) => {
            let status = response.status();
            if status.is_server_error() || status.as_u16() == 429 || status.as_u16() == 408 {
                Attempt::Retry(format!("HTTP {}", status.as_u16()))
            } else {
                Attempt::Final(DeliveryError::Rejected(status.as_u16()))
            }
        }
        Err(error) => match refusal_in(&error) {
            Some(refusal) => Attempt::Final(DeliveryError::Refused(refusal.clone())),
            None => Attempt::Retry(crate::infra::error_chain::describe(&error)),
        },
    }
}
