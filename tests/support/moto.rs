//! The moto server (real SQS/S3 emulator) started by scripts/test.sh: SDK clients and fresh queues/buckets.

use std::time::Duration;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_sqs::types::QueueAttributeName;
use gpuinfer::{HealthSettings, Lanes, LeaseSettings, Tier, WorkerConfig};

/// moto's URL; a test that needs it fails (never skips) when it is not running.
pub(crate) fn url() -> String {
    std::env::var("GPUINFER_TEST_MOTO_URL").unwrap_or_else(|_| {
        panic!(
            "this test needs the moto SQS/S3 emulator: run scripts/test.sh, or `scripts/aws-emulator.sh start` \
             and set GPUINFER_TEST_MOTO_URL=http://127.0.0.1:5055"
        )
    })
}

/// Environment for a gpuinfer child process talking to moto (dummy credentials, no instance metadata).
pub(crate) fn child_env() -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL", url()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]
}

pub(crate) async fn sdk() -> SdkConfig {
    sdk_at(&url()).await
}

/// SDK configuration for a moto server at `endpoint` (the shared one, or a test's own).
pub(crate) async fn sdk_at(endpoint: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "moto"))
        .load()
        .await
}

pub(crate) async fn sqs() -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::new(&sdk().await)
}

pub(crate) async fn s3() -> aws_sdk_s3::Client {
    s3_at(&url()).await
}

pub(crate) async fn s3_at(endpoint: &str) -> aws_sdk_s3::Client {
    let config = aws_sdk_s3::config::Builder::from(&sdk_at(endpoint).await).force_path_style(true).build();
    aws_sdk_s3::Client::from_conf(config)
}

/// A unique name for this test's queues and buckets (tests share one moto server).
pub(crate) fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

/// Creates a dead-letter queue and a queue redriving to it after `max_receive_count` receives.
pub(crate) async fn queue_with_dlq(name: &str, visibility_seconds: u32, max_receive_count: u32) -> (String, String) {
    let sqs = sqs().await;
    let dlq = sqs.create_queue().queue_name(format!("{name}-dlq")).send().await.expect("create dlq");
    let dlq_url = dlq.queue_url.expect("dlq url");
    let queue = redriving_queue(name, &dlq_url, visibility_seconds, max_receive_count).await;
    (queue, dlq_url)
}

/// A tier's three lanes, `{name}`, `{name}-high` and `{name}-batch`, all redriving to one dead-letter queue; their
/// URLs and the dead-letter queue's.
pub(crate) async fn lanes_with_dlq(
    name: &str,
    visibility_seconds: u32,
    max_receive_count: u32,
) -> (Lanes<String>, String) {
    let (normal, dlq_url) = queue_with_dlq(name, visibility_seconds, max_receive_count).await;
    let high = redriving_queue(&format!("{name}-high"), &dlq_url, visibility_seconds, max_receive_count).await;
    let batch = redriving_queue(&format!("{name}-batch"), &dlq_url, visibility_seconds, max_receive_count).await;
    (Lanes { high, normal, batch }, dlq_url)
}

async fn redriving_queue(name: &str, dlq_url: &str, visibility_seconds: u32, max_receive_count: u32) -> String {
    let sqs = sqs().await;
    let dlq_arn = sqs
        .get_queue_attributes()
        .queue_url(dlq_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("dlq arn")
        .attributes
        .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
        .expect("QueueArn");
    let redrive = serde_json::json!({ "deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count });
    let queue = sqs
        .create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::VisibilityTimeout, visibility_seconds.to_string())
        .attributes(QueueAttributeName::RedrivePolicy, redrive.to_string())
        .send()
        .await
        .expect("create queue");
    queue.queue_url.expect("queue url")
}

pub(crate) async fn bucket(name: &str) -> String {
    s3().await.create_bucket().bucket(name).send().await.expect("create bucket");
    name.to_owned()
}

/// A bucket that keeps every version of an object, so an overwrite shows as a second version.
pub(crate) async fn versioned_bucket(s3: &aws_sdk_s3::Client, name: &str) -> String {
    use aws_sdk_s3::types::{BucketVersioningStatus, VersioningConfiguration};
    s3.create_bucket().bucket(name).send().await.expect("create bucket");
    let versioning = VersioningConfiguration::builder().status(BucketVersioningStatus::Enabled).build();
    s3.put_bucket_versioning()
        .bucket(name)
        .versioning_configuration(versioning)
        .send()
        .await
        .expect("enable versioning");
    name.to_owned()
}

/// How many versions each key under `prefix` has (at most 1,000 versions in all).
pub(crate) async fn version_counts(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    prefix: &str,
) -> std::collections::HashMap<String, usize> {
    let listed = s3.list_object_versions().bucket(bucket).prefix(prefix).send().await.expect("list object versions");
    let mut counts = std::collections::HashMap::new();
    for version in listed.versions.unwrap_or_default() {
        *counts.entry(version.key.expect("key")).or_default() += 1;
    }
    counts
}

/// Sends every body to the queue, ten per SendMessageBatch.
pub(crate) async fn send_all(url: &str, bodies: &[String]) {
    use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
    let sqs = sqs().await;
    for chunk in bodies.chunks(10) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, body)| SendMessageBatchRequestEntry::builder().id(i.to_string()).message_body(body).build())
            .collect::<Result<Vec<_>, _>>()
            .expect("batch entries");
        let sent = sqs.send_message_batch().queue_url(url).set_entries(Some(entries)).send().await.expect("send batch");
        assert!(sent.failed.is_empty(), "every message sent: {:?}", sent.failed);
    }
}

