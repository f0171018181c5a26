//! The official OpenAI client on the stack as deployed, with API keys: the router as a Lambda behind an API Gateway
//! stand-in, its keys in a Secrets Manager secret made with `gpuinfer api-key add`, a worker over SQS and S3 (moto)
//! on the engine simulator, and tests/openai/aws_keys_client.py calling it over HTTP.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::support::api_gateway::ApiGateway;
use crate::support::lambda_runtime::RuntimeApi;
use crate::support::moto;
use crate::support::process::ChildProcess;
use crate::support::receiver::Receiver;
use gpuinfer::{WebhookSecret, key_digest, simulator::Behavior, simulator::EngineSimulator};
use serde_json::{Value, json};

/// How long the router keeps the keys it read, here (API_KEYS_CACHE_SECONDS).
const CACHE_SECONDS: u64 = 1;

/// `gpuinfer api-key <args>` against moto; its stdout.
fn api_key(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_gpuinfer"))
        .arg("api-key")
        .args(args)
        .envs(moto::child_env())
        .stdin(Stdio::null())
        .output()
        .expect("run gpuinfer api-key");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "gpuinfer api-key {args:?} failed:\n{stdout}\n{stderr}");
    stdout
}

/// Runs one command of tests/openai/aws_keys_client.py against `base` and returns the JSON object it printed.
async fn client(base: &str, args: &[&str]) -> Value {
    crate::openai_events::openai_script("aws_keys_client.py", &[&["--base-url", base], args].concat()).await
}

/// POST `body` to `url` with `key`: the JSON answered.
async fn post_with_key(http: &reqwest::Client, url: String, key: &str, body: &Value) -> Value {
    http.post(url).bearer_auth(key).json(body).send().await.unwrap().json().await.unwrap()
}

/// Waits out the router's key cache, so the next request reads the secret again.
async fn cache_time_passes() {
    tokio::time::sleep(Duration::from_millis(CACHE_SECONDS * 1000 + 500)).await;
}

fn assert_refused(refused: &Value) {
    assert_eq!(
        (refused["status"].as_u64(), refused["code"].as_str(), refused["type"].as_str()),
        (Some(401), Some("invalid_api_key"), Some("authentication_error")),
        "{refused}"
    );
}

