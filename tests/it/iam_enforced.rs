//! The template's role policies suffice for what router, workers, fetch-model and scaler call, on a moto enforcing IAM.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::cfn::{ACCOUNT, REGION, Stack, of_type, template};
use crate::support::iam_moto::{ADMIN, IamMoto, allows, as_moto_decides};
use crate::support::process::ChildProcess;
use crate::support::{eventually, free_port, moto, router_listening};
use aws_sdk_sqs::types::QueueAttributeName;
use futures_util::StreamExt;
use gpuinfer::{simulator::Behavior, simulator::EngineSimulator, simulator::Reply};
use serde_json::{Value, json};

/// How long a result, a dead letter or a scaling decision may take.
const LIMIT: Duration = Duration::from_secs(60);

/// The template resolved as a stack of a unique name; `overrides` on top of the parameters it requires.
fn stack(overrides: &[(&str, &str)]) -> Stack {
    let mut parameters =
        vec![("ModelName", "small-model"), ("LargeModelName", "large-model"), ("ArtifactBucket", "code")];
    parameters.extend_from_slice(overrides);
    Stack::new(&moto::unique("iam"), &parameters)
}

/// One test's world: the resolved stack, an enforcing moto with `admin` and a user named after the role
/// under test, what the stack would have created (every queue, the results bucket), and a folder for logs.
struct World {
    stack: Stack,
    role: String,
    moto: IamMoto,
    dir: tempfile::TempDir,
}

impl World {
    /// `arns`: the ECS services and the secrets the role's process reads (see `as_moto_decides`).
    async fn start(stack: Stack, role: &str, arns: &[String]) -> Self {
        let policies =
            stack.role_policies(role).into_iter().map(|(name, doc)| (name, as_moto_decides(&doc, arns))).collect();
        let dir = tempfile::tempdir().unwrap();
        let moto = IamMoto::start(&[(role, policies)], &dir.path().join("moto.log")).await;
        let world = World { stack, role: role.to_owned(), moto, dir };
        let sqs = world.sqs().await;
        for (id, _) in of_type(&template(), "AWS::SQS::Queue") {
            sqs.create_queue().queue_name(world.stack.physical_name(id)).send().await.expect("create a queue");
        }
        let results = world.stack.physical_name("ResultsBucket");
        world.moto.s3(ADMIN).await.create_bucket().bucket(results).send().await.expect("create the results bucket");
        world
    }

    async fn sqs(&self) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(&self.moto.sdk(ADMIN).await)
    }

    /// Creates (as admin) the secret `name` holding a key document with `keys` ((project, key) pairs), as the
    /// stack's ApiKeysSecret holds them once `gpuinfer api-key add` has run; its ARN.
    async fn key_secret(&self, name: &str, keys: &[(&str, &str)]) -> String {
        let mut document = gpuinfer::KeyDocument::default();
        for (project, key) in keys {
            document.add(project, key).unwrap();
        }
        let secrets = aws_sdk_secretsmanager::Client::new(&self.moto.sdk(ADMIN).await);
        let created = secrets.create_secret().name(name).secret_string(document.to_json()).send().await;
        created.expect("create a key secret").arn.unwrap()
    }

    /// `gpuinfer <args>` signing as the role's user, with `env` (the template's, plus the test's own).
    fn gpuinfer(&self, args: &[&str], env: &[(String, String)]) -> ChildProcess {
        let signing = self.moto.child_env(&self.role);
        let env: Vec<(&str, String)> = env.iter().chain(&signing).map(|(k, v)| (k.as_str(), v.clone())).collect();
        ChildProcess::gpuinfer(args, &env, &self.dir.path().join(format!("{}.log", args[0])))
    }
}

fn var(env: &[(String, String)], name: &str) -> String {
    env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()).unwrap_or_else(|| panic!("the template sets no {name}"))
}

/// What a process logged about calls moto refused: denied, or signed with a key it does not know.
fn refusals(process: &ChildProcess) -> String {
    let needles = ["AccessDenied", "not authorized", "Forbidden", "InvalidClientTokenId", "InvalidAccessKeyId"];
    let lines: Vec<String> =
        process.log().lines().filter(|l| needles.iter().any(|n| l.contains(n))).map(str::to_owned).collect();
    lines.join("\n")
}

fn assert_no_refusal(process: &ChildProcess) {
    let refused = refusals(process);
    assert!(refused.is_empty(), "calls were refused:\n{refused}");
}

/// Where OUTPUT_DESTINATION puts result documents; read (and created) as admin.
enum Results {
    S3 { bucket: String, prefix: String },
    Queue(String),
}

