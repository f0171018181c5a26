//! The Bedrock classifier against a local stub of the Converse REST API (POST /model/{modelId}/converse): its answers
//! route the ambiguous zone; Bedrock's refusals fall back to small, each counted, and are reported at ERROR with the
//! fix once, not once per request.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use gpuinfer::{BedrockClassifier, Classifier, InferenceRequest, Intake, Reason, RoutingConfig, Tier, route};
use serde_json::{Value, json};

use crate::support::SharedBuf;
use crate::support::router::{call, fixture, post as post_infer};

/// A refusal as Bedrock sends it (restJson1): the HTTP status, the error type in `x-amzn-ErrorType`, a JSON message.
type Refusal = (u16, &'static str, &'static str);

/// Bedrock User Guide, "Troubleshooting Amazon Bedrock API Error Codes" (AccessDeniedException 403, ResourceNotFound
/// 404, ValidationError 400, ThrottlingException 429), with the messages Bedrock sends for each case.
const IAM_DENIED: Refusal = (
    403,
    "AccessDeniedException",
    "User: arn:aws:sts::123456789012:assumed-role/gpuinfer-RouterRole/gpuinfer-router is not authorized to perform: \
     bedrock:InvokeModel on resource: arn:aws:bedrock:us-west-2::foundation-model/amazon.nova-micro-v1:0 because no \
     identity-based policy allows the bedrock:InvokeModel action",
);
const NO_MODEL_ACCESS: Refusal =
    (403, "AccessDeniedException", "You don't have access to the model with the specified model ID.");
const ON_DEMAND_UNSUPPORTED: Refusal = (
    400,
    "ValidationException",
    "Invocation of model ID amazon.nova-micro-v1:0 with on-demand throughput isn\u{2019}t supported. Retry your \
     request with the ID or ARN of an inference profile that contains this model.",
);
const NOT_FOUND: Refusal = (404, "ResourceNotFoundException", "Model not found.");
const THROTTLED: Refusal = (429, "ThrottlingException", "Too many requests, please wait before trying again.");

#[derive(Default)]
struct Stub {
    answer: Mutex<(String, Duration)>,
    refusal: Mutex<Option<Refusal>>,
    models: Mutex<Vec<String>>,
}

async fn converse(State(stub): State<Arc<Stub>>, Path(model): Path<String>, Json(_body): Json<Value>) -> Response {
    stub.models.lock().unwrap().push(model);
    let refusal = *stub.refusal.lock().unwrap();
    if let Some((status, kind, message)) = refusal {
        let kind = format!("{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/");
        let headers = [("x-amzn-errortype", kind.as_str()), ("content-type", "application/json")];
        return (StatusCode::from_u16(status).unwrap(), headers, json!({ "message": message }).to_string())
            .into_response();
    }
    let (text, delay) = stub.answer.lock().unwrap().clone();
    tokio::time::sleep(delay).await;
    Json(json!({
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 10, "outputTokens": 1, "totalTokens": 11},
        "metrics": {"latencyMs": 5}
    }))
    .into_response()
}

async fn start_stub() -> (Arc<Stub>, String) {
    let stub = Arc::new(Stub::default());
    let app = Router::new().route("/model/{model}/converse", post(converse)).with_state(Arc::clone(&stub));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (stub, url)
}

/// A Bedrock Runtime client of `region` that calls the stub at `url`, without retries.
async fn client(url: &str, region: &'static str) -> aws_sdk_bedrockruntime::Client {
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(url)
        .region(aws_config::Region::new(region))
        .credentials_provider(aws_sdk_bedrockruntime::config::Credentials::new("test", "test", None, None, "stub"))
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .load()
        .await;
    aws_sdk_bedrockruntime::Client::new(&sdk)
}