/// As deployed with OpenAiAuthType API_KEY: a key made with `gpuinfer api-key add` runs a background response to
/// completed (queued, then retrieved until done, with text) and uploads a Batch API file; a wrong key and no key are refused with
/// openai.AuthenticationError (401, invalid_api_key) while /infer is left to API Gateway's IAM; a second key of the
/// same project, added to the secret, works once the cache time has passed and sees the first key's response; the
/// first, revoked, is refused after it. The OpenAI webhook's events go out as deployed: the worker's (its secret
/// given, as ECS gives it) and the function's (its secret read from OPENAI_WEBHOOK_SECRET_ID), a cancel's at once and
/// what is due at the schedule's upkeep event.
#[tokio::test]
#[ignore = "needs moto and the openai client: scripts/test.sh"]
async fn the_openai_client_runs_responses_on_the_router_lambda_with_keys_from_the_stacks_secret() {
    let name = moto::unique("keys");
    let (small, dlq) = moto::queue_with_dlq(&format!("{name}-small"), 30, 3).await;
    let (large, _) = moto::queue_with_dlq(&format!("{name}-large"), 30, 3).await;
    let bucket = moto::bucket(&name).await;
    let destination = format!("s3://{bucket}/results/");
    let secrets = aws_sdk_secretsmanager::Client::new(&moto::sdk().await);
    let created = secrets.create_secret().name(format!("{name}-api-keys")).secret_string(r#"{"keys": []}"#);
    let secret = created.send().await.expect("create the API keys' secret").arn.unwrap();
    let first = api_key(&["add", "--secret-id", &secret, "--project", "team-a"]).trim().to_owned();
    assert!(first.starts_with("sk-") && first.len() >= 3 + 43, "{first}");
    // The stack's OpenAiWebhookSecret: 48 letters and digits, as GenerateSecretString makes it.
    let signing = "Jq8sV2mXo0bLr5TzW4nHc7YdKf1gPe3uAi9QxN6tMwEhRjSl";
    let created = secrets.create_secret().name(format!("{name}-openai-webhook")).secret_string(signing);
    let signing_id = created.send().await.expect("create the webhook's secret").arn.unwrap();
    let receiver = Receiver::start([]).await;
    let events = [
        ("OPENAI_WEBHOOK_URL", receiver.url.clone()),
        ("ALLOW_HTTP_CALLBACKS", "true".to_owned()),
        ("ALLOW_PRIVATE_CALLBACKS", "true".to_owned()),
    ];

    let logs = tempfile::tempdir().unwrap();
    let runtime = Arc::new(RuntimeApi::start().await);
    let mut env: Vec<(&str, String)> = moto::child_env();
    env.extend(runtime.function_env("gpuinfer-router"));
    env.extend([
        ("GPUINFER_COMMAND", "router".into()),
        ("SMALL_QUEUE_URL", small.clone()),
        ("LARGE_QUEUE_URL", large),
        ("OUTPUT_DESTINATION", destination.clone()),
        ("CLASSIFIER", "none".into()),
        ("API_KEYS_SECRET_ID", secret.clone()),
        ("API_KEYS_CACHE_SECONDS", CACHE_SECONDS.to_string()),
        ("OPENAI_WEBHOOK_SECRET_ID", signing_id),
    ]);
    env.extend(events.clone());
    let _function = ChildProcess::gpuinfer(&[], &env, &logs.path().join("router.log"));
    let engine = EngineSimulator::start(Behavior::default()).await;
    let mut worker_env: Vec<(&str, String)> = moto::child_env();
    worker_env.extend([
        ("REQUEST_QUEUE_URL", small),
        ("DLQ_URL", dlq),
        ("OUTPUT_DESTINATION", destination),
        ("ENGINE_URL", engine.url.clone()),
        ("WAIT_TIME_SECONDS", "1".into()),
        ("OPENAI_WEBHOOK_SECRET", signing.to_owned()),
    ]);
    worker_env.extend(events);
    let _worker = ChildProcess::gpuinfer(&["worker", "--tier", "small"], &worker_env, &logs.path().join("worker.log"));
    let api = ApiGateway::start(Arc::clone(&runtime)).await;
    let base = api.url.as_str();

    let ran = client(base, &["respond", "--api-key", &first]).await;
    assert_eq!((ran["created_status"].as_str(), ran["status"].as_str()), (Some("queued"), Some("completed")), "{ran}");
    assert!(ran["output_text"].as_str().is_some_and(|text| !text.trim().is_empty()), "{ran}");
    let first_response = ran["id"].as_str().unwrap().to_owned();
    structured_output_travels_the_stack(base, &first).await;
    let uploaded = client(base, &["upload", "--api-key", &first]).await;
    assert_eq!(uploaded["same"], true, "a multipart body crosses the stand-in base64-encoded, and back: {uploaded}");

    assert_refused(&client(base, &["refused", "--api-key", "sk-not-a-key-of-this-stack"]).await);
    assert_refused(&client(base, &["refused"]).await);
    let infer = reqwest::Client::new().post(format!("{base}/infer")).json(&json!({"prompt": "hi", "maxTokens": 8}));
    assert_eq!(infer.send().await.unwrap().status(), 202, "the pipeline's routes are API Gateway's IAM's to guard");

    let second = api_key(&["add", "--secret-id", &secret, "--project", "team-a"]).trim().to_owned();
    assert_ne!(second, first);
    cache_time_passes().await;
    let ran = client(base, &["respond", "--api-key", &second]).await;
    assert_eq!(ran["status"], "completed", "the second key: {ran}");
    let seen = client(base, &["retrieve", "--api-key", &second, "--id", &first_response]).await;
    assert_eq!(seen["status"], "completed", "a key of the same project sees the first key's response: {seen}");

    let listed = api_key(&["list", "--secret-id", &secret]);
    assert!(!listed.contains(&first) && !listed.contains(&second), "list shows no key:\n{listed}");
    let prefix = &hex::encode(key_digest(&first))[..12];
    assert!(listed.lines().any(|line| line.starts_with(prefix) && line.ends_with("team-a")), "{listed}");
    api_key(&["revoke", "--secret-id", &secret, "--digest", prefix]);
    cache_time_passes().await;
    assert_refused(&client(base, &["refused", "--api-key", &first]).await);
    let ran = client(base, &["respond", "--api-key", &second]).await;
    assert_eq!(ran["status"], "completed", "the second key outlives the first: {ran}");

    // A response on the large tier, which has no worker here, canceled while queued: the function records its event.
    let http = reqwest::Client::new();
    let create = json!({"model": "large", "input": "Wait.", "background": true});
    let queued = post_with_key(&http, format!("{base}/v1/responses"), &second, &create).await;
    let canceled = queued["id"].as_str().unwrap().to_owned();
    let cancel = http.post(format!("{base}/v1/responses/{canceled}/cancel")).bearer_auth(&second).send().await.unwrap();
    assert_eq!(cancel.status(), 200);
    let answer = runtime.invoke(crate::aws_rules::upkeep_input()).await;
    assert!(answer["batches"].is_u64() && answer["events"].is_u64(), "the upkeep event's answer: {answer}");
    let wanted = [("response.completed", first_response.as_str()), ("response.cancelled", canceled.as_str())];
    let deliveries = crate::support::eventually(Duration::from_secs(20), "the events at the receiver", || async {
        let deliveries = receiver.deliveries();
        let events: Vec<(String, String)> = deliveries.iter().map(crate::openai_events::event_of).collect();
        wanted.iter().all(|(kind, id)| events.contains(&((*kind).to_owned(), (*id).to_owned()))).then_some(deliveries)
    })
    .await;
    let key: WebhookSecret = signing.parse().unwrap();
    for delivery in deliveries {
        let signed = key.sign(&delivery.id, delivery.timestamp.parse().unwrap(), &delivery.body);
        assert_eq!(delivery.signature, signed, "signed with the stack's secret: {delivery:?}");
    }
}

/// What a response's answer must be travels router → SQS → worker → S3 and back: the engine simulator answers `{}`
/// to a response format, so a response whose schema requires a field fails `invalid_output`; it honours `tool_choice`, so a required
/// function comes back as a `function_call` item.
async fn structured_output_travels_the_stack(base: &str, key: &str) {
    let http = reqwest::Client::new();
    let ended = |body: Value| {
        let http = &http;
        async move {
            let created = post_with_key(http, format!("{base}/v1/responses"), key, &body).await;
            let url = format!("{base}/v1/responses/{}", created["id"].as_str().unwrap_or_else(|| panic!("{created}")));
            crate::support::eventually(Duration::from_secs(20), "the response to end", || async {
                let response: Value = http.get(&url).bearer_auth(key).send().await.unwrap().json().await.unwrap();
                (response["status"] != "queued").then_some(response)
            })
            .await
        }
    };
    let format = json!({"type": "json_schema", "name": "answer", "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}});
    let failed =
        ended(json!({"model": "small", "input": "Count.", "background": true, "text": {"format": format}})).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(failed["error"]["message"].as_str().unwrap().starts_with("invalid_output: "), "{failed}");
    assert_eq!(failed["text"]["format"], format, "{failed}");
    let tool = json!({"type": "function", "name": "count", "parameters": {"type": "object"}});
    let called = ended(
        json!({"model": "small", "input": "Count.", "background": true, "tools": [tool], "tool_choice": "required"}),
    )
    .await;
    assert_eq!(
        (called["status"].as_str(), called["output"][0]["type"].as_str()),
        (Some("completed"), Some("function_call")),
        "{called}"
    );
}

/// `gpuinfer api-key` checks what it was given before it reads the store: without a secret it says where the stack
/// names one; a project that is no project name is refused by name.
#[test]
fn gpuinfer_api_key_asks_for_the_secret_and_a_valid_project_before_reading_the_store() {
    let run = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_gpuinfer"))
            .arg("api-key")
            .args(args)
            .env_remove("API_KEYS_SECRET_ID")
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
            .output()
            .expect("run gpuinfer api-key");
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    assert!(run(&["list"]).contains("ApiKeysSecretArn"));
    let refused = run(&["add", "--secret-id", "keys", "--project", "a/b"]);
    assert!(refused.contains("--project") && refused.contains("\"a/b\""), "{refused}");
}