impl Results {
    fn of(destination: &str) -> Self {
        match destination.strip_prefix("s3://") {
            Some(rest) => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                Results::S3 { bucket: bucket.to_owned(), prefix: prefix.to_owned() }
            }
            None => Results::Queue(destination.to_owned()),
        }
    }

    /// Creates the destination unless the stack did (the results bucket).
    async fn create(&self, world: &World) {
        match self {
            Results::S3 { bucket, .. } if *bucket != world.stack.physical_name("ResultsBucket") => {
                world.moto.s3(ADMIN).await.create_bucket().bucket(bucket).send().await.expect("create the bucket");
            }
            Results::S3 { .. } => {}
            Results::Queue(url) => {
                let name = url.rsplit('/').next().unwrap();
                world.sqs().await.create_queue().queue_name(name).send().await.expect("create the results queue");
            }
        }
    }

    /// The documents of `ids` there now (a queue's are received and deleted).
    async fn take(&self, world: &World, ids: &[String]) -> Vec<Value> {
        let mut documents = Vec::new();
        match self {
            Results::S3 { bucket, prefix } => {
                let s3 = world.moto.s3(ADMIN).await;
                for id in ids {
                    match s3.get_object().bucket(bucket).key(format!("{prefix}{id}.json")).send().await {
                        Ok(object) => documents
                            .push(serde_json::from_slice(&object.body.collect().await.unwrap().into_bytes()).unwrap()),
                        Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => {}
                        Err(e) => panic!("reading {prefix}{id}.json: {e:?}"),
                    }
                }
            }
            Results::Queue(url) => {
                let sqs = world.sqs().await;
                let received = sqs.receive_message().queue_url(url).max_number_of_messages(10).send().await.unwrap();
                for message in received.messages.unwrap_or_default() {
                    sqs.delete_message()
                        .queue_url(url)
                        .receipt_handle(message.receipt_handle.unwrap())
                        .send()
                        .await
                        .unwrap();
                    documents.push(serde_json::from_str(&message.body.unwrap()).unwrap());
                }
            }
        }
        documents
    }
}

/// A POST /infer body for the `priority` lane of the `route` tier.
fn infer(route: &str, priority: &str, prompt: &str) -> Value {
    json!({"prompt": prompt, "maxTokens": 8, "route": route, "priority": priority})
}

