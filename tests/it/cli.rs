//! `gpuinfer submit` and `gpuinfer get` as a user runs them: against `gpuinfer dev` in front of the engine-simulator
//! process, every exit status, a signed callback through the whole pipeline, and SigV4 headers.

use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::dev::Dev;
use crate::support::engine_process::EngineProcess;
use crate::support::free_port;
use crate::support::receiver::Receiver;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// `gpuinfer dev` on the engine simulator, with callbacks allowed to local http receivers.
async fn pipeline(data: &tempfile::TempDir) -> (Dev, EngineProcess) {
    let engine = EngineProcess::start(&["--latency-ms", "50"]);
    let flags = [
        "--classifier",
        "none",
        "--scaler-interval",
        "3600",
        "--allow-http-callbacks",
        "--allow-private-callbacks",
        "--webhook-secret",
        SECRET,
    ];
    let dev = Dev::start(data.path(), free_port(), &engine.url, &flags);
    dev.ready(&reqwest::Client::new()).await;
    (dev, engine)
}

/// Runs `gpuinfer <args>` with `stdin`, and `env` added to this environment (less any GPUINFER_URL).
async fn gpuinfer(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Output {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_gpuinfer"))
        .args(args)
        .env_remove("GPUINFER_URL")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).await.unwrap();
    drop(input);
    tokio::time::timeout(Duration::from_secs(30), child.wait_with_output()).await.expect("gpuinfer returns").unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn submit_and_get_against_gpuinfer_dev_with_every_exit_status() {
    let data = tempfile::tempdir().unwrap();
    let (dev, _engine) = pipeline(&data).await;
    let url = dev.url.as_str();

    let waited = gpuinfer(&["submit", "--url", url, "--wait", "What", "is", "ECS?"], "", &[]).await;
    assert_eq!(
        (waited.status.code(), stdout(&waited)),
        (Some(0), "echo: What is ECS?\n".into()),
        "{}",
        stderr(&waited)
    );

    let piped = gpuinfer(&["submit", "--url", url, "--wait"], "a prompt from stdin\n", &[]).await;
    assert_eq!(stdout(&piped), "echo: a prompt from stdin\n");

    let as_json = gpuinfer(
        &[
            "submit",
            "--url",
            url,
            "--wait",
            "--json",
            "--priority",
            "high",
            "--max-tokens",
            "4",
            "--deadline-seconds",
            "60",
            "hi",
        ],
        "",
        &[],
    )
    .await;
    assert_eq!(as_json.status.code(), Some(0), "{}", stderr(&as_json));
    let document: Value = serde_json::from_str(&stdout(&as_json)).unwrap();
    assert_eq!(
        (document["status"].as_str(), document["result"]["usage"]["completionTokens"].as_u64()),
        (Some("success"), Some(4))
    );

    let request = data.path().join("request.json");
    std::fs::write(&request, json!({"prompt": "from a file", "temperature": 0.1}).to_string()).unwrap();
    let from_file = gpuinfer(
        &["submit", "--url", url, "--wait", "--json", "--route", "large", "--json-request", request.to_str().unwrap()],
        "",
        &[],
    )
    .await;
    let document: Value = serde_json::from_str(&stdout(&from_file)).unwrap();
    assert_eq!(
        (document["tier"].as_str(), document["result"]["text"].as_str()),
        (Some("large"), Some("echo: from a file"))
    );
    let from_stdin =
        gpuinfer(&["submit", "--url", url, "--wait", "--json-request", "-"], r#"{"prompt": "json on stdin"}"#, &[])
            .await;
    assert_eq!(stdout(&from_stdin), "echo: json on stdin\n");

    let queued = gpuinfer(&["submit", "--url", url, "later"], "", &[]).await;
    let id = stdout(&queued).trim().to_owned();
    assert_eq!(uuid::Uuid::parse_str(&id).unwrap().get_version_num(), 4, "without --wait: the requestId alone");
    let got = gpuinfer(&["get", &id, "--url", url, "--wait"], "", &[]).await;
    assert_eq!((got.status.code(), stdout(&got)), (Some(0), "echo: later\n".into()));

    let refused = gpuinfer(&["submit", "--url", url, "--max-tokens", "5000", "hi"], "", &[]).await;
    assert_eq!(refused.status.code(), Some(2), "a 4xx");
    assert!(stderr(&refused).contains("maxTokens: must be an integer from 1 to 2048"), "{}", stderr(&refused));

    let never_sent = uuid::Uuid::new_v4().to_string();
    let refused = reqwest::Client::new().delete(format!("{url}/results/{never_sent}")).send().await.unwrap();
    assert_eq!(refused.status(), 404, "only an accepted request can be canceled");
    // A request that ended in error (here: canceled before a worker took it), as the pipeline stores it.
    let canceled = uuid::Uuid::new_v4().to_string();
    let document =
        json!({"requestId": canceled, "status": "error", "error": {"code": "canceled", "message": "canceled"}});
    std::fs::write(data.path().join(format!("results/{canceled}.json")), document.to_string()).unwrap();
    let failed = gpuinfer(&["get", &canceled, "--url", url], "", &[]).await;
    assert_eq!(failed.status.code(), Some(3), "an error document");
    assert!(stderr(&failed).contains("canceled"), "{}", stderr(&failed));
    let failed_json = gpuinfer(&["get", &canceled, "--url", url, "--json"], "", &[]).await;
    assert_eq!(failed_json.status.code(), Some(3));
    assert_eq!(serde_json::from_str::<Value>(&stdout(&failed_json)).unwrap()["error"]["code"], "canceled");

    let unknown = uuid::Uuid::new_v4().to_string();
    assert_eq!(gpuinfer(&["get", &unknown, "--url", url], "", &[]).await.status.code(), Some(4), "pending");
    let started = Instant::now();
    let timed_out = gpuinfer(&["get", &unknown, "--url", url, "--wait", "--timeout-seconds", "1"], "", &[]).await;
    assert_eq!(timed_out.status.code(), Some(4));
    assert!(started.elapsed() >= Duration::from_secs(1));

    let nobody = format!("http://127.0.0.1:{}", free_port());
    let unreachable = gpuinfer(&["submit", "--url", &nobody, "hi"], "", &[]).await;
    assert_eq!(unreachable.status.code(), Some(1));
    assert!(stderr(&unreachable).contains("cannot reach"), "{}", stderr(&unreachable));
    let by_env = gpuinfer(&["get", &unknown], "", &[("GPUINFER_URL", url)]).await;
    assert_eq!(by_env.status.code(), Some(4), "GPUINFER_URL names the router");
}

#[tokio::test]
async fn a_callback_url_given_to_submit_gets_the_signed_document() {
    let data = tempfile::tempdir().unwrap();
    let (dev, _engine) = pipeline(&data).await;
    let receiver = Receiver::start([]).await;
    let output = gpuinfer(
        &["submit", "--url", &dev.url, "--wait", "--json", "--callback-url", &receiver.url, "ring me"],
        "",
        &[],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let document: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let delivery = receiver.received(1, Duration::from_secs(10)).await.remove(0);
    assert_eq!(delivery.id, document["requestId"].as_str().unwrap());
    assert_eq!(serde_json::from_slice::<Value>(&delivery.body).unwrap(), document);
    let secret: gpuinfer::WebhookSecret = SECRET.parse().unwrap();
    assert_eq!(delivery.signature, secret.sign(&delivery.id, delivery.timestamp.parse().unwrap(), &delivery.body));
}

#[tokio::test]
async fn with_sigv4_every_call_is_signed_for_execute_api() {
    let seen: Arc<Mutex<Vec<HeaderMap>>> = Arc::default();
    let record = Arc::clone(&seen);
    let api = Router::new().route(
        "/infer",
        post(move |headers: HeaderMap| async move {
            record.lock().unwrap().push(headers);
            (StatusCode::ACCEPTED, Json(json!({"requestId": "8f1b1f9e-6f0a-4b7e-9a57-1d2f0c3e4b5a", "tier": "small"})))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, api).await });
    let env = [
        ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
        ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
        ("AWS_SESSION_TOKEN", "session-token"),
        ("AWS_REGION", "eu-west-1"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];
    let signed = gpuinfer(&["submit", "--url", &url, "--sigv4", "hi"], "", &env).await;
    assert_eq!(
        (signed.status.code(), stdout(&signed)),
        (Some(0), "8f1b1f9e-6f0a-4b7e-9a57-1d2f0c3e4b5a\n".into()),
        "{}",
        stderr(&signed)
    );
    let unsigned = gpuinfer(&["submit", "--url", &url, "hi"], "", &env).await;
    assert_eq!(unsigned.status.code(), Some(0));
    let seen = seen.lock().unwrap();
    let authorization = seen[0]["authorization"].to_str().unwrap();
    assert!(authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"), "{authorization}");
    assert!(authorization.contains("/eu-west-1/execute-api/aws4_request"), "{authorization}");
    assert!(authorization.contains("SignedHeaders=") && authorization.contains("Signature="), "{authorization}");
    assert!(seen[0].contains_key("x-amz-date"));
    assert_eq!(seen[0]["x-amz-security-token"], "session-token");
    assert!(!seen[1].contains_key("authorization"), "signed only with --sigv4");
}

#[tokio::test]
async fn the_help_of_both_commands_lists_the_exit_statuses() {
    for command in ["submit", "get"] {
        let help = gpuinfer(&[command, "--help"], "", &[]).await;
        let text = stdout(&help);
        for line in [
            "Exit status:",
            "0  success",
            "2  the router refused",
            "3  the request ended in an error document",
            "4  no result yet",
        ] {
            assert!(text.contains(line), "`gpuinfer {command} --help` lacks {line:?}:\n{text}");
        }
    }
}

/// Two `gpuinfer dev` on one data directory would share its queues and results behind each other's back: the
/// second is refused at once, naming the directory and what to do.
#[tokio::test]
async fn a_second_dev_on_the_same_data_directory_is_refused() {
    let data = tempfile::tempdir().unwrap();
    let (_dev, engine) = pipeline(&data).await;
    let second = std::process::Command::new(env!("CARGO_BIN_EXE_gpuinfer"))
        .args(["dev", "--listen", &format!("127.0.0.1:{}", free_port()), "--small-engine-url", &engine.url])
        .arg("--data-dir")
        .arg(data.path())
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("another gpuinfer dev is running on the data directory"), "{stderr}");
    assert!(stderr.contains("--data-dir"), "{stderr}");
}

/// A router or scaler started with no queue URL (a typo in a variable's name, say) would serve embedded queues
/// nobody sends to: each refuses to start, naming the variables it looked for, unless --embedded-queues asks.
#[test]
fn a_router_or_scaler_without_a_queue_refuses_to_start_unless_the_embedded_queues_are_asked_for() {
    let data = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    for args in [vec!["router", "--listen", listen.as_str()], vec!["scaler"]] {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_gpuinfer"));
        command.args(&args).arg("--data-dir").arg(data.path());
        for lane in ["", "_HIGH", "_BATCH"] {
            command.env_remove(format!("SMALL{lane}_QUEUE_URL")).env_remove(format!("LARGE{lane}_QUEUE_URL"));
        }
        let refused = command.env_remove("GPUINFER_EMBEDDED_QUEUES").output().unwrap();
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("SMALL_QUEUE_URL") && stderr.contains("--embedded-queues"), "{args:?}: {stderr}");
    }
    // Asked for, the router serves the embedded queues.
    let mut router = std::process::Command::new(env!("CARGO_BIN_EXE_gpuinfer"))
        .args(["router", "--listen", &listen, "--classifier", "none", "--embedded-queues", "--data-dir"])
        .arg(data.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while std::net::TcpStream::connect(&listen).is_err() {
        assert!(router.try_wait().unwrap().is_none(), "the router with --embedded-queues exited");
        assert!(started.elapsed() < Duration::from_secs(20), "the router with --embedded-queues never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    router.kill().unwrap();
    router.wait().unwrap();
}

/// `gpuinfer dev` without a webhook secret could never sign a callback: a request with a callbackUrl is refused at
/// POST (400 naming callbackUrl and what to configure), not accepted and its callback silently never sent; the same
/// request without one is accepted.
#[tokio::test]
async fn without_a_webhook_secret_a_callback_url_is_refused_at_post() {
    let data = tempfile::tempdir().unwrap();
    let engine = EngineProcess::start(&["--latency-ms", "5"]);
    let flags =
        ["--classifier", "none", "--scaler-interval", "3600", "--allow-http-callbacks", "--allow-private-callbacks"];
    let dev = Dev::start(data.path(), free_port(), &engine.url, &flags);
    let http = reqwest::Client::new();
    dev.ready(&http).await;
    let with_callback = json!({"prompt": "hi", "callbackUrl": "http://127.0.0.1:9/hook"});
    let answer = http.post(format!("{}/infer", dev.url)).json(&with_callback).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
    let error = answer.json::<Value>().await.unwrap()["error"].as_str().unwrap_or_default().to_owned();
    assert!(error.starts_with("callbackUrl:") && error.contains("webhook secret"), "{error}");
    let answer = http.post(format!("{}/infer", dev.url)).json(&json!({"prompt": "hi"})).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::ACCEPTED);
}
