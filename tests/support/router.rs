//! The router app over embedded backends in a temporary directory, called with `oneshot` (no socket).

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{Request, StatusCode};
use gpuinfer::local::LocalBackends;
use gpuinfer::metrics::Emf;
use gpuinfer::ports::Queue;
use gpuinfer::router::{AppState, app};
use gpuinfer::routing::{PerTier, RoutingConfig, Tier};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use super::SharedBuf;

pub struct Fixture {
    _dir: tempfile::TempDir,
    pub backends: LocalBackends,
    pub state: Arc<AppState>,
    /// The EMF lines the router wrote.
    pub emf: SharedBuf,
}

pub fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let backends = LocalBackends::open(dir.path()).unwrap();
    let emf = SharedBuf::default();
    let queue = |tier| -> Arc<dyn Queue> { backends.tier_queue(tier, Duration::from_secs(30), 3) };
    let state = Arc::new(AppState {
        queues: PerTier { small: queue(Tier::Small), large: queue(Tier::Large) },
        store: backends.store.clone(),
        routing: RoutingConfig::default(),
        classifier: None,
        metrics: Emf::to_writer(emf.clone()),
    });
    Fixture { _dir: dir, backends, state, emf }
}

/// The status and JSON body (Null when the body is not JSON) of one request through the app.
pub async fn call<B>(state: &Arc<AppState>, request: Request<B>) -> (StatusCode, Value)
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    let response = app(Arc::clone(state)).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

pub fn post(body: impl Into<Body>) -> Request<Body> {
    Request::post("/infer").header("content-type", "application/json").body(body.into()).unwrap()
}

pub fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}
