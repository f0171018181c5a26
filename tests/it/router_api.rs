//! Router handlers through `app(state).oneshot(..)` (no socket): every status code of the API.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::router::{Fixture, call, fixture, get, post};
use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpuinfer::{
    AppState, CallbackAcceptance, Dispatch, Lanes, Message, OutboundPolicy, PerTier, Priority, Queue, QueueCounts,
    QueueError, RequestId, ResultStore, RoutingConfig, Tier, metrics::Emf,
};
use serde_json::{Value, json};

#[tokio::test]
async fn accepted_requests_are_enqueued_on_their_tier_and_counted() {
    let f = fixture();
    let id = "550e8400-e29b-41d4-a716-446655440000";
    let (status, body) = call(&f.state, post(json!({"requestId": id, "prompt": "hi"}).to_string())).await;
    assert_eq!((status, body), (StatusCode::ACCEPTED, json!({"requestId": id, "tier": "small"})));
    let (status, body) = call(&f.state, post(json!({"prompt": "hi", "route": "large"}).to_string())).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(body["tier"], "large");
    assert_eq!(uuid::Uuid::parse_str(body["requestId"].as_str().unwrap()).unwrap().get_version_num(), 4);

    let small = f.lane(Tier::Small, Priority::Normal);
    let large = f.lane(Tier::Large, Priority::Normal);
    assert_eq!(small.counts().await.unwrap(), QueueCounts { visible: 1, in_flight: 0, delayed: 0 });
    assert_eq!(large.counts().await.unwrap().visible, 1);
    let queued = small.receive(1, Duration::ZERO).await.unwrap();
    let queued: Value = serde_json::from_str(&queued[0].body).unwrap();
    assert_eq!(queued["requestId"], id);
    assert_eq!(queued["maxTokens"], 256);

    let lines = f.emf.json_lines();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["RoutedRequests"], 1.0);
    assert_eq!(lines[0]["Tier"], "small");
    assert_eq!(lines[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"], "Custom/ECSInference");
    assert_eq!(lines[1]["Tier"], "large");
}

#[tokio::test]
async fn invalid_requests_get_400_naming_the_field() {
    let f = fixture();
    for (body, expected) in [
        (json!({"prompt": ""}).to_string(), "prompt: must not be empty"),
        (json!({"prompt": "hi", "maxTokens": 5000}).to_string(), "maxTokens: must be an integer from 1 to 2048"),
        (json!({"prompt": "hi", "colour": "red"}).to_string(), "colour: unknown field"),
        ("{not json".to_string(), "body: not valid JSON"),
        (String::new(), "body: empty; send a JSON request object"),
    ] {
        let (status, answer) = call(&f.state, post(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let message = answer["error"].as_str().unwrap();
        assert!(message.starts_with(expected), "{body}: {message}");
    }
    let small = f.lane(Tier::Small, Priority::Normal);
    assert_eq!(small.counts().await.unwrap().visible, 0, "nothing invalid is enqueued");
}

#[tokio::test]
async fn bodies_over_the_cap_get_413() {
    let f = fixture();
    let big = json!({"prompt": "x".repeat(1024 * 1024)}).to_string();
    let (status, body) = call(&f.state, post(big)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(body["error"].as_str().unwrap().starts_with("body: larger than"));
    // Under the limit as sent, over it once the router adds the requestId and the defaults: the message says
    // which size broke the limit.
    let nearly = json!({"prompt": "x".repeat(1024 * 1024 - 20)}).to_string();
    assert!(nearly.len() < 1024 * 1024);
    let (status, body) = call(&f.state, post(nearly)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert!(body["error"].as_str().unwrap().contains("-byte queue message"), "{body}");
}

/// Request bodies in memory at once are bounded for the whole server: a body the budget cannot hold is refused
/// with 503 and Retry-After, and a finished request gives its share back.
#[tokio::test]
async fn bodies_beyond_the_servers_body_budget_are_refused_and_freed_after_each_request() {
    let f = fixture();
    let budget = gpuinfer::BodyBudget::new(4096);
    let state = Arc::new(AppState { bodies: budget.clone(), ..clone_state(&f) });
    let small = json!({"prompt": "x".repeat(3000)}).to_string();
    for _ in 0..3 {
        assert_eq!(call(&state, post(small.clone())).await.0, StatusCode::ACCEPTED, "each one's share comes back");
    }
    let mut held = budget.none();
    assert!(budget.take(&mut held, 2000), "another request holds half the budget");
    let request = Request::post("/infer").header("content-type", "application/json").body(Body::from(small)).unwrap();
    let response = tower::ServiceExt::oneshot(gpuinfer::app(Arc::clone(&state)), request).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "1");
    drop(held);
    assert_eq!(call(&state, post(json!({"prompt": "x".repeat(3000)}).to_string())).await.0, StatusCode::ACCEPTED);
}

/// The fixture's state, to change one field of.
fn clone_state(f: &Fixture) -> AppState {
    AppState {
        dispatch: Dispatch { wake: None, ..f.state.dispatch.clone() },
        store: f.state.store.clone(),
        callbacks: f.state.callbacks,
        metrics: Emf::discard(),
        bodies: f.state.bodies.clone(),
        openai: f.state.openai.clone(),
        events: None,
    }
}

/// Other media types get 415, and so does a charset other than UTF-8 (RFC 8259 §8.1: JSON between systems is
/// UTF-8), rather than UTF-8 bytes read under another name; `charset=utf-8` in any case is JSON as usual.
#[tokio::test]
async fn other_content_types_and_charsets_get_415() {
    let f = fixture();
    for content_type in ["text/plain", "application/json; charset=utf-16", "application/json;charset=\"ISO-8859-1\""] {
        let request = Request::post("/infer").header("content-type", content_type).body(Body::from("{}")).unwrap();
        let (status, body) = call(&f.state, request).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{content_type}: {body}");
        assert!(body["error"].as_str().unwrap().starts_with("content-type:"), "{body}");
    }
    let body = Body::from(r#"{"prompt": "hi"}"#);
    let request = Request::post("/infer").header("content-type", "application/json; charset=UTF-8").body(body).unwrap();
    assert_eq!(call(&f.state, request).await.0, StatusCode::ACCEPTED);
}

struct RefusingQueue;

#[async_trait]
impl Queue for RefusingQueue {
    async fn send(&self, _body: &str) -> Result<(), QueueError> {
        Err(QueueError::unavailable("throttled"))
    }
    async fn send_many(&self, bodies: &[String]) -> Vec<Result<(), QueueError>> {
        bodies.iter().map(|_| Err(QueueError::unavailable("throttled"))).collect()
    }
    async fn receive(&self, _max: usize, _wait: Duration) -> Result<Vec<Message>, QueueError> {
        Ok(vec![])
    }
    async fn change_visibility(&self, _receipt: &str, _timeout: Duration) -> Result<(), QueueError> {
        Ok(())
    }
    async fn delete(&self, _receipt: &str) -> Result<(), QueueError> {
        Ok(())
    }
    async fn dead_letter(&self, _message: &Message, _reason: &str) -> Result<(), QueueError> {
        Ok(())
    }
    async fn counts(&self) -> Result<QueueCounts, QueueError> {
        Ok(QueueCounts::default())
    }
}

/// The fixture's router with every queue refusing.
fn refusing(f: &Fixture) -> Arc<AppState> {
    let lanes = || Lanes::from_fn(|_| Arc::new(RefusingQueue) as Arc<dyn Queue>);
    Arc::new(AppState {
        dispatch: Dispatch {
            queues: PerTier { small: lanes(), large: lanes() },
            routing: RoutingConfig::default(),
            classifier: None,
            wake: None,
        },
        bodies: f.state.bodies.clone(),
        openai: f.state.openai.clone(),
        events: None,
        store: f.state.store.clone(),
        callbacks: CallbackAcceptance::sent_under(OutboundPolicy::default()),
        metrics: Emf::discard(),
    })
}

#[tokio::test]
async fn a_refusing_queue_gives_503_never_2xx() {
    let f = fixture();
    let state = refusing(&f);
    let (status, body) = call(&state, post(json!({"prompt": "hi"}).to_string())).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["error"], "queue: unavailable, retry later");
}

#[tokio::test]
async fn results_are_served_pending_or_refused() {
    let f = fixture();
    let id = gpuinfer::RequestId::new_v4();
    let (status, body) = call(&f.state, get(&format!("/results/{id}"))).await;
    assert_eq!((status, body), (StatusCode::NOT_FOUND, json!({"requestId": id, "status": "pending"})));

    let document = json!({"requestId": id, "status": "success", "result": {"text": "ok"}});
    f.backends.store.put_if_absent(id, document.to_string().as_bytes()).await.unwrap();
    let (status, body) = call(&f.state, get(&format!("/results/{id}"))).await;
    assert_eq!((status, body), (StatusCode::OK, document));

    for bad in ["not-a-uuid", "..%2F..%2Fetc%2Fpasswd", "550e8400-e29b-11d4-a716-446655440000"] {
        let (status, body) = call(&f.state, get(&format!("/results/{bad}"))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(body["error"], "requestId: must be a UUID v4");
    }
}

/// The AWS sample accepts a requestId in any case and keys its result by the id as sent: the 202, the stored
/// document's name and GET /results all use the client's own letters.
#[tokio::test]
async fn a_request_id_in_upper_case_is_kept_as_sent() {
    let f = fixture();
    let sent = "550E8400-E29B-41D4-A716-44665544ABCD";
    let (status, body) = call(&f.state, post(json!({"requestId": sent, "prompt": "hi"}).to_string())).await;
    assert_eq!((status, &body["requestId"]), (StatusCode::ACCEPTED, &json!(sent)));
    let queued = f.lane(Tier::Small, Priority::Normal).receive(1, Duration::ZERO).await.unwrap();
    assert!(queued[0].body.contains(sent), "the queued request carries the id as sent: {}", queued[0].body);
    let id = RequestId::parse(sent).unwrap();
    let document = json!({"requestId": sent, "status": "success"});
    f.backends.store.put_if_absent(id, document.to_string().as_bytes()).await.unwrap();
    assert!(f.backends.store.path_of(id).ends_with(format!("results/{sent}.json")), "stored under the id as sent");
    assert_eq!(call(&f.state, get(&format!("/results/{sent}"))).await, (StatusCode::OK, document));
}

#[tokio::test]
async fn healthz_answers_ok() {
    let f = fixture();
    assert_eq!(call(&f.state, get("/healthz")).await, (StatusCode::OK, json!({"status": "ok"})));
}

fn post_to(path: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(path).header("content-type", "application/json").body(body.into()).unwrap()
}

/// The bodies waiting in one lane.
async fn queued(f: &Fixture, tier: Tier, lane: Priority) -> Vec<Value> {
    let messages = f.lane(tier, lane).receive(10, Duration::ZERO).await.unwrap();
    messages.iter().map(|m| serde_json::from_str(&m.body).unwrap()).collect()
}

#[tokio::test]
async fn priority_picks_the_lane_and_a_relative_deadline_travels_absolute() {
    let f = fixture();
    let before = chrono::Utc::now();
    let (status, body) =
        call(&f.state, post(json!({"prompt": "now", "priority": "high", "deadlineSeconds": 60}).to_string())).await;
    assert_eq!((status, &body["tier"]), (StatusCode::ACCEPTED, &json!("small")));
    let (status, _) = call(&f.state, post(json!({"prompt": "whenever", "route": "large"}).to_string())).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let high = queued(&f, Tier::Small, Priority::High).await;
    assert_eq!(high.len(), 1);
    assert_eq!((&high[0]["requestId"], &high[0]["priority"]), (&body["requestId"], &json!("high")));
    let deadline = chrono::DateTime::parse_from_rfc3339(high[0]["deadline"].as_str().unwrap()).unwrap();
    let after = chrono::Utc::now();
    assert!(deadline >= before + chrono::Duration::seconds(60) && deadline <= after + chrono::Duration::seconds(60));
    assert!(queued(&f, Tier::Small, Priority::Normal).await.is_empty());
    assert_eq!(queued(&f, Tier::Large, Priority::Normal).await.len(), 1);
}

#[tokio::test]
async fn callback_urls_follow_the_operators_policy() {
    let f = fixture();
    for (url, expected) in [
        ("http://hooks.example.com/done", "callbackUrl: must be an https:// URL"),
        (
            "https://169.254.169.254/latest/meta-data/",
            "callbackUrl: 169.254.169.254: a link-local (instance metadata) address",
        ),
        ("https://127.0.0.1:9000/hook", "callbackUrl: 127.0.0.1: a loopback address"),
        ("https://10.1.2.3/hook", "callbackUrl: 10.1.2.3: a private-network address"),
    ] {
        let (status, body) = call(&f.state, post(json!({"prompt": "hi", "callbackUrl": url}).to_string())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}");
        assert!(body["error"].as_str().unwrap().starts_with(expected), "{url}: {body}");
    }
    let hook = "https://hooks.example.com/done";
    let (status, _) = call(&f.state, post(json!({"prompt": "hi", "callbackUrl": hook}).to_string())).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(queued(&f, Tier::Small, Priority::Normal).await[0]["callbackUrl"], hook);
    // Behind workers that cannot sign callbacks, even an allowed URL is refused rather than never called.
    let unsigned =
        Arc::new(AppState { callbacks: CallbackAcceptance { sent: false, ..f.state.callbacks }, ..clone_state(&f) });
    let (status, body) = call(&unsigned, post(json!({"prompt": "hi", "callbackUrl": hook}).to_string())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"].as_str().unwrap().starts_with("callbackUrl: no callback can be sent"), "{body}");
}

#[tokio::test]
async fn a_batch_answers_every_entry_and_queues_the_valid_ones_on_their_lanes() {
    let f = fixture();
    let repeated = gpuinfer::RequestId::new_v4();
    let batch = json!([
        {"prompt": "first"},
        {"prompt": ""},
        {"requestId": repeated, "prompt": "urgent", "priority": "high"},
        {"prompt": "big one", "route": "large"},
        {"requestId": repeated, "prompt": "again"},
        {"prompt": "hi", "deadline": "yesterday"},
        "not an object",
    ]);
    let (status, body) = call(&f.state, post_to("/infer/batch", batch.to_string())).await;
    assert_eq!(status, StatusCode::MULTI_STATUS);
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), 7);
    let statuses: Vec<u64> = results.iter().map(|r| r["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, [202, 400, 202, 202, 400, 400, 400]);
    for (i, result) in results.iter().enumerate() {
        assert_eq!(result["index"], i);
    }
    assert_eq!((&results[0]["tier"], &results[3]["tier"]), (&json!("small"), &json!("large")));
    assert_eq!(results[2]["requestId"], json!(repeated));
    for (i, expected) in [
        (1, "prompt: must not be empty"),
        (4, "requestId: repeats an earlier entry"),
        (5, "deadline: must be an RFC 3339"),
        (6, "body: must be a JSON object"),
    ] {
        assert!(results[i]["error"].as_str().unwrap().starts_with(expected), "{i}: {}", results[i]);
    }
    assert_eq!(queued(&f, Tier::Small, Priority::Normal).await[0]["requestId"], results[0]["requestId"]);
    assert_eq!(queued(&f, Tier::Small, Priority::High).await[0]["prompt"], "urgent");
    assert_eq!(queued(&f, Tier::Large, Priority::Normal).await.len(), 1);
    assert_eq!(f.emf.json_lines().len(), 3, "one RoutedRequests line per queued entry");

    let all_good = json!([{"prompt": "a"}, {"prompt": "b", "priority": "high"}]).to_string();
    assert_eq!(call(&f.state, post_to("/infer/batch", all_good)).await.0, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn a_batch_itself_must_be_an_array_of_one_to_a_hundred_requests() {
    let f = fixture();
    let hundred_and_one = Value::Array(vec![json!({"prompt": "x"}); 101]).to_string();
    for (body, expected) in [
        (json!({"prompt": "x"}).to_string(), "body: must be a JSON array of requests"),
        ("[]".to_string(), "body: give 1 to 100 requests, got 0"),
        (hundred_and_one, "body: give 1 to 100 requests, got 101"),
        ("[{".to_string(), "body: not valid JSON"),
        // One parser for /infer and /infer/batch: a key given twice is ambiguous in a batch entry too.
        (r#"[{"prompt": "a", "prompt": "b"}]"#.to_string(), "body: not valid JSON (key \"prompt\" given twice"),
    ] {
        let (status, answer) = call(&f.state, post_to("/infer/batch", body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(answer["error"].as_str().unwrap().starts_with(expected), "{answer}");
    }
    let hundred = Value::Array(vec![json!({"prompt": "x"}); 100]).to_string();
    let (status, answer) = call(&f.state, post_to("/infer/batch", hundred)).await;
    assert_eq!((status, answer["results"].as_array().unwrap().len()), (StatusCode::ACCEPTED, 100));
    let state = refusing(&f);
    let (status, answer) = call(&state, post_to("/infer/batch", json!([{"prompt": "x"}]).to_string())).await;
    assert_eq!((status, &answer["results"][0]["status"]), (StatusCode::MULTI_STATUS, &json!(503)));
}

fn delete(path: &str) -> Request<Body> {
    Request::delete(path).body(Body::empty()).unwrap()
}

#[tokio::test]
async fn cancel_stores_a_canceled_document_once_and_refuses_finished_requests() {
    let f = fixture();
    let never_sent = gpuinfer::RequestId::new_v4();
    let (status, body) = call(&f.state, delete(&format!("/results/{never_sent}"))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "only an accepted request can be canceled: {body}");
    assert!(!f.backends.store.path_of(never_sent).exists(), "no document is made for an id nobody sent");
    let (_, accepted) = call(&f.state, post(json!({"prompt": "cancel me"}).to_string())).await;
    let id = gpuinfer::RequestId::parse(accepted["requestId"].as_str().unwrap()).unwrap();
    let (status, canceled) = call(&f.state, delete(&format!("/results/{id}"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((&canceled["status"], &canceled["error"]["code"]), (&json!("error"), &json!("canceled")));
    assert_eq!(call(&f.state, get(&format!("/results/{id}"))).await, (StatusCode::OK, canceled.clone()));
    assert_eq!(call(&f.state, delete(&format!("/results/{id}"))).await, (StatusCode::OK, canceled), "idempotent");

    let (_, accepted) = call(&f.state, post(json!({"prompt": "finished"}).to_string())).await;
    let done = gpuinfer::RequestId::parse(accepted["requestId"].as_str().unwrap()).unwrap();
    let document = json!({"requestId": done, "status": "success", "result": {"text": "ok"}});
    f.backends.store.put_if_absent(done, document.to_string().as_bytes()).await.unwrap();
    let (status, body) = call(&f.state, delete(&format!("/results/{done}"))).await;
    assert_eq!((status, &body["status"]), (StatusCode::CONFLICT, &json!("success")));
    assert!(body["error"].as_str().unwrap().contains("already finished"), "{body}");
    assert_eq!(call(&f.state, get(&format!("/results/{done}"))).await.1, document, "left as it was");
    assert_eq!(call(&f.state, delete("/results/nope")).await.0, StatusCode::BAD_REQUEST);
}

/// A requestId is one request's: the same request sent again (a client's retry) gets the same 202 and is not run
/// twice; another request with that id is refused with 409 and the status of the one that holds it.
#[tokio::test]
async fn a_reused_request_id_is_refused_and_a_retry_is_answered_as_before() {
    let f = fixture();
    let id = gpuinfer::RequestId::new_v4();
    let first = json!({"requestId": id, "prompt": "the first", "maxTokens": 8});
    let (status, answer) = call(&f.state, post(first.to_string())).await;
    assert_eq!((status, &answer["tier"]), (StatusCode::ACCEPTED, &json!("small")));
    let reordered = json!({"maxTokens": 8, "prompt": "the first", "requestId": id});
    assert_eq!(call(&f.state, post(reordered.to_string())).await, (status, answer.clone()), "a retry: same answer");
    let (status, conflict) = call(&f.state, post(json!({"requestId": id, "prompt": "another"}).to_string())).await;
    assert_eq!((status, &conflict["status"]), (StatusCode::CONFLICT, &json!("pending")), "{conflict}");
    assert!(conflict["error"].as_str().unwrap().starts_with("requestId: already used by another request"));
    let queue = f.lane(Tier::Small, Priority::Normal);
    assert_eq!(queue.counts().await.unwrap().visible, 1, "only the first request was enqueued");

    let done = json!({"requestId": id, "status": "success", "result": {"text": "ok"}});
    f.backends.store.put_if_absent(id, done.to_string().as_bytes()).await.unwrap();
    let (status, conflict) = call(&f.state, post(json!({"requestId": id, "prompt": "later"}).to_string())).await;
    assert_eq!((status, &conflict["status"]), (StatusCode::CONFLICT, &json!("success")));

    let (status, answer) = call(&f.state, post_to("/infer/batch", json!([first]).to_string())).await;
    assert_eq!((status, &answer["results"][0]["status"]), (StatusCode::ACCEPTED, &json!(202)), "a retry in a batch");
    let reused = json!([{"requestId": id, "prompt": "again another"}]).to_string();
    let (status, answer) = call(&f.state, post_to("/infer/batch", reused)).await;
    assert_eq!((status, &answer["results"][0]["status"]), (StatusCode::MULTI_STATUS, &json!(409)), "{answer}");
    assert_eq!(queue.counts().await.unwrap().visible, 1, "nothing more was enqueued");
}

/// A request sent without a requestId gets one the router made, and no acceptance record (the store holds
/// nothing for it until its result): the id sent back in another request is refused as one in use (409, pending,
/// also in a batch), in upper case too; its cancel needs no record (200, canceled); nothing but the first request
/// is ever enqueued.
#[tokio::test]
async fn an_id_the_router_made_needs_no_record_and_is_refused_when_sent_back() {
    let f = fixture();
    let (status, answer) = call(&f.state, post(json!({"prompt": "no id"}).to_string())).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let id = gpuinfer::RequestId::parse(answer["requestId"].as_str().unwrap()).unwrap();
    assert!(id.is_router_made());
    assert_eq!(f.backends.store.acceptance(id).await.unwrap(), None, "no record for an id the router made");
    for sent in [id.to_string(), id.to_string().to_uppercase()] {
        let again = json!({"requestId": sent, "prompt": "no id"}).to_string();
        let (status, conflict) = call(&f.state, post(again)).await;
        assert_eq!((status, &conflict["status"]), (StatusCode::CONFLICT, &json!("pending")), "{conflict}");
    }
    let (status, answer) =
        call(&f.state, post_to("/infer/batch", json!([{"requestId": id, "prompt": "x"}]).to_string())).await;
    assert_eq!((status, &answer["results"][0]["status"]), (StatusCode::MULTI_STATUS, &json!(409)), "{answer}");
    assert_eq!(f.lane(Tier::Small, Priority::Normal).counts().await.unwrap().visible, 1);
    let (status, _) = call(&f.state, delete(&format!("/results/{}", id.to_string().to_uppercase()))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a cancel in another spelling names the router's");
    let (status, canceled) = call(&f.state, delete(&format!("/results/{id}"))).await;
    assert_eq!((status, &canceled["error"]["code"]), (StatusCode::OK, &json!("canceled")), "{canceled}");
}

/// `POST /infer?wait=N`: the result document (200) when it is stored within N seconds, else the usual 202 after N;
/// a retry of an accepted request waits the same way; a wait that is not whole seconds up to the bound is refused.
#[tokio::test]
async fn a_request_sent_with_wait_is_answered_with_its_result_when_it_comes_in_time() {
    let f = fixture();
    for refused in ["abc", "26", "-1"] {
        let (status, answer) = call(&f.state, post_to(&format!("/infer?wait={refused}"), r#"{"prompt":"x"}"#)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "wait={refused}: {answer}");
        assert!(answer["error"].as_str().unwrap().starts_with("wait: whole seconds from 0 to 25"), "{answer}");
    }
    let id = gpuinfer::RequestId::new_v4();
    let request = json!({"requestId": id, "prompt": "answered in time"}).to_string();
    let store = f.backends.store.clone();
    let worker = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let done = json!({"requestId": id, "status": "success", "result": {"text": "in time"}});
        store.put_if_absent(id, done.to_string().as_bytes()).await.unwrap();
    });
    let started = Instant::now();
    let (status, document) = call(&f.state, post_to("/infer?wait=5", request.clone())).await;
    assert_eq!((status, &document["result"]["text"]), (StatusCode::OK, &json!("in time")), "{document}");
    assert!(started.elapsed() < Duration::from_secs(3), "answered as the result came, not after the whole wait");
    worker.await.unwrap();
    let (status, again) = call(&f.state, post_to("/infer?wait=1", request)).await;
    assert_eq!((status, again), (StatusCode::OK, document), "a retry waits (here: finds) the same result");
    let started = Instant::now();
    let (status, answer) = call(&f.state, post_to("/infer?wait=1", r#"{"prompt":"no worker"}"#)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert!(started.elapsed() >= Duration::from_secs(1) && answer["requestId"].is_string());
}

/// Two spellings of one UUID that differ only in case are one id: the second is refused as a reused id (409 with
/// the holder's status, also in a batch, where `status` is the entry's HTTP code and `holderStatus` the holder's),
/// two in one batch are refused as a repeat, a cancel in the other spelling names the holder's, and only the first
/// request is ever enqueued.
#[tokio::test]
async fn ids_that_differ_only_in_case_are_one_id() {
    let f = fixture();
    let (lower, upper) = ("550e8400-e29b-41d4-a716-44665544abcd", "550E8400-E29B-41D4-A716-44665544ABCD");
    let (status, _) = call(&f.state, post(json!({"requestId": lower, "prompt": "first"}).to_string())).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, conflict) = call(&f.state, post(json!({"requestId": upper, "prompt": "first"}).to_string())).await;
    assert_eq!((status, &conflict["status"]), (StatusCode::CONFLICT, &json!("pending")), "{conflict}");
    assert_eq!(conflict["requestId"], upper, "answered with the id as sent");

    let done = json!({"requestId": lower, "status": "success", "result": {"text": "ok"}});
    f.backends.store.put_if_absent(RequestId::parse(lower).unwrap(), done.to_string().as_bytes()).await.unwrap();
    let batch = json!([{"requestId": upper, "prompt": "again"}]).to_string();
    let (status, answer) = call(&f.state, post_to("/infer/batch", batch)).await;
    let entry = &answer["results"][0];
    assert_eq!(status, StatusCode::MULTI_STATUS);
    assert_eq!((&entry["status"], &entry["holderStatus"]), (&json!(409), &json!("success")), "{answer}");

    let other = ("6ba7b810-9dad-41d1-80b4-00c04fd4a0c8", "6BA7B810-9DAD-41D1-80B4-00C04FD4A0C8");
    let twice = json!([{"requestId": other.0, "prompt": "a"}, {"requestId": other.1, "prompt": "b"}]).to_string();
    let (status, answer) = call(&f.state, post_to("/infer/batch", twice)).await;
    assert_eq!((status, &answer["results"][1]["status"]), (StatusCode::MULTI_STATUS, &json!(400)), "{answer}");
    assert!(answer["results"][1]["error"].as_str().unwrap().contains("repeats an earlier entry"), "{answer}");

    let (status, refused) = call(&f.state, delete(&format!("/results/{}", other.1))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{refused}");
    assert!(refused["error"].as_str().unwrap().contains(&format!("holds this id as {}", other.0)), "{refused}");
    assert_eq!(call(&f.state, delete(&format!("/results/{}", other.0))).await.0, StatusCode::OK);

    let queued = queued(&f, Tier::Small, Priority::Normal).await;
    let ids: Vec<&str> = queued.iter().map(|body| body["requestId"].as_str().unwrap()).collect();
    assert_eq!(ids, [lower, other.0], "each id enqueued once, as first sent");
}

/// A request whose enqueue failed leaves no record behind: the client's retry is accepted and queued.
#[tokio::test]
async fn a_request_that_could_not_be_enqueued_can_be_retried_with_its_id() {
    let f = fixture();
    let body = json!({"requestId": gpuinfer::RequestId::new_v4(), "prompt": "retry me"}).to_string();
    assert_eq!(call(&refusing(&f), post(body.clone())).await.0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(call(&f.state, post(body)).await.0, StatusCode::ACCEPTED, "the retry is a new acceptance");
    assert_eq!(f.lane(Tier::Small, Priority::Normal).counts().await.unwrap().visible, 1);
}

/// A tier switched off (`--tier-off`, the stack's TIER_OFF when its max tasks is 0) starts no task, so a request that
/// names it is refused at once instead of waiting for one: /infer's `route` (400 naming it), a /v1 response's
/// `model` (OpenAI's 400, param `model`), a Batch line's model (the batch fails naming the line); the thresholds
/// send a request they would have given it to the other tier.
#[tokio::test]
async fn a_tier_switched_off_refuses_what_names_it_and_the_rules_route_around_it() {
    let mut f = fixture();
    let mut state = Arc::into_inner(f.state).expect("the fixture's state, not yet shared");
    state.dispatch.routing.off = Some(Tier::Large);
    f.state = Arc::new(state);

    let (status, refused) = call(&f.state, post(json!({"prompt": "hi", "route": "large"}).to_string())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(refused["error"].as_str().unwrap().starts_with("route: the large tier is switched off"), "{refused}");
    let long = "word ".repeat(1000);
    let (status, routed) = call(&f.state, post(json!({"prompt": long}).to_string())).await;
    assert_eq!((status, routed["tier"].as_str()), (StatusCode::ACCEPTED, Some("small")), "{routed}");

    let create = json!({"model": "large", "input": "hi", "background": true});
    let (status, refused) = call(&f.state, crate::uploads::post_json("/v1/responses", &create)).await;
    assert_eq!((status, refused["error"]["param"].as_str()), (StatusCode::BAD_REQUEST, Some("model")), "{refused}");

    let line = json!({"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"model": "large", "prompt": "hi"}});
    let upload = crate::uploads::form(&[
        ("purpose", None, b"batch"),
        ("file", Some("in.jsonl"), format!("{line}\n").as_bytes()),
    ]);
    let (_, file) = call(&f.state, crate::uploads::post_form("/v1/files", upload)).await;
    let create = json!({"input_file_id": file["id"], "endpoint": "/v1/completions", "completion_window": "24h"});
    let (_, batch) = call(&f.state, crate::uploads::post_json("/v1/batches", &create)).await;
    let batch = crate::support::router::admitted(&f.state, &batch, None).await;
    assert_eq!(batch["status"], "failed", "{batch}");
    assert_eq!(batch["errors"]["data"][0]["param"], "body.model", "{batch}");
}
