//! `gpuinfer router`: the HTTP API, as an AWS Lambda (API Gateway HTTP API, through lambda_http: each event made safe
//! by `lambda_event`, then answered by the router app) or a local HTTP server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use lambda_http::LambdaEvent;
use lambda_http::request::LambdaRequest;
use lambda_http::tower::Service;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::aws::ecs::EcsServices;
use crate::aws::secrets_manager::SecretKeyStore;
use crate::callbacks::openai_events::OpenAiEvents;
use crate::callbacks::outbound::OutboundPolicy;
use crate::cmd::args::{
    CallbackPolicyArgs, DataDirArgs, HttpServerArgs, OpenAiWebhookArgs, RoutingArgs, RoutingSettings, ServiceArgs,
    TierQueueArgs,
};
use crate::cmd::backends::{Destination, QueueSource, Wiring};
use crate::contract::tier::{Lanes, PerTier, Tier};
use crate::http::server::{self, HttpLimits};
use crate::infra::metrics::Emf;
use crate::infra::runtime::running_on_lambda;
use crate::ports::{DEFAULT_MAX_RECEIVE_COUNT, KeyStore};
use crate::router::api_keys::{DEFAULT_CACHE_SECONDS, KeySource, StoredKeys};
use crate::router::app;
use crate::router::body_budget::BodyBudget;
use crate::router::openai::settings::Settings;
use crate::router::openai::upkeep;
use crate::router::state::{AppState, CallbackAcceptance, Dispatch};
use crate::scaler::wake::{AWS_RECHECK, WakeOnArrival};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub(crate) http: HttpServerArgs,
    #[command(flatten)]
    pub(crate) queues: TierQueueArgs,
    /// Where results are read from: s3://bucket/prefix/ or a folder [default: --data-dir].
    #[arg(long, env = "OUTPUT_DESTINATION")]
    pub(crate) output_destination: Option<String>,
    #[command(flatten)]
    pub(crate) data: DataDirArgs,
    #[command(flatten)]
    pub(crate) routing: RoutingArgs,
    #[command(flatten)]
    pub(crate) callbacks: CallbackPolicyArgs,
    #[command(flatten)]
    pub(crate) events: EventArgs,
    #[command(flatten)]
    pub(crate) keys: ApiKeysArgs,
    #[command(flatten)]
    pub(crate) wake: WakeArgs,
}

/// Where the OpenAI-shaped events go and what signs them.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct EventArgs {
    #[command(flatten)]
    pub(crate) openai_webhook: OpenAiWebhookArgs,
    /// The Secrets Manager secret (ARN or name) that holds --openai-webhook-secret, read as the router starts when
    /// OPENAI_WEBHOOK_URL is set and the secret itself is not given (the stack's OpenAiWebhookSecret: a function's
    /// environment does not hold the key).
    #[arg(long, env = "OPENAI_WEBHOOK_SECRET_ID")]
    pub(crate) openai_webhook_secret_id: Option<String>,
}

/// The stored API keys of the /v1 routes.
#[derive(Debug, clap::Args)]
pub(crate) struct ApiKeysArgs {
    /// The Secrets Manager secret (ARN or name) whose key document holds the API keys of the /v1 routes (the
    /// stack's ApiKeysSecret; `gpuinfer api-key add` makes them). Set, every /v1 request must carry one of them
    /// (`Authorization: Bearer <key>`, as OpenAI's clients send theirs), checked before anything else of it is
    /// read; the other routes are left to API Gateway's IAM. Not with --api-key.
    #[arg(long, env = "API_KEYS_SECRET_ID")]
    pub(crate) api_keys_secret_id: Option<String>,
    /// Seconds the router keeps the keys it read from API_KEYS_SECRET_ID before it reads them again: a key added is
    /// accepted, and one revoked refused, within this.
    #[arg(long, env = "API_KEYS_CACHE_SECONDS", default_value_t = DEFAULT_CACHE_SECONDS)]
    pub(crate) api_keys_cache_seconds: u64,
}

/// Waking a tier at zero as work arrives for it.
#[derive(Debug, clap::Args)]
pub(crate) struct WakeArgs {
    /// When work is enqueued for a tier whose ECS service has no task asked for, set its desired count to 1 at once
    /// (DescribeServices, then UpdateService), instead of waiting for the scaler's next tick and an alarm's period.
    /// SQS only: the services are --cluster-name and --service-name.
    #[arg(long, env = "WAKE_ON_ARRIVAL")]
    pub(crate) wake_on_arrival: bool,
    #[command(flatten)]
    pub(crate) services: ServiceArgs,
}

