//! `gpuinfer router` as a Lambda: API Gateway v2 events through the real lambda_http adapter, against moto SQS/S3.

use std::process::{Command, Stdio};

use crate::support::lambda_runtime::{RuntimeApi, http_event};
use crate::support::moto;
use gpuinfer::{ResultStore, S3Location, S3Store};
use serde_json::{Value, json};

/// The router run as Lambda runs a bootstrap (no arguments, the subcommand named by GPUINFER_COMMAND), against a
/// local Runtime API and fresh moto queues and bucket; its output piped.
struct LambdaRouter {
    runtime: RuntimeApi,
    function: std::process::Child,
    small: gpuinfer::Lanes<String>,
    large: gpuinfer::Lanes<String>,
    bucket: String,
}

async fn lambda_router(name: &str) -> LambdaRouter {
    let name = moto::unique(name);
    let (small, _) = moto::lanes_with_dlq(&format!("{name}-small"), 30, 3).await;
    let (large, _) = moto::lanes_with_dlq(&format!("{name}-large"), 30, 3).await;
    let bucket = moto::bucket(&name).await;
    let runtime = RuntimeApi::start().await;
    let function = Command::new(env!("CARGO_BIN_EXE_gpuinfer"))
        .env("GPUINFER_COMMAND", "router")
        .envs(moto::child_env())
        .envs(runtime.function_env("gpuinfer-router"))
        .envs([
            ("AWS_LAMBDA_LOG_FORMAT", "JSON".into()),
            ("SMALL_QUEUE_URL", small.normal.clone()),
            ("SMALL_HIGH_QUEUE_URL", small.high.clone()),
            ("LARGE_QUEUE_URL", large.normal.clone()),
            ("LARGE_HIGH_QUEUE_URL", large.high.clone()),
            ("OUTPUT_DESTINATION", format!("s3://{bucket}/results/")),
            ("CLASSIFIER", "none".into()),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    LambdaRouter { runtime, function, small, large, bucket }
}

fn body(answer: &Value) -> Value {
    serde_json::from_str(answer["body"].as_str().unwrap_or("null")).unwrap_or(Value::Null)
}

#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn api_gateway_events_get_the_same_answers_as_http() {
    let LambdaRouter { runtime, mut function, small, large, bucket } = lambda_router("lambda").await;

    let id = gpuinfer::RequestId::new_v4();
    let valid = json!({"requestId": id, "prompt": "What is Amazon ECS?", "maxTokens": 64}).to_string();
    let answer = runtime.invoke(http_event("POST", "/infer", Some(&valid))).await;
    assert_eq!(answer["statusCode"], 202, "{answer}");
    assert_eq!(body(&answer), json!({"requestId": id, "tier": "small"}));

    let forced = json!({"prompt": "hi", "route": "large"}).to_string();
    let answer = runtime.invoke(http_event("POST", "/infer", Some(&forced))).await;
    assert_eq!((answer["statusCode"].as_u64(), body(&answer)["tier"].as_str()), (Some(202), Some("large")));

    let answer = runtime.invoke(http_event("POST", "/infer", Some("{oops"))).await;
    assert_eq!(answer["statusCode"], 400);
    assert!(body(&answer)["error"].as_str().unwrap().starts_with("body: not valid JSON"));

    let bad_field = json!({"prompt": "hi", "temperature": 9}).to_string();
    let answer = runtime.invoke(http_event("POST", "/infer", Some(&bad_field))).await;
    assert_eq!(answer["statusCode"], 400);
    assert!(body(&answer)["error"].as_str().unwrap().starts_with("temperature: must be a number"));

    let answer = runtime.invoke(http_event("GET", &format!("/results/{id}"), None)).await;
    assert_eq!(
        (answer["statusCode"].as_u64(), body(&answer)),
        (Some(404), json!({"requestId": id, "status": "pending"}))
    );
    // A query string API Gateway passes on raw, with characters no URI may hold, still reaches the handlers.
    let mut odd_query = http_event("GET", &format!("/results/{id}"), None);
    odd_query["rawQueryString"] = json!(r#"q="{a|b}"&é"#);
    let answer = runtime.invoke(odd_query).await;
    assert_eq!(answer["statusCode"], 404, "{answer}");
    let store = S3Store::new(moto::s3().await, S3Location::parse(&format!("s3://{bucket}/results/")).unwrap());
    store.put_if_absent(id, br#"{"status":"success"}"#).await.unwrap();
    let answer = runtime.invoke(http_event("GET", &format!("/results/{id}"), None)).await;
    assert_eq!((answer["statusCode"].as_u64(), body(&answer)), (Some(200), json!({"status": "success"})));

    let batch = json!([{"prompt": "urgent", "priority": "high"}, {"prompt": "hi", "priority": "soon"}]).to_string();
    let answer = runtime.invoke(http_event("POST", "/infer/batch", Some(&batch))).await;
    assert_eq!(answer["statusCode"], 207, "{answer}");
    let results = body(&answer)["results"].clone();
    assert_eq!((results[0]["status"].as_u64(), results[0]["tier"].as_str()), (Some(202), Some("small")));
    assert_eq!(results[1]["status"], 400);
    assert!(results[1]["error"].as_str().unwrap().starts_with("priority: must be"), "{results}");

    let never_sent = gpuinfer::RequestId::new_v4();
    let answer = runtime.invoke(http_event("DELETE", &format!("/results/{never_sent}"), None)).await;
    assert_eq!(answer["statusCode"].as_u64(), Some(404), "only an accepted request can be canceled: {answer}");
    let queued = json!({"prompt": "cancel me", "route": "large"}).to_string();
    let answer = runtime.invoke(http_event("POST", "/infer", Some(&queued))).await;
    let canceled = body(&answer)["requestId"].as_str().unwrap().to_owned();
    let answer = runtime.invoke(http_event("DELETE", &format!("/results/{canceled}"), None)).await;
    assert_eq!((answer["statusCode"].as_u64(), &body(&answer)["error"]["code"]), (Some(200), &json!("canceled")));
    let answer = runtime.invoke(http_event("DELETE", &format!("/results/{id}"), None)).await;
    assert_eq!((answer["statusCode"].as_u64(), &body(&answer)["status"]), (Some(409), &json!("success")));

    // The schedule's upkeep event (template.yaml's UpkeepSchedule input) is no API Gateway request: the function
    // runs the upkeep and answers what it looked at.
    let answer = runtime.invoke(crate::aws_rules::upkeep_input()).await;
    assert_eq!(answer, json!({"batches": 0, "events": 0}), "{answer}");

    let queued = moto::drain(&small.normal).await;
    assert_eq!(queued.len(), 1);
    assert_eq!(serde_json::from_str::<Value>(queued[0].body.as_deref().unwrap()).unwrap()["requestId"], id.to_string());
    let urgent = moto::drain(&small.high).await;
    assert_eq!(urgent.len(), 1);
    assert_eq!(serde_json::from_str::<Value>(urgent[0].body.as_deref().unwrap()).unwrap()["priority"], "high");
    assert_eq!(moto::drain(&large.normal).await.len(), 2, "the forced request and the canceled one");

    function.kill().unwrap();
    let output = function.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let emf: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &Value| v.get("_aws").is_some())
        .collect();
    assert_eq!(emf.len(), 4, "one RoutedRequests EMF line per accepted request on stdout");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let accepted = stderr.lines().find(|l| l.contains("request accepted")).expect("an accepted log line");
    let line: Value = serde_json::from_str(accepted).expect("JSON logs when AWS_LAMBDA_LOG_FORMAT=JSON");
    assert_eq!(line["request_id"], id.to_string());
    assert!(!stderr.contains("What is Amazon ECS?"), "prompts never reach the logs");
}

/// The router as a Lambda (function) behind an HTTP API, as deployed: a Batch API file goes up through an API
/// Gateway event (multipart, base64-encoded as API Gateway passes a binary body) and comes back as the response
/// body; a file past Lambda's response limit (Lambda API Reference, Invoke: "For synchronous invocations, the
/// maximum payload size is 6 MB") is answered with a redirect to a presigned S3 URL that serves it.
#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn batch_files_go_up_through_lambda_and_downloads_past_6_mb_are_redirected_to_s3() {
    use base64::Engine as _;
    use gpuinfer::{FileObject, ObjectStore, content_key, record_key};
    let b64 = base64::engine::general_purpose::STANDARD;
    let LambdaRouter { runtime, mut function, bucket, small, .. } = lambda_router("lambda-files").await;

    let jsonl = "{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":\"small\",\"prompt\":\"hi\"}}\n";
    let form = format!(
        "--XyZ\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--XyZ\r\nContent-Disposition: form-data; \
         name=\"file\"; filename=\"in.jsonl\"\r\nContent-Type: application/octet-stream\r\n\r\n{jsonl}\r\n--XyZ--\r\n"
    );
    let mut upload = http_event("POST", "/v1/files", Some(&b64.encode(&form)));
    upload["headers"]["content-type"] = json!("multipart/form-data; boundary=XyZ");
    upload["isBase64Encoded"] = json!(true);
    let answer = runtime.invoke(upload).await;
    assert_eq!(answer["statusCode"], 200, "{answer}");
    let file = body(&answer);
    assert_eq!((file["object"].as_str(), file["bytes"].as_u64()), (Some("file"), Some(jsonl.len() as u64)), "{file}");
    let id = file["id"].as_str().unwrap();
    let answer = runtime.invoke(http_event("GET", &format!("/v1/files/{id}/content"), None)).await;
    assert_eq!(answer["statusCode"], 200, "{answer}");
    let served = match answer["isBase64Encoded"].as_bool() {
        Some(true) => b64.decode(answer["body"].as_str().unwrap()).unwrap(),
        _ => answer["body"].as_str().unwrap().as_bytes().to_vec(),
    };
    assert_eq!(served, jsonl.as_bytes());

    // A batch on it answers at once, `validating`: a function is frozen once it answers, so the schedule's upkeep
    // checks and enqueues its lines.
    let create = json!({"input_file_id": id, "endpoint": "/v1/completions", "completion_window": "24h"}).to_string();
    let answer = runtime.invoke(http_event("POST", "/v1/batches", Some(&create))).await;
    let batch = body(&answer);
    assert_eq!((answer["statusCode"].as_u64(), batch["status"].as_str()), (Some(200), Some("validating")), "{answer}");
    let retrieve = http_event("GET", &format!("/v1/batches/{}", batch["id"].as_str().unwrap()), None);
    assert_eq!(
        body(&runtime.invoke(retrieve.clone()).await)["status"],
        "validating",
        "nothing runs between invocations"
    );
    let answer = runtime.invoke(crate::aws_rules::upkeep_input()).await;
    assert_eq!(answer["batches"], 1, "{answer}");
    let admitted = body(&runtime.invoke(retrieve).await);
    assert_eq!(
        (admitted["status"].as_str(), admitted["request_counts"]["total"].as_u64()),
        (Some("in_progress"), Some(1))
    );
    assert_eq!(moto::drain(&small.normal).await.len(), 1, "the batch's line, on the small tier");

    // A 7 MB file, stored as the Files API stores one.
    let store = S3Store::new(moto::s3().await, S3Location::parse(&format!("s3://{bucket}/results/")).unwrap());
    let large_file = FileObject::new(gpuinfer::new_object_id("file-"), 7_000_000, "big.jsonl".into(), "batch");
    let bytes = jsonl.repeat(7_000_000 / jsonl.len() + 1).into_bytes();
    store.put(&content_key(&large_file.id), gpuinfer::one_chunk(bytes.clone())).await.unwrap();
    gpuinfer::write_json(&store, &record_key(&large_file.id), &large_file).await.unwrap();
    let answer = runtime.invoke(http_event("GET", &format!("/v1/files/{}/content", large_file.id), None)).await;
    assert_eq!(answer["statusCode"], 307, "{}", answer["statusCode"]);
    let location = answer["headers"]["location"].as_str().expect("a Location header");
    assert!(location.contains("X-Amz-Signature") && location.contains(&bucket), "{location}");
    let fetched = reqwest::get(location).await.unwrap();
    assert_eq!(fetched.status(), 200);
    assert_eq!(fetched.bytes().await.unwrap().len(), bytes.len(), "the presigned URL serves the whole file");
    function.kill().unwrap();
    let _ = function.wait();
}