/// The router with the RouterFunction's environment, as RouterRole: POST /infer to the high and normal lanes of both tiers
/// and one /infer/batch (each lands on its queue), GET a pending request (404), DELETE it (200, canceled),
/// GET it again (the canceled document, also found at OUTPUT_DESTINATION).
async fn router_flow(overrides: &[(&str, &str)]) {
    let world = World::start(stack(overrides), "RouterRole", &[]).await;
    let env = world.stack.environment("RouterFunction");
    let results = Results::of(&var(&env, "OUTPUT_DESTINATION"));
    results.create(&world).await;
    let listen = format!("127.0.0.1:{}", free_port());
    let base = format!("http://{listen}");
    let router = world.gpuinfer(&["router", "--listen", &listen, "--classifier", "none"], &env);
    let http = reqwest::Client::new();
    router_listening(&http, &base).await;

    let lanes = [
        ("small", "normal", "SMALL_QUEUE_URL"),
        ("small", "high", "SMALL_HIGH_QUEUE_URL"),
        ("large", "normal", "LARGE_QUEUE_URL"),
        ("large", "high", "LARGE_HIGH_QUEUE_URL"),
    ];
    let mut ids = Vec::new();
    for &(route, priority, _) in &lanes {
        let response = http.post(format!("{base}/infer")).json(&infer(route, priority, "one")).send().await.unwrap();
        let status = response.status();
        let answer: Value = response.json().await.unwrap();
        assert_eq!(status, 202, "POST /infer {route} {priority}: {answer}\n{}", refusals(&router));
        ids.push(vec![answer["requestId"].as_str().unwrap().to_owned()]);
    }
    let batch: Vec<Value> = lanes.iter().map(|&(route, priority, _)| infer(route, priority, "batched")).collect();
    let answer: Value =
        http.post(format!("{base}/infer/batch")).json(&batch).send().await.unwrap().json().await.unwrap();
    for (i, entry) in answer["results"].as_array().unwrap().iter().enumerate() {
        assert_eq!(entry["status"], 202, "POST /infer/batch: {entry}\n{}", refusals(&router));
        ids[i].push(entry["requestId"].as_str().unwrap().to_owned());
    }
    let sqs = world.sqs().await;
    for ((_, _, variable), sent) in lanes.iter().zip(&ids) {
        let received =
            sqs.receive_message().queue_url(var(&env, variable)).max_number_of_messages(10).send().await.unwrap();
        let mut queued: Vec<String> = received
            .messages
            .unwrap_or_default()
            .iter()
            .map(|m| {
                serde_json::from_str::<Value>(m.body.as_deref().unwrap()).unwrap()["requestId"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        queued.sort();
        let mut sent = sent.clone();
        sent.sort();
        assert_eq!(queued, sent, "what {variable} holds");
    }

    let id = &ids[0][0];
    // The router's record of each accepted id: a retry reads it (same request: 202), a reuse reads it and the
    // result (another request: 409).
    let reuse = json!({"requestId": id, "prompt": "another request with the same id"});
    let answer = http.post(format!("{base}/infer")).json(&reuse).send().await.unwrap();
    assert_eq!(answer.status(), 409, "a reused requestId\n{}", refusals(&router));
    let url = format!("{base}/results/{id}");
    let pending = http.get(&url).send().await.unwrap();
    assert_eq!(pending.status(), 404, "GET while pending\n{}", refusals(&router));
    assert_eq!(pending.json::<Value>().await.unwrap()["status"], "pending");
    let canceled = http.delete(&url).send().await.unwrap();
    assert_eq!(canceled.status(), 200, "DELETE\n{}", refusals(&router));
    let document: Value = canceled.json().await.unwrap();
    assert_eq!((&document["status"], &document["error"]["code"]), (&json!("error"), &json!("canceled")));
    let again = http.get(&url).send().await.unwrap();
    assert_eq!(again.status(), 200, "GET after the cancel\n{}", refusals(&router));
    assert_eq!(again.json::<Value>().await.unwrap(), document);
    assert_eq!(
        results.take(&world, std::slice::from_ref(id)).await,
        [document],
        "the canceled document at OUTPUT_DESTINATION"
    );
    assert_no_refusal(&router);
}

/// The key the /v1 calls of these tests carry (OpenAiAuthType's default, API_KEY: the router checks it against the
/// stack's ApiKeysSecret).
const API_KEY: &str = "sk-iam-enforced-test";

/// An HTTP client that sends `key` as OpenAI's clients send theirs.
fn with_api_key(key: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(reqwest::header::AUTHORIZATION, format!("Bearer {key}").parse().unwrap());
    reqwest::Client::builder().default_headers(headers).build().unwrap()
}

/// Secrets Manager API Reference, GetSecretValue: the caller needs secretsmanager:GetSecretValue on the secret
/// (and kms:Decrypt on a customer managed key that encrypts it, tests/it/aws_rules.rs). As RouterRole with the
/// RouterFunction's environment, the router reads the stack's ApiKeysSecret: a /v1 call with one of its keys is
/// answered, one without or with another key gets 401 in OpenAI's shape, and moto refused no call; a router pointed
/// at a secret that does not exist answers 503, never lets a request through. RouterRole grants GetSecretValue on
/// that secret and no other (its policy document: moto authorizes Secrets Manager calls against any resource).
#[tokio::test]
#[ignore = "needs the moto server binary: scripts/test.sh"]
async fn the_router_role_lets_the_router_read_its_api_keys_and_no_other_secret() {
    let stack = stack(&[]);
    let env = stack.environment("RouterFunction");
    let key_secret = var(&env, "API_KEYS_SECRET_ID");
    let world = World::start(stack, "RouterRole", std::slice::from_ref(&key_secret)).await;
    world.key_secret(&world.stack.physical_name("ApiKeysSecret"), &[("iam", API_KEY)]).await;
    let other = world.key_secret(&format!("{}-other", world.stack.physical_name("ApiKeysSecret")), &[]).await;
    let granted = world.stack.role_policies("RouterRole");
    let may_read = |arn: &str| granted.iter().any(|(_, p)| allows(p, "secretsmanager:GetSecretValue", arn));
    assert!(may_read(&key_secret), "RouterRole may not read its API keys, {key_secret}");
    assert!(!may_read(&other), "RouterRole may read another secret, {other}");

    let listen = format!("127.0.0.1:{}", free_port());
    let base = format!("http://{listen}");
    let router = world.gpuinfer(&["router", "--listen", &listen, "--classifier", "none"], &env);
    router_listening(&reqwest::Client::new(), &base).await;
    let models = format!("{base}/v1/models");
    let answer = with_api_key(API_KEY).get(&models).send().await.unwrap();
    assert_eq!(answer.status(), 200, "GET /v1/models with the key\n{}", refusals(&router));
    for client in [reqwest::Client::new(), with_api_key("sk-not-one-of-them")] {
        let answer = client.get(&models).send().await.unwrap();
        assert_eq!(answer.status(), 401);
        let error: Value = answer.json().await.unwrap();
        assert_eq!(error["error"]["code"], "invalid_api_key", "{error}");
    }
    let infer = reqwest::Client::new().post(format!("{base}/infer")).json(&infer("small", "normal", "one"));
    assert_eq!(infer.send().await.unwrap().status(), 202, "/infer is left to API Gateway's IAM");
    assert_no_refusal(&router);

    let mut missing_env = env.clone();
    missing_env.push(("API_KEYS_SECRET_ID".into(), format!("{key_secret}-missing")));
    let listen = format!("127.0.0.1:{}", free_port());
    let base = format!("http://{listen}");
    let _unreadable = world.gpuinfer(&["router", "--listen", &listen, "--classifier", "none"], &missing_env);
    router_listening(&reqwest::Client::new(), &base).await;
    let answer = with_api_key(API_KEY).get(format!("{base}/v1/models")).send().await.unwrap();
    assert_eq!(answer.status(), 503, "a key store that cannot be read lets nothing through");
    let error: Value = answer.json().await.unwrap();
    assert_eq!(error["error"]["type"], "server_error", "{error}");
}

/// As RouterRole with the RouterFunction's environment of a stack that sends OpenAI-shaped events
/// (OpenAiWebhookUrl), the router reads the stack's OpenAiWebhookSecret (GetSecretValue, its grant
/// ReadOpenAiWebhookSecret) and signs with it: a response canceled while queued is heard at once, as
/// `response.cancelled`, signed with that secret's key; moto refused no call.
#[tokio::test]
#[ignore = "needs the moto server binary: scripts/test.sh"]
async fn the_router_role_lets_the_router_read_the_key_that_signs_its_openai_events() {
    use gpuinfer::WebhookSecret;
    let receiver = crate::support::receiver::Receiver::start([]).await;
    let stack = stack(&[("OpenAiWebhookUrl", "https://hooks.example.com/openai")]);
    let mut env = stack.environment("RouterFunction");
    let signing_secret = var(&env, "OPENAI_WEBHOOK_SECRET_ID");
    // The stack's URL, pointed at a receiver on loopback (which only these flags let a router send to); no API keys,
    // so that this secret is the one the role reads (moto decides a secret's read on its own statement only then).
    env.retain(|(name, _)| name != "OPENAI_WEBHOOK_URL" && name != "API_KEYS_SECRET_ID");
    env.extend([
        ("OPENAI_WEBHOOK_URL".to_owned(), receiver.url.clone()),
        ("ALLOW_HTTP_CALLBACKS".to_owned(), "true".to_owned()),
        ("ALLOW_PRIVATE_CALLBACKS".to_owned(), "true".to_owned()),
    ]);
    let world = World::start(stack, "RouterRole", std::slice::from_ref(&signing_secret)).await;
    let granted = world.stack.role_policies("RouterRole");
    assert!(granted.iter().any(|(_, p)| allows(p, "secretsmanager:GetSecretValue", &signing_secret)));
    // 48 letters and digits, as the stack's GenerateSecretString makes it.
    let signing = "Zq8sV2mXo0bLr5TzW4nHc7YdKf1gPe3uAi9QxN6tMwEhRjSl";
    let secrets = aws_sdk_secretsmanager::Client::new(&world.moto.sdk(ADMIN).await);
    let name = world.stack.physical_name("OpenAiWebhookSecret");
    secrets.create_secret().name(name).secret_string(signing).send().await.expect("create the webhook's secret");

    let listen = format!("127.0.0.1:{}", free_port());
    let base = format!("http://{listen}");
    let router = world.gpuinfer(&["router", "--listen", &listen, "--classifier", "none"], &env);
    eventually(Duration::from_secs(20), "the router to listen", || async {
        let up = reqwest::get(format!("{base}/healthz")).await.is_ok();
        assert!(up || !router.log().contains("signing key"), "it could not read the key:\n{}", router.log());
        up.then_some(())
    })
    .await;
    let create = json!({"model": "large", "input": "Wait.", "background": true});
    let http = reqwest::Client::new();
    let queued: Value =
        http.post(format!("{base}/v1/responses")).json(&create).send().await.unwrap().json().await.unwrap();
    let id = queued["id"].as_str().unwrap_or_else(|| panic!("{queued}\n{}", refusals(&router))).to_owned();
    let canceled = http.post(format!("{base}/v1/responses/{id}/cancel")).send().await.unwrap();
    assert_eq!(canceled.status(), 200);
    let delivery = eventually(LIMIT, "the cancel's event at the receiver", || async {
        receiver
            .deliveries()
            .into_iter()
            .find(|d| crate::openai_events::event_of(d) == ("response.cancelled".to_owned(), id.clone()))
    })
    .await;
    let key: WebhookSecret = signing.parse().unwrap();
    assert_eq!(delivery.signature, key.sign(&delivery.id, delivery.timestamp.parse().unwrap(), &delivery.body));
    assert_no_refusal(&router);
}

/// A multipart/form-data body of one `file` field holding `content` (and `purpose=batch`), as the OpenAI client
/// sends POST /v1/files; with its content type.
fn file_form(content: &[u8]) -> (String, Vec<u8>) {
    let boundary = "gpuinfer-iam-boundary";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--{boundary}\r\n\
         Content-Disposition: form-data; name=\"file\"; filename=\"requests.jsonl\"\r\n\
         Content-Type: application/jsonl\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(content);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// The router's clean-up calls, as RouterRole: DELETE /v1/files/{id} (s3:DeleteObject), an upload cancelled with
/// its parts removed (DeleteObject), a refused file larger than one multipart part (the upload aborted:
/// s3:AbortMultipartUpload, then its object deleted), and an accepted request whose enqueue failed (its
/// acceptance record deleted, so the client's retry with the same id is enqueued rather than answered as done).
async fn router_cleanup_flow(overrides: &[(&str, &str)]) {
    let stack = stack(overrides);
    let env = stack.environment("RouterFunction");
    let key_secret = var(&env, "API_KEYS_SECRET_ID");
    let world = World::start(stack, "RouterRole", std::slice::from_ref(&key_secret)).await;
    world.key_secret(&world.stack.physical_name("ApiKeysSecret"), &[("iam", API_KEY)]).await;
    let results = Results::of(&var(&env, "OUTPUT_DESTINATION"));
    results.create(&world).await;
    let Results::S3 { bucket, .. } = &results else { panic!("the router keeps files in a bucket") };
    let listen = format!("127.0.0.1:{}", free_port());
    let base = format!("http://{listen}");
    let router = world.gpuinfer(&["router", "--listen", &listen, "--classifier", "none"], &env);
    let http = with_api_key(API_KEY);
    router_listening(&http, &base).await;

    let line = |i: usize| format!("{{\"custom_id\": \"c{i}\", \"body\": {{\"pad\": \"{}\"}}}}\n", "x".repeat(1000));
    let (content_type, body) = file_form(line(0).as_bytes());
    let file: Value = http
        .post(format!("{base}/v1/files"))
        .header("content-type", &content_type)
        .body(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = file["id"].as_str().unwrap_or_else(|| panic!("POST /v1/files: {file}\n{}", refusals(&router)));
    let deleted = http.delete(format!("{base}/v1/files/{id}")).send().await.unwrap();
    assert_eq!(deleted.status(), 200, "DELETE /v1/files/{id}\n{}", refusals(&router));
    assert_eq!(http.get(format!("{base}/v1/files/{id}")).send().await.unwrap().status(), 404, "the file is gone");

    let opening = json!({"purpose": "batch", "filename": "parts.jsonl", "bytes": 10, "mime_type": "text/jsonl"});
    let upload: Value =
        http.post(format!("{base}/v1/uploads")).json(&opening).send().await.unwrap().json().await.unwrap();
    let upload_id = upload["id"].as_str().unwrap_or_else(|| panic!("POST /v1/uploads: {upload}"));
    let boundary = "gpuinfer-part";
    let part = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"data\"; filename=\"p\"\r\n\r\n{{\"a\": 1}}\r\n--{boundary}--\r\n"
    );
    let added = http
        .post(format!("{base}/v1/uploads/{upload_id}/parts"))
        .header("content-type", format!("multipart/form-data; boundary={boundary}"))
        .body(part)
        .send()
        .await
        .unwrap();
    assert_eq!(added.status(), 200, "a part\n{}", refusals(&router));
    let cancelled = http.post(format!("{base}/v1/uploads/{upload_id}/cancel")).send().await.unwrap();
    assert_eq!(cancelled.status(), 200, "cancel\n{}", refusals(&router));

    // 9 MiB of valid lines (more than one 8 MiB part), then one that is not JSON: the multipart upload is aborted.
    let mut content: Vec<u8> = (0..9 * 1024).flat_map(|i| line(i).into_bytes()).collect();
    content.extend_from_slice(b"not json\n");
    let (content_type, body) = file_form(&content);
    let refused = http.post(format!("{base}/v1/files")).header("content-type", content_type).body(body).send();
    assert_eq!(refused.await.unwrap().status(), 400, "a file with a line that is not JSON\n{}", refusals(&router));
    let s3 = world.moto.s3(ADMIN).await;
    let open = s3.list_multipart_uploads().bucket(bucket).send().await.unwrap();
    assert!(open.uploads().is_empty(), "a multipart upload was left open: {:?}", open.uploads());

    // The small queue gone: the request is refused (503) and its acceptance undone; back again, the retry enqueues.
    let sqs = world.sqs().await;
    let small = var(&env, "SMALL_QUEUE_URL");
    sqs.delete_queue().queue_url(&small).send().await.unwrap();
    let request = json!({"requestId": uuid::Uuid::new_v4().to_string(), "prompt": "retried", "route": "small"});
    let failed = http.post(format!("{base}/infer")).json(&request).send().await.unwrap();
    assert_eq!(failed.status(), 503, "POST /infer with the queue gone\n{}", refusals(&router));
    sqs.create_queue().queue_name(world.stack.physical_name("SmallQueue")).send().await.unwrap();
    let retried = http.post(format!("{base}/infer")).json(&request).send().await.unwrap();
    assert_eq!(retried.status(), 202, "the retry\n{}", refusals(&router));
    let received = sqs.receive_message().queue_url(&small).max_number_of_messages(10).send().await.unwrap();
    let queued: Vec<Value> =
        received.messages().iter().map(|m| serde_json::from_str(m.body().unwrap()).unwrap()).collect();
    assert_eq!(queued.len(), 1, "the retry was enqueued: {queued:?}");
    assert_eq!(queued[0]["requestId"], request["requestId"]);
    assert_no_refusal(&router);
}

#[tokio::test]
#[ignore = "needs the moto server binary: scripts/test.sh"]
async fn the_router_role_lets_the_router_clean_up_files_uploads_and_failed_enqueues() {
    router_cleanup_flow(&[]).await;
}

#[tokio::test]
#[ignore = "needs the moto server binary: scripts/test.sh"]
async fn the_router_role_lets_the_router_clean_up_in_a_custom_bucket() {
    router_cleanup_flow(&[("OutputDestination", &format!("s3://{}/out/", moto::unique("custom")))]).await;
}

/// As the tier's task role, with its task definition's environment: `fetch-model` of MODEL_S3_PATH (as the
/// container's entrypoint runs it), then the worker: a request on each lane ends as a success document at
/// OUTPUT_DESTINATION (the first engine call fails, so one message is retried through its visibility), a
/// malformed message ends in the DLQ with its ErrorReason, and both lanes end empty.
async fn worker_flow(tier: &str, overrides: &[(&str, &str)]) {
    let models = moto::unique("models");
    let model_path = format!("s3://{models}/weights/");
    let mut parameters = vec![(if tier == "Small" { "ModelS3Path" } else { "LargeModelS3Path" }, model_path.as_str())];
    parameters.extend_from_slice(overrides);
    let world = World::start(stack(&parameters), &format!("{tier}TaskRole"), &[]).await;
    let env = world.stack.environment(&format!("{tier}TaskDefinition"));

    let s3 = world.moto.s3(ADMIN).await;
    s3.create_bucket().bucket(&models).send().await.unwrap();
    s3.put_object().bucket(&models).key("weights/config.json").body(b"{}".to_vec().into()).send().await.unwrap();
    let fetched = world.dir.path().join("model");
    let mut fetch = world.gpuinfer(&["fetch-model", &var(&env, "MODEL_S3_PATH"), fetched.to_str().unwrap()], &env);
    assert!(fetch.exited_within(LIMIT).await.success(), "fetch-model failed:\n{}", fetch.log());
    assert!(fetched.join("config.json").exists(), "fetch-model wrote the model's files");

    let results = Results::of(&var(&env, "OUTPUT_DESTINATION"));
    results.create(&world).await;
    let engine = EngineSimulator::start(Behavior::default()).await;
    engine.script([Reply::Status(500)]);
    let mut worker_env = env.clone();
    worker_env.extend([("ENGINE_URL".into(), engine.url.clone()), ("WAIT_TIME_SECONDS".into(), "1".into())]);
    let worker = world.gpuinfer(&["worker"], &worker_env);

    let sqs = world.sqs().await;
    let lanes = [var(&env, "REQUEST_QUEUE_URL"), var(&env, "HIGH_QUEUE_URL")];
    let mut ids = Vec::new();
    for lane in &lanes {
        let id = uuid::Uuid::new_v4().to_string();
        let body = json!({"requestId": id, "prompt": "hello", "maxTokens": 8});
        sqs.send_message().queue_url(lane).message_body(body.to_string()).send().await.unwrap();
        ids.push(id);
    }
    sqs.send_message().queue_url(&lanes[0]).message_body("{\"prompt\": 5}").send().await.unwrap();

    let started = Instant::now();
    let mut documents = Vec::new();
    while documents.len() < ids.len() {
        assert_no_refusal(&worker);
        assert!(started.elapsed() < LIMIT, "{} of {} result documents after {LIMIT:?}", documents.len(), ids.len());
        let missing: Vec<String> =
            ids.iter().filter(|id| !documents.iter().any(|d: &Value| d["requestId"] == **id)).cloned().collect();
        documents.extend(results.take(&world, &missing).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(documents.iter().all(|d| d["status"] == "success"), "{documents:?}");
    let attempts: Vec<u64> = documents.iter().map(|d| d["attempts"].as_u64().unwrap()).collect();
    assert!(attempts.contains(&2), "one request was retried after the engine's 500: {attempts:?}");

    let dlq = var(&env, "DLQ_URL");
    let dead = eventually(LIMIT, "the malformed message in the DLQ", || {
        let request = sqs.receive_message().queue_url(&dlq).message_attribute_names("All").send();
        async move { request.await.unwrap().messages.filter(|m| !m.is_empty()) }
    })
    .await;
    let attributes = dead[0].message_attributes.as_ref().unwrap();
    assert!(attributes["ErrorReason"].string_value.as_deref().unwrap().starts_with("requestId"), "{attributes:?}");
    for lane in &lanes {
        eventually(LIMIT, "an empty lane: every message deleted", || {
            let request = sqs.get_queue_attributes().queue_url(lane).attribute_names(QueueAttributeName::All).send();
            async move {
                let attributes = request.await.unwrap().attributes.unwrap();
                let count = |name| attributes[&name].parse::<u64>().unwrap();
                let left = count(QueueAttributeName::ApproximateNumberOfMessages)
                    + count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible);
                (left == 0).then_some(())
            }
        })
        .await;
    }
    assert_no_refusal(&worker);
    assert_no_refusal(&fetch);
}

#[tokio::test]
#[ignore = "needs the moto server binary: scripts/test.sh"]
async fn the_router_role_lets_the_router_enqueue_on_every_lane_and_read_and_cancel_results() {
    router_flow(&[]).await;
}

#[tokio::test]
#[ignore = "needs the moto server binary: scripts/test.sh"]
async fn the_router_role_lets_the_router_read_and_cancel_results_in_a_custom_bucket() {
    router_flow(&[("OutputDestination", &format!("s3://{}/out/", moto::unique("custom")))]).await;
}

#[tokio::test]
#[ignore = "needs the moto server binary: scripts/test.sh"]
async fn the_small_task_role_lets_fetch_model_and_the_worker_do_their_work() {
    worker_flow("Small", &[]).await;
}

#[tokio::test]
#[ignore = "needs the moto server binary: scripts/test.sh"]
async fn the_large_task_role_lets_fetch_model_and_the_worker_do_their_work() {
    worker_flow("Large", &[]).await;
}

#[tokio::test]
#[ignore = "needs the moto server binary: scripts/test.sh"]
async fn the_task_role_lets_the_worker_write_results_to_a_custom_bucket() {
    worker_flow("Small", &[("OutputDestination", &format!("s3://{}/out/", moto::unique("custom")))]).await;
}

#[tokio::test]
#[ignore = "needs the moto server binary: scripts/test.sh"]
async fn the_task_role_lets_the_worker_send_results_to_a_custom_queue() {
    let queue = format!("https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{}", moto::unique("results"));
    worker_flow("Small", &[("OutputDestination", &queue)]).await;
}

#[tokio::test]
#[ignore = "needs the moto server binary: scripts/test.sh"]
async fn the_large_task_role_lets_the_worker_write_results_to_a_custom_bucket() {
    worker_flow("Large", &[("OutputDestination", &format!("s3://{}/out/", moto::unique("custom")))]).await;
}

#[tokio::test]
#[ignore = "needs the moto server binary: scripts/test.sh"]
async fn the_large_task_role_lets_the_worker_send_results_to_a_custom_queue() {
    let queue = format!("https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{}", moto::unique("results"));
    worker_flow("Large", &[("OutputDestination", &queue)]).await;
}

/// CloudWatch for the scaler. The Rust SDK speaks only the Smithy RPC v2 CBOR protocol to CloudWatch, which
/// moto does not (getmoto/moto#9195), so GetMetricData comes here: every request signed with `key_id` gets
/// "no datapoints" (an empty CBOR map) and is counted; any other gets a 403.
async fn cloudwatch_double(key_id: String) -> (String, Arc<AtomicUsize>) {
    use axum::http::{HeaderMap, StatusCode, header};
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let answer = move |headers: HeaderMap| async move {
        let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or_default();
        if !authorization.contains(&format!("Credential={key_id}/")) {
            return (StatusCode::FORBIDDEN, [("smithy-protocol", "rpc-v2-cbor")], vec![]);
        }
        counted.fetch_add(1, Ordering::SeqCst);
        (StatusCode::OK, [("smithy-protocol", "rpc-v2-cbor")], vec![0xa0])
    };
    let app = axum::Router::new().fallback(answer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, calls)
}

/// The template's cluster, both tiers' services and their ARNs, as `stack` names them.
fn ecs_names(stack: &Stack) -> (String, [String; 2], Vec<String>) {
    let cluster = stack.physical_name("Cluster");
    let services = ["SmallService", "LargeService"].map(|id| stack.physical_name(id));
    let arns = services.iter().map(|s| format!("arn:aws:ecs:{REGION}:{ACCOUNT}:service/{cluster}/{s}")).collect();
    (cluster, services, arns)
}

/// Creates (as admin) the cluster and both services, each at desired count 0 (a stack at rest).
async fn create_services(world: &World, cluster: &str, services: &[String]) {
    let ecs = aws_sdk_ecs::Client::new(&world.moto.sdk(ADMIN).await);
    ecs.create_cluster().cluster_name(cluster).send().await.unwrap();
    let container =
        aws_sdk_ecs::types::ContainerDefinition::builder().name("inference").image("gpuinfer").memory(512).build();
    ecs.register_task_definition().family("inference").container_definitions(container).send().await.unwrap();
    for service in services {
        ecs.create_service()
            .cluster(cluster)
            .service_name(service)
            .task_definition("inference")
            .desired_count(0)
            .send()
            .await
            .unwrap();
    }
}

/// Each service's desired count, read as admin.
async fn desired_counts(world: &World, cluster: &str, services: &[String]) -> Vec<i32> {
    let ecs = aws_sdk_ecs::Client::new(&world.moto.sdk(ADMIN).await);
    let described = ecs.describe_services().cluster(cluster).set_services(Some(services.to_vec())).send().await;
    let described = described.unwrap().services.unwrap_or_default();
    services
        .iter()
        .map(|name| described.iter().find(|s| s.service_name() == Some(name)).map_or(-1, |s| s.desired_count))
        .collect()
}

/// Wake on arrival, as RouterRole with the RouterFunction's environment of a stack whose image is pushed, over
/// the template's cluster and both services at desired count 0: the 202 of one request for the small tier finds
/// its service asked for one task within 2 s (the large one left at 0); a burst of 1,000 more makes no other
/// UpdateService (the router logs each); the scaler's next tick (ScalerFunction's environment) keeps the woken
/// task and asks only for the tasks still missing.
#[tokio::test]
#[ignore = "needs the moto server binary: scripts/test.sh"]
async fn the_router_role_lets_the_router_wake_a_cold_tier_once_for_a_burst() {
    let stack = stack(&[("ImagePushed", "true")]);
    let (cluster, services, arns) = ecs_names(&stack);
    let world = World::start(stack, "RouterRole", &arns).await;
    create_services(&world, &cluster, &services).await;
    let env = world.stack.environment("RouterFunction");
    assert_eq!(var(&env, "WAKE_ON_ARRIVAL"), "true");
    let listen = format!("127.0.0.1:{}", free_port());
    let base = format!("http://{listen}");
    let router = world.gpuinfer(&["router", "--listen", &listen, "--classifier", "none"], &env);
    let http = reqwest::Client::new();
    router_listening(&http, &base).await;

    let answer = http.post(format!("{base}/infer")).json(&infer("small", "normal", "one")).send().await.unwrap();
    assert_eq!(answer.status(), 202, "{}", refusals(&router));
    let accepted = Instant::now();
    eventually(Duration::from_secs(2), "the small service asked for one task", || {
        let counts = Box::pin(desired_counts(&world, &cluster, &services));
        async move { (counts.await == [1, 0]).then_some(()) }
    })
    .await;
    assert!(accepted.elapsed() < Duration::from_secs(2));

    let burst = (0..1000).map(|n| {
        let request = http.post(format!("{base}/infer")).json(&infer("small", "normal", &format!("burst {n}"))).send();
        async move { request.await.map(|r| r.status().as_u16()).unwrap_or(0) }
    });
    let statuses: Vec<u16> = futures_util::stream::iter(burst).buffer_unordered(32).collect().await;
    assert!(
        statuses.iter().all(|&s| s == 202),
        "{:?}\n{}",
        statuses.iter().filter(|&&s| s != 202).collect::<Vec<_>>(),
        refusals(&router)
    );
    let wakes = router.log().matches("asked for its first one").count();
    assert_eq!(wakes, 1, "one UpdateService for 1,001 requests:\n{}", router.log());
    assert_eq!(desired_counts(&world, &cluster, &services).await, [1, 0]);
    assert_no_refusal(&router);

    // The scaler's next tick, signing as admin (its own role is the test above): 1,001 messages on the woken
    // task ask for the 9 more the small tier's maximum allows (metric 10), not 10 more; nothing to scale in.
    let (cloudwatch, _) = cloudwatch_double(world.moto.key_id(ADMIN).to_owned()).await;
    let mut scaler_env: Vec<(String, String)> = world.stack.environment("ScalerFunction");
    scaler_env.extend(world.moto.child_env(ADMIN));
    scaler_env.push(("AWS_ENDPOINT_URL_CLOUDWATCH".into(), cloudwatch));
    let env: Vec<(&str, String)> = scaler_env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let scaler = ChildProcess::gpuinfer(&["scaler"], &env, &world.dir.path().join("scaler.log"));
    let decision = eventually(LIMIT, "the small tier's scaling decision", || {
        let line = scaler
            .log()
            .lines()
            .find(|l| l.contains("scaling decision") && l.contains("tier=small"))
            .map(str::to_owned);
        std::future::ready(line)
    })
    .await;
    assert!(
        decision.contains(r#""desiredTasks":1"#) && decision.contains(r#""inferenceScalingMetric":10.0"#),
        "{decision}"
    );
}

/// The scaler with the ScalerFunction's environment, as ScalerRole, over the template's cluster and both
/// services: its first tick reads every lane, both services (moto) and GPU utilization (the CloudWatch double,
/// the role's grant checked on its policy document) and decides for both tiers.
#[tokio::test]
#[ignore = "needs the moto server binary: scripts/test.sh"]
async fn the_scaler_role_lets_the_scaler_read_every_input_of_both_tiers() {
    let stack = stack(&[]);
    let (cluster, services, arns) = ecs_names(&stack);
    let metrics = "cloudwatch:GetMetricData";
    assert!(
        stack.role_policies("ScalerRole").iter().any(|(_, p)| allows(p, metrics, "*")),
        "ScalerRole lacks {metrics}"
    );
    let world = World::start(stack, "ScalerRole", &arns).await;
    create_services(&world, &cluster, &services).await;

    let (cloudwatch, metric_reads) = cloudwatch_double(world.moto.key_id("ScalerRole").to_owned()).await;
    let mut env = world.stack.environment("ScalerFunction");
    env.push(("AWS_ENDPOINT_URL_CLOUDWATCH".into(), cloudwatch));
    let scaler = world.gpuinfer(&["scaler"], &env);
    eventually(LIMIT, "a scaling decision for both tiers", || {
        let log = scaler.log();
        assert!(!log.contains("readings failed"), "the scaler could not read its inputs:\n{log}");
        let decided =
            |tier: &str| log.lines().any(|l| l.contains("scaling decision") && l.contains(&format!("tier={tier}")));
        std::future::ready((decided("small") && decided("large")).then_some(()))
    })
    .await;
    assert_eq!(metric_reads.load(Ordering::SeqCst), 2, "one GPU reading per tier");
    assert_no_refusal(&scaler);
}