/// The key store the /v1 routes' API keys are read from (API_KEYS_SECRET_ID), and how long its keys are kept.
struct KeyStoreChoice {
    secret_id: String,
    fresh_for: Duration,
}

/// Where the API listens, its connections' limits and the memory its bodies may hold.
struct Serving {
    listen: SocketAddr,
    limits: HttpLimits,
    bodies: BodyBudget,
}

pub struct Config {
    http: Serving,
    dispatch: DispatchSettings,
    destination: Destination,
    callbacks: OutboundPolicy,
    events: EventArgs,
    wiring: Wiring,
    openai: Settings,
    key_store: Option<KeyStoreChoice>,
}

/// Where an accepted request goes (the router's `Dispatch`, as configured): each tier's lanes, the routing rules,
/// and each tier's ECS service when the router wakes them on arrival.
struct DispatchSettings {
    queues: PerTier<Lanes<QueueSource>>,
    routing: RoutingSettings,
    wake: Option<PerTier<crate::ports::Service>>,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        let queues = self.queues.sources(&Tier::ALL)?;
        let wake = self.wake.services(queues.small.normal.is_embedded())?;
        Ok(Config {
            key_store: self.keys.choice(!self.http.api_key.is_empty())?,
            http: Serving { listen: self.http.listen, limits: self.http.limits(), bodies: self.http.body_budget() },
            openai: self.http.openai(&self.routing)?,
            destination: Destination::parse(self.output_destination.as_deref(), &self.data.data_dir)?,
            dispatch: DispatchSettings { queues, routing: self.routing.settings(None)?, wake },
            callbacks: self.callbacks.policy(),
            events: self.events,
            wiring: Wiring::new(self.data.data_dir),
        })
    }
}

impl WakeArgs {
    /// Each tier's ECS service when the router wakes them; refused on the embedded queues.
    fn services(&self, embedded: bool) -> anyhow::Result<Option<PerTier<crate::ports::Service>>> {
        if self.wake_on_arrival && embedded {
            anyhow::bail!(
                "WAKE_ON_ARRIVAL sets ECS services' desired counts: it needs the tiers on SQS (their queue URLs), not \
                 the embedded queues (gpuinfer dev wakes its engines on its own)"
            );
        }
        Ok(self
            .wake_on_arrival
            .then(|| PerTier { small: self.services.service(Tier::Small), large: self.services.service(Tier::Large) }))
    }
}

impl ApiKeysArgs {
    /// The key store to read the keys from, when API_KEYS_SECRET_ID names one; refused beside --api-key.
    fn choice(&self, api_key_given: bool) -> anyhow::Result<Option<KeyStoreChoice>> {
        Ok(match self.api_keys_secret_id.as_deref().map(str::trim).filter(|id| !id.is_empty()) {
            Some(_) if api_key_given => anyhow::bail!(
                "API_KEYS_SECRET_ID and --api-key (GPUINFER_API_KEY) are both set: take the keys from the secret or \
                 from the command line, not both"
            ),
            Some(id) => Some(KeyStoreChoice {
                secret_id: id.to_owned(),
                fresh_for: Duration::from_secs(self.api_keys_cache_seconds),
            }),
            None => None,
        })
    }
}

pub(crate) async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let wiring = &config.wiring;
    let lanes = |tier: Tier| {
        wiring.lanes(config.dispatch.queues.get(tier), tier, tier.queue_visibility_timeout(), DEFAULT_MAX_RECEIVE_COUNT)
    };
    let store = wiring.store(&config.destination).await?;
    let state = Arc::new(AppState {
        dispatch: Dispatch {
            queues: PerTier { small: lanes(Tier::Small).await?, large: lanes(Tier::Large).await? },
            routing: config.dispatch.routing.config.clone(),
            classifier: config.dispatch.routing.classifier(wiring).await?,
            wake: match &config.dispatch.wake {
                Some(services) => {
                    let ecs = Arc::new(EcsServices::new(aws_sdk_ecs::Client::new(wiring.sdk().await)));
                    Some(Arc::new(WakeOnArrival::new(services.clone(), ecs.clone(), ecs, AWS_RECHECK)))
                }
                None => None,
            },
        },
        store,
        callbacks: CallbackAcceptance::sent_under(config.callbacks),
        metrics: Emf::stdout(),
        bodies: config.http.bodies.clone(),
        openai: openai_settings(&config, wiring).await,
        events: openai_events(&config, wiring).await?,
    });
    if running_on_lambda() {
        let api = app(Arc::clone(&state));
        return lambda_http::lambda_runtime::run(lambda_http::lambda_runtime::service_fn(|event| {
            lambda_invocation(Arc::clone(&state), api.clone(), event)
        }))
        .await
        .map_err(|e| anyhow::anyhow!("Lambda runtime failed: {e}"));
    }
    let upkeep = tokio::spawn(upkeep::run_periodically(Arc::clone(&state), upkeep::SERVER_PERIOD, shutdown.clone()));
    let served = serve(config.http.listen, app(state), config.http.limits, shutdown).await;
    let _ = upkeep.await;
    served
}

