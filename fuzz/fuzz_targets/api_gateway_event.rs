//! Fuzz target: the router's Lambda path. The input is split into method, path, query string, one header
//! and a body, made into an API Gateway HTTP API event, made safe and converted as the router's Lambda
//! does, and answered by the router app: never a panic, always an answer the API promises.
#![no_main]

#[path = "../../tests/support/answers.rs"]
mod answers;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use axum::http::Request;
use gpuinfer::metrics::Emf;
use gpuinfer::{
    AppState, BodyBudget, CallbackAcceptance, Dispatch, LocalBackends, OutboundPolicy, PerTier, Queue, RoutingConfig,
    Tier, app, lambda_event,
};
use http_body_util::BodyExt;
use lambda_http::request::LambdaRequest;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use tower::ServiceExt;

struct Router {
    _dir: tempfile::TempDir,
    state: Arc<AppState>,
    runtime: tokio::runtime::Runtime,
}

static ROUTER: LazyLock<Router> = LazyLock::new(|| {
    let dir = tempfile::tempdir().expect("a temporary data directory");
    let backends = LocalBackends::open(dir.path()).expect("embedded backends");
    let lanes = |tier| backends.tier_lanes(tier, Duration::from_secs(30), 3).map(|q| q as Arc<dyn Queue>);
    let state = Arc::new(AppState {
        dispatch: Dispatch {
            queues: PerTier { small: lanes(Tier::Small), large: lanes(Tier::Large) },
            routing: RoutingConfig::default(),
            classifier: None,
            wake: None,
        },
        store: backends.store.clone(),
        callbacks: CallbackAcceptance::sent_under(OutboundPolicy::default()),
        metrics: Emf::discard(),
        bodies: BodyBudget::default(),
        openai: Default::default(),
        events: None,
    });
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
    Router { _dir: dir, state, runtime }
});

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(5, |&b| b == b'\n').map(|part| String::from_utf8_lossy(part).into_owned());
    let mut next = || parts.next().unwrap_or_default();
    let (method, path, query, header, body) = (next(), next(), next(), next(), next());
    let (name, value) = header.split_once(':').unwrap_or(("x-fuzz", header.as_str()));
    let name = name.trim().to_ascii_lowercase();
    if name == "host" || name == "x-forwarded-proto" {
        return; // set by API Gateway itself, never by the client
    }
    let event = json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": format!("/{path}"),
        "rawQueryString": query,
        "headers": { name: value.trim() },
        "requestContext": {
            "accountId": "123456789012", "apiId": "api", "domainName": "api.example.com",
            "http": { "method": method, "path": format!("/{path}"), "protocol": "HTTP/1.1",
                      "sourceIp": "127.0.0.1", "userAgent": "fuzz" },
            "requestId": "id", "routeKey": "$default", "stage": "$default", "time": "", "timeEpoch": 0
        },
        "body": body,
        "isBase64Encoded": false
    });
    // Events API Gateway could not send (a method or header name that is not a token) fail here, before the app.
    let Ok(event) = serde_json::from_value::<LambdaRequest>(event) else { return };
    let request: Request<lambda_http::Body> = lambda_event(event).into();
    let router = &*ROUTER;
    let (status, answer) = router.runtime.block_on(async {
        let response = app(Arc::clone(&router.state)).oneshot(request).await.expect("the router always answers");
        let status = response.status();
        let bytes = response.into_body().collect().await.expect("a body").to_bytes();
        (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
    });
    answers::assert_clear_answer(status, &answer);
});