/// Keys under `prefix` in `bucket` (at most 1,000).
pub(crate) async fn keys(s3: &aws_sdk_s3::Client, bucket: &str, prefix: &str) -> Vec<String> {
    let listed = s3.list_objects_v2().bucket(bucket).prefix(prefix).send().await.expect("list objects");
    listed.contents.unwrap_or_default().into_iter().filter_map(|o| o.key).collect()
}

pub(crate) async fn object(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> serde_json::Value {
    let object = s3.get_object().bucket(bucket).key(key).send().await.expect("get object");
    serde_json::from_slice(&object.body.collect().await.expect("body").into_bytes()).expect("json object")
}

/// A moto server of the test's own on `port` (one it may stop and restart), from the venv scripts/aws-emulator.sh
/// installs; answering when this returns.
pub(crate) async fn start_own(port: u16, log: &std::path::Path) -> super::process::ChildProcess {
    let server = std::env::var_os("GPUINFER_TEST_MOTO_SERVER").map(std::path::PathBuf::from).unwrap_or_else(|| {
        let cache = std::env::var_os("GPUINFER_CACHE").map(std::path::PathBuf::from).unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/gpuinfer")
        });
        cache.join("moto-venv/bin/moto_server")
    });
    assert!(server.exists(), "{} is missing: run scripts/aws-emulator.sh start once", server.display());
    let process = super::process::ChildProcess::spawn(
        std::process::Command::new(server).args(["-H", "127.0.0.1", "-p", &port.to_string()]),
        log,
    );
    let url = format!("http://127.0.0.1:{port}/moto-api/");
    super::eventually(std::time::Duration::from_secs(30), "the test's own moto to answer", || {
        let request = reqwest::get(url.clone());
        async move { request.await.ok().filter(|r| r.status().is_success()).map(|_| ()) }
    })
    .await;
    process
}

/// All messages currently receivable from a queue, with their message attributes.
pub(crate) async fn drain(url: &str) -> Vec<aws_sdk_sqs::types::Message> {
    let sqs = sqs().await;
    let mut all = Vec::new();
    loop {
        let got = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .message_attribute_names("All")
            .send()
            .await
            .expect("receive");
        let messages = got.messages.unwrap_or_default();
        if messages.is_empty() {
            return all;
        }
        all.extend(messages);
    }
}

/// Creates the high-priority lane beside a queue (`<name>-high`) and returns its URL; a worker on SQS needs
/// a high and a normal lane for its tier.
pub(crate) async fn high_lane_of(queue_url: &str) -> String {
    let name = queue_url.rsplit('/').next().expect("a queue URL ends in its name");
    let created =
        sqs().await.create_queue().queue_name(format!("{name}-high")).send().await.expect("create the high lane");
    created.queue_url.expect("high lane url")
}

/// The small tier's worker in the tests on SQS + S3: 4 slots, 1 s long polls, retries at once, the engine probed
/// every 50 ms.
pub(crate) fn worker_config() -> WorkerConfig {
    WorkerConfig {
        concurrency: 4,
        wait_time: Duration::from_secs(1),
        lease: LeaseSettings {
            visibility_timeout: Duration::from_secs(30),
            retry_base: Duration::ZERO,
            ..LeaseSettings::default()
        },
        health: HealthSettings { interval: Duration::from_millis(50), ..HealthSettings::default() },
        ..WorkerConfig::new(Tier::Small)
    }
}
