//! `gpuinfer router`: the HTTP API, as an AWS Lambda (API Gateway HTTP API) or a local HTTP server.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use lambda_http::LambdaEvent;
use lambda_http::request::LambdaRequest;
use tokio_util::sync::CancellationToken;

use crate::aws::ecs::EcsServices;
use crate::cmd::args::{
    CallbackPolicyArgs, DataDirArgs, HttpServerArgs, RoutingArgs, RoutingSettings, ServiceArgs, TierQueueArgs,
};
use crate::cmd::backends::{Destination, QueueSource, Wiring};
use crate::cmd::running_on_lambda;
use crate::contract::tier::{Lanes, PerTier, Tier};
use crate::http::server::{self, HttpLimits};
use crate::infra::metrics::Emf;
use crate::ports::DEFAULT_MAX_RECEIVE_COUNT;
use crate::router::body_budget::BodyBudget;
use crate::router::state::AppState;
use crate::router::{app, lambda_event};
use crate::scaler::wake::{AWS_RECHECK, WakeOnArrival};
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
    /// When work is enqueued for a tier whose ECS service has no task asked for, set its desired count to 1 at once
    /// (DescribeServices, then UpdateService), instead of waiting for the scaler's next tick and an alarm's period.
    /// SQS only: the services are --cluster-name and --service-name.
    #[arg(long, env = "WAKE_ON_ARRIVAL")]
    pub(crate) wake_on_arrival: bool,
    #[command(flatten)]
    pub(crate) services: ServiceArgs,
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
    /// Each tier's ECS service, when the router wakes them on arrival.
    wake: Option<PerTier<crate::ports::Service>>,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        let queues = self.queues.sources(&Tier::ALL)?;
        if self.wake_on_arrival && queues.small.normal.is_embedded() {
            anyhow::bail!(
                "WAKE_ON_ARRIVAL sets ECS services' desired counts: it needs the tiers on SQS (their queue URLs), not \
                 the embedded queues (gpuinfer dev wakes its engines on its own)"
            );
        }
        let wake = self
            .wake_on_arrival
            .then(|| PerTier { small: self.services.service(Tier::Small), large: self.services.service(Tier::Large) });
        Ok(Config {
            wake,
            listen: self.http.listen,
            http: self.http.limits(),
            bodies: self.http.body_budget(),
            openai: self.http.openai(&self.routing)?,
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
        wake: match &config.wake {
            Some(services) => {
                let ecs = Arc::new(EcsServices::new(aws_sdk_ecs::Client::new(wiring.sdk().await)));
                Some(Arc::new(WakeOnArrival::new(services.clone(), ecs.clone(), ecs, AWS_RECHECK)))
            }
            None => None,
        },
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