#[tokio::test]
async fn bedrock_answers_route_the_ambiguous_zone_and_failures_fall_back_to_small() {
    let (stub, url) = start_stub().await;
    let classifier = BedrockClassifier::new(client(&url, "us-east-1").await, Some("amazon.nova-micro-v1:0".into()));
    let config = RoutingConfig { classifier_timeout: Duration::from_millis(1500), ..Default::default() };
    let body = json!({"prompt": "Compare two approaches to tensor parallelism. ".repeat(15)}).to_string();
    let ambiguous = InferenceRequest::parse(body.as_bytes(), Intake::Api(chrono::Utc::now())).unwrap();

    *stub.answer.lock().unwrap() = ("large".into(), Duration::ZERO);
    assert_eq!(route(&ambiguous, &config, Some(&classifier)).await, (Tier::Large, Reason::Classifier));
    assert_eq!(stub.models.lock().unwrap().as_slice(), ["amazon.nova-micro-v1:0"]);

    *stub.answer.lock().unwrap() = ("Small".into(), Duration::ZERO);
    assert_eq!(route(&ambiguous, &config, Some(&classifier)).await, (Tier::Small, Reason::Classifier));

    *stub.answer.lock().unwrap() = ("¯\\_(ツ)_/¯".into(), Duration::ZERO);
    assert_eq!(route(&ambiguous, &config, Some(&classifier)).await, (Tier::Small, Reason::ClassifierFallback));

    *stub.answer.lock().unwrap() = ("large".into(), Duration::from_secs(10));
    let started = Instant::now();
    assert_eq!(route(&ambiguous, &config, Some(&classifier)).await, (Tier::Small, Reason::ClassifierFallback));
    assert!(started.elapsed() < Duration::from_millis(2000), "gave up within the 1.5 s budget");
}

/// With no model given (the stack's BedrockModelId empty), the classifier calls Nova Micro through the inference
/// profile of its client's Region (us-west-2 serves Nova Micro only through one), and the model itself where no
/// profile serves the Region.
#[tokio::test]
async fn without_a_model_the_classifier_calls_nova_micro_through_its_regions_inference_profile() {
    let body = json!({"prompt": "Compare two approaches to tensor parallelism. ".repeat(15)}).to_string();
    let ambiguous = InferenceRequest::parse(body.as_bytes(), Intake::Api(chrono::Utc::now())).unwrap();
    let config = RoutingConfig { classifier_timeout: Duration::from_millis(1500), ..Default::default() };
    for (region, expected) in [
        ("us-west-2", "us.amazon.nova-micro-v1:0"),
        ("eu-west-1", "eu.amazon.nova-micro-v1:0"),
        ("ap-northeast-1", "apac.amazon.nova-micro-v1:0"),
        ("sa-east-1", "amazon.nova-micro-v1:0"),
    ] {
        let (stub, url) = start_stub().await;
        *stub.answer.lock().unwrap() = ("large".into(), Duration::ZERO);
        let classifier = BedrockClassifier::new(client(&url, region).await, None);
        assert_eq!(route(&ambiguous, &config, Some(&classifier)).await, (Tier::Large, Reason::Classifier));
        assert_eq!(stub.models.lock().unwrap().as_slice(), [expected], "{region}");
    }
}

/// The messages of the ERROR lines in a JSON log.
fn errors(log: &SharedBuf) -> Vec<String> {
    let lines = log.json_lines();
    let errors = lines.iter().filter(|line| line["level"] == "ERROR");
    errors.map(|line| line["fields"]["message"].as_str().unwrap_or_default().to_owned()).collect()
}

/// The sum of `metric` over the router's EMF lines.
fn counted(emf: &SharedBuf, metric: &str) -> f64 {
    emf.json_lines().iter().filter_map(|line| line[metric].as_f64()).sum()
}

/// POSTs one ambiguous request (500 to 2000 characters) to the router: the tier it went to.
async fn submit(state: &Arc<gpuinfer::AppState>) -> String {
    let body = json!({"prompt": "Compare two approaches to tensor parallelism. ".repeat(15)}).to_string();
    let (status, answer) = call(state, post_infer(body)).await;
    assert_eq!(status, 202, "{answer}");
    answer["tier"].as_str().unwrap().to_owned()
}

