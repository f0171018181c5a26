//! `gpuinfer router`: the HTTP API, as an AWS Lambda (API Gateway HTTP API) or a local HTTP server.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use lambda_http::LambdaEvent;
use lambda_http::request::LambdaRequest;
use tokio_util::sync::CancellationToken;

use crate::cmd::args::{CallbackPolicyArgs, DataDirArgs, HttpServerArgs, RoutingArgs, RoutingSettings, TierQueueArgs};
use crate::cmd::backends::{Destination, QueueSource, Wiring};
use crate::cmd::running_on_lambda;
use crate::contract::tier::{Lanes, PerTier, Tier};
use crate::http::server::{self, HttpLimits};
use crate::infra::metrics::Emf;
use crate::ports::DEFAULT_MAX_RECEIVE_COUNT;
use crate::router::body_budget::BodyBudget;
use crate::router::state::AppState;
use crate::router::{app, lambda_event};
use crate::worker::callbacks::outbound::OutboundPolicy;

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
}

pub struct Config {
    listen: SocketAddr,
    http: HttpLimits,
    bodies: BodyBudget,
    queues: PerTier<Lanes<QueueSource>>,
    destination: Destination,
    routing: RoutingSettings,
    callbacks: OutboundPolicy,
    wiring: Wiring,
    openai: crate::router::openai::settings::Settings,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        let queues = self.queues.sources(&Tier::ALL)?;
        Ok(Config {
            listen: self.http.listen,
            http: self.http.limits(),
            bodies: self.http.body_budget(),
            openai: self.http.openai(&self.routing),
            queues,
            destination: Destination::parse(self.output_destination.as_deref(), &self.data.data_dir)?,
            routing: self.routing.settings(None)?,
            callbacks: self.callbacks.policy(),
            wiring: Wiring::new(self.data.data_dir),
        })
    }
}

pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let wiring = &config.wiring;
    let lanes = |tier: Tier| {
        wiring.lanes(config.queues.get(tier), tier, tier.default_visibility_timeout(), DEFAULT_MAX_RECEIVE_COUNT)
    };
    let state = Arc::new(AppState {
        queues: PerTier { small: lanes(Tier::Small).await?, large: lanes(Tier::Large).await? },
        store: wiring.store(&config.destination).await?,
        routing: config.routing.config.clone(),
        classifier: config.routing.classifier(wiring).await?,
        callbacks: config.callbacks,
        callbacks_sent: true,
        metrics: Emf::stdout(),
        bodies: config.bodies.clone(),
        openai: config.openai.clone(),
    });
    if running_on_lambda() {
        let service = lambda_http::tower::ServiceBuilder::new()
            .map_request(|event: LambdaEvent<LambdaRequest>| LambdaEvent {
                payload: lambda_event(event.payload),
                ..event
            })
            .service(lambda_http::Adapter::from(app(state)));
        return lambda_http::lambda_runtime::run(service)
            .await
            .map_err(|e| anyhow::anyhow!("Lambda runtime failed: {e}"));
    }
    serve(config.listen, state, config.http, shutdown).await
}

/// Serves the API on `listen` until `shutdown`, within `limits` (see `http_server::serve`).
pub(crate) async fn serve(
    listen: SocketAddr,
    state: Arc<AppState>,
    limits: HttpLimits,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen} (in use? choose another with --listen)"))?;
    tracing::info!(address = %listen, "router listening");
    server::serve(listener, app(state), limits, shutdown).await;
    Ok(())
}
