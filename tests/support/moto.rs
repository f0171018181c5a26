//! The moto server (real SQS/S3 emulator) started by scripts/test.sh: SDK clients and fresh queues/buckets.

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_sqs::types::QueueAttributeName;
use gpuinfer::lanes::Lanes;

/// moto's URL; a test that needs it fails (never skips) when it is not running.
pub fn url() -> String {
    std::env::var("GPUINFER_TEST_MOTO_URL").unwrap_or_else(|_| {
        panic!(
            "this test needs the moto SQS/S3 emulator: run scripts/test.sh, or `scripts/aws-emulator.sh start` \
             and set GPUINFER_TEST_MOTO_URL=http://127.0.0.1:5055"
        )
    })
}

/// Environment for a gpuinfer child process talking to moto (dummy credentials, no instance metadata).
pub fn child_env() -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL", url()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]
}

pub async fn sdk() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(url())
        .region(Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "moto"))
        .load()
        .await
}

pub async fn sqs() -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::new(&sdk().await)
}

pub async fn s3() -> aws_sdk_s3::Client {
    let config = aws_sdk_s3::config::Builder::from(&sdk().await).force_path_style(true).build();
    aws_sdk_s3::Client::from_conf(config)
}

/// A unique name for this test's queues and buckets (tests share one moto server).
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

/// Creates a dead-letter queue and a queue redriving to it after `max_receive_count` receives.
pub async fn queue_with_dlq(name: &str, visibility_seconds: u32, max_receive_count: u32) -> (String, String) {
    let sqs = sqs().await;
    let dlq = sqs.create_queue().queue_name(format!("{name}-dlq")).send().await.expect("create dlq");
    let dlq_url = dlq.queue_url.expect("dlq url");
    let queue = redriving_queue(name, &dlq_url, visibility_seconds, max_receive_count).await;
    (queue, dlq_url)
}

/// A tier's two lanes, `{name}` and `{name}-high`, both redriving to one dead-letter queue; their URLs and the
/// dead-letter queue's.
pub async fn lanes_with_dlq(name: &str, visibility_seconds: u32, max_receive_count: u32) -> (Lanes<String>, String) {
    let (normal, dlq_url) = queue_with_dlq(name, visibility_seconds, max_receive_count).await;
    let high = redriving_queue(&format!("{name}-high"), &dlq_url, visibility_seconds, max_receive_count).await;
    (Lanes { high, normal }, dlq_url)
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

pub async fn bucket(name: &str) -> String {
    s3().await.create_bucket().bucket(name).send().await.expect("create bucket");
    name.to_owned()
}

/// Keys under `prefix` in `bucket`.
pub async fn keys(bucket: &str, prefix: &str) -> Vec<String> {
    let listed = s3().await.list_objects_v2().bucket(bucket).prefix(prefix).send().await.expect("list objects");
    listed.contents.unwrap_or_default().into_iter().filter_map(|o| o.key).collect()
}

pub async fn object(bucket: &str, key: &str) -> serde_json::Value {
    let object = s3().await.get_object().bucket(bucket).key(key).send().await.expect("get object");
    serde_json::from_slice(&object.body.collect().await.expect("body").into_bytes()).expect("json object")
}

/// All messages currently receivable from a queue, with their message attributes.
pub async fn drain(url: &str) -> Vec<aws_sdk_sqs::types::Message> {
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