/// What the schedule sends the router's function every minute (template.yaml's UpkeepSchedule), rather than an
/// API Gateway request.
pub(crate) const UPKEEP_EVENT: &str = "upkeep";

/// One invocation of the router's function: the schedule's upkeep event (`{"gpuinfer": "upkeep"}`), or an API
/// Gateway request, answered through lambda_http's adapter.
async fn lambda_invocation(
    state: Arc<AppState>,
    api: axum::Router,
    event: LambdaEvent<Value>,
) -> Result<Value, lambda_http::Error> {
    if event.payload.get("gpuinfer").and_then(Value::as_str) == Some(UPKEEP_EVENT) {
        let (batches, events) = upkeep::upkeep(&state).await;
        return Ok(json!({ "batches": batches, "events": events }));
    }
    let request: LambdaRequest = serde_json::from_value(event.payload)?;
    let event = LambdaEvent { payload: lambda_event(request), context: event.context };
    let response = lambda_http::Adapter::from(api).call(event).await?;
    Ok(serde_json::to_value(response)?)
}

/// An API Gateway event made safe for lambda_http's conversion to an HTTP request. API Gateway passes the
/// query string as the client sent it, and a character a URI may not hold (`"`, `{`, `|`, non-ASCII…) makes
/// that conversion panic, which the client sees as a 500. Such characters are percent-encoded instead, so
/// the request reaches the handlers and gets their answer.
pub fn lambda_event(mut event: LambdaRequest) -> LambdaRequest {
    if let LambdaRequest::ApiGatewayV2(request) = &mut event
        && let Some(query) = &mut request.raw_query_string
    {
        *query = uri_safe(query);
    }
    event
}

/// `text` with every byte a URI query may not hold percent-encoded.
fn uri_safe(text: &str) -> String {
    const KEPT: &[u8] = b"-._~!$&'()*+,;=:@/?%";
    let mut safe = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || KEPT.contains(&byte) {
            safe.push(char::from(byte));
        } else {
            safe.push_str(&format!("%{byte:02X}"));
        }
    }
    safe
}

/// What sends the OpenAI-shaped events, when OPENAI_WEBHOOK_URL is set: signed with OPENAI_WEBHOOK_SECRET, else with
/// the secret OPENAI_WEBHOOK_SECRET_ID names.
async fn openai_events(config: &Config, wiring: &Wiring) -> anyhow::Result<Option<OpenAiEvents>> {
    let mut webhook = config.events.openai_webhook.clone();
    if let Some(id) = config.events.openai_webhook_secret_id.as_deref().filter(|_| webhook.wants_secret()) {
        let client = aws_sdk_secretsmanager::Client::new(wiring.sdk().await);
        let stored = SecretKeyStore::new(client, id.to_owned()).read().await;
        let stored =
            stored.with_context(|| format!("reading the OpenAI events' signing key, OPENAI_WEBHOOK_SECRET_ID {id}"))?;
        let secret = stored.parse().map_err(|e| anyhow::anyhow!("OPENAI_WEBHOOK_SECRET_ID {id}: {e}"))?;
        webhook.openai_webhook_secret = Some(secret);
    }
    let events = webhook.config(config.callbacks)?;
    Ok(events.map(|events| OpenAiEvents::new(events, Emf::stdout())).transpose()?)
}

/// The OpenAI-compatible API's settings, guarded by the key store's keys when API_KEYS_SECRET_ID names one.
async fn openai_settings(config: &Config, wiring: &Wiring) -> Settings {
    let mut settings = config.openai.clone();
    if let Some(choice) = &config.key_store {
        let client = aws_sdk_secretsmanager::Client::new(wiring.sdk().await);
        let store = Arc::new(SecretKeyStore::new(client, choice.secret_id.clone()));
        settings.api_keys = Some(KeySource::Stored(Arc::new(StoredKeys::new(store, choice.fresh_for))));
    }
    settings
}

/// Serves the API on `listen` until `shutdown`, within `limits` (see `http_server::serve`).
pub(crate) async fn serve(
    listen: SocketAddr,
    app: axum::Router,
    limits: HttpLimits,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen} (in use? choose another with --listen)"))?;
    tracing::info!(address = %listen, "router listening");
    server::serve(listener, app, limits, shutdown).await;
    Ok(())
}
