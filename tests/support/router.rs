//! The router app over embedded backends in a temporary directory, called with `oneshot` (no socket).

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{Request, StatusCode};
use gpuinfer::{
    AppState, BodyBudget, CallbackAcceptance, Dispatch, LocalBackends, LocalQueue, OutboundPolicy, PerTier, Priority,
    Queue, RoutingConfig, Tier, app, metrics::Emf,
};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use super::SharedBuf;

pub(crate) struct Fixture {
    _dir: tempfile::TempDir,
    pub backends: LocalBackends,
    pub state: Arc<AppState>,
    /// The EMF lines the router wrote.
    pub emf: SharedBuf,
}

pub(crate) fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let backends = LocalBackends::open(dir.path()).unwrap();
    let emf = SharedBuf::default();
    let lanes = |tier| backends.tier_lanes(tier, Duration::from_secs(30), 3).map(|q| q as Arc<dyn Queue>);
    let state = Arc::new(AppState {
        dispatch: Dispatch {
            queues: PerTier { small: lanes(Tier::Small), large: lanes(Tier::Large) },
            routing: RoutingConfig::default(),
            classifier: None,
            wake: None,
        },
        bodies: BodyBudget::default(),
        openai: Default::default(),
        events: None,
        store: backends.store.clone(),
        callbacks: CallbackAcceptance::sent_under(OutboundPolicy::default()),
        metrics: Emf::to_writer(emf.clone()),
    });
    Fixture { _dir: dir, backends, state, emf }
}

impl Fixture {
    /// One lane's queue of a tier, as the router's state holds it.
    pub(crate) fn lane(&self, tier: Tier, lane: Priority) -> Arc<LocalQueue> {
        self.backends.lane_queue(tier, lane, Duration::from_secs(30), 3)
    }
}

/// The status and JSON body (Null when the body is not JSON) of one request through the app.
pub(crate) async fn call<B>(state: &Arc<AppState>, request: Request<B>) -> (StatusCode, Value)
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    let response = app(Arc::clone(state)).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

pub(crate) fn post(body: impl Into<Body>) -> Request<Body> {
    Request::post("/infer").header("content-type", "application/json").body(body.into()).unwrap()
}

pub(crate) fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}

/// The batch `batch` (as POST /v1/batches answered it, `validating`) once its lines were checked: `failed`, or
/// `in_progress` with every line queued.
pub(crate) async fn admitted(state: &Arc<AppState>, batch: &Value, key: Option<&str>) -> Value {
    let path = format!("/v1/batches/{}", batch["id"].as_str().unwrap_or_else(|| panic!("not a batch: {batch}")));
    super::eventually(Duration::from_secs(20), "the batch's lines checked", || async {
        let mut request = get(&path);
        if let Some(key) = key {
            request.headers_mut().insert("authorization", format!("Bearer {key}").parse().unwrap());
        }
        let (_, batch) = call(state, request).await;
        (batch["status"] != "validating").then_some(batch)
    })
    .await
}