/// The walkthrough's failure: a stack in us-west-2 whose classifier Bedrock refuses. Every ambiguous request still
/// goes to small and is counted as a ClassifierFallbacks; the log says what is wrong and what to do, at ERROR, once
/// per kind of refusal rather than once per request.
#[tokio::test]
async fn a_refused_classifier_is_reported_once_with_its_fix_and_every_fallback_is_counted() {
    let log = SharedBuf::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt().json().with_writer(move || writer.clone()).finish();
    let _logging = tracing::subscriber::set_default(subscriber);
    // tracing decides once, for every thread, whether a log statement is wanted: while a single subscriber is
    // registered it asks the calling thread's, so a test on another thread (without one) that logs first would turn
    // the statements this test reads off for all. With a second one registered, it asks every registered subscriber.
    let _ask_every_subscriber = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
    let (stub, url) = start_stub().await;
    let classifier = BedrockClassifier::new(client(&url, "us-west-2").await, Some("amazon.nova-micro-v1:0".into()));
    let mut router = fixture();
    let state = Arc::get_mut(&mut router.state).unwrap();
    state.dispatch.classifier = Some(Arc::new(classifier));
    // Refusals, not the 1.5 s budget on a busy machine, are what this test is about.
    state.dispatch.routing.classifier_timeout = Duration::from_secs(30);

    *stub.refusal.lock().unwrap() = Some(IAM_DENIED);
    for _ in 0..3 {
        assert_eq!(submit(&router.state).await, "small", "a refused classifier falls back to small");
    }
    let reported = errors(&log);
    assert_eq!(reported.len(), 1, "one ERROR for three refusals: {:#?}", log.json_lines());
    assert!(
        reported[0].contains(
            "grant bedrock:InvokeModel on arn:aws:bedrock:us-west-2::foundation-model/amazon.nova-micro-v1:0"
        ),
        "the ERROR names the grant that is missing: {}",
        reported[0]
    );
    assert_eq!(counted(&router.emf, "ClassifierFallbacks"), 3.0, "each fallback is counted");

    *stub.refusal.lock().unwrap() = Some(ON_DEMAND_UNSUPPORTED);
    for _ in 0..3 {
        assert_eq!(submit(&router.state).await, "small");
    }
    let reported = errors(&log);
    assert_eq!(reported.len(), 2, "a new kind of refusal is reported at once, and once: {reported:#?}");
    assert!(
        reported[1].contains(
            "set BedrockModelId (BEDROCK_MODEL_ID) to an inference profile id such as us.amazon.nova-micro-v1:0"
        ),
        "the ERROR names the inference profile of the Region: {}",
        reported[1]
    );
    assert_eq!(counted(&router.emf, "ClassifierFallbacks"), 6.0);

    *stub.refusal.lock().unwrap() = None;
    *stub.answer.lock().unwrap() = ("large".into(), Duration::ZERO);
    assert_eq!(submit(&router.state).await, "large", "the classifier decides again once Bedrock answers");
    assert_eq!(errors(&log).len(), 2);
    assert_eq!(counted(&router.emf, "ClassifierFallbacks"), 6.0, "an answer is no fallback");
    assert_eq!(counted(&router.emf, "RoutedRequests"), 7.0);
}

/// Each of Bedrock's documented refusals comes back with the fix for it.
#[tokio::test]
async fn each_bedrock_refusal_says_what_to_do() {
    let (stub, url) = start_stub().await;
    let classifier = BedrockClassifier::new(client(&url, "eu-west-1").await, Some("amazon.nova-micro-v1:0".into()));
    for (refusal, fix) in [
        (NO_MODEL_ACCESS, "enable model access for it in the Bedrock console of eu-west-1"),
        (ON_DEMAND_UNSUPPORTED, "inference profile id such as eu.amazon.nova-micro-v1:0"),
        (NOT_FOUND, "enable model access in the Bedrock console"),
        (THROTTLED, "ThrottlingException"),
    ] {
        *stub.refusal.lock().unwrap() = Some(refusal);
        let error = classifier.classify("a question").await.unwrap_err().to_string();
        assert!(error.contains(fix), "{}: {error}", refusal.1);
    }
}
