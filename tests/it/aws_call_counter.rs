//! scripts/bench/aws_call_counter.py, the recording proxy behind the "AWS calls and price per request" bench
//! (scripts/bench/aws_calls.py): its classification unit tests (scripts/bench/test_aws_call_counter.py), then the
//! SDK clients gpuinfer uses (SQS, S3, ECS, CloudWatch) sending through it to moto, every call counted once under
//! its caller, service and operation. The second test needs the moto server (GPUINFER_TEST_MOTO_URL).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use aws_config::{BehaviorVersion, Region};
use serde_json::Value;

use crate::support::{free_port, moto};

const COUNTER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/bench/aws_call_counter.py");

/// The counter process, killed when dropped.
struct Counter {
    child: Child,
    control: u16,
    aws: u16,
}

impl Counter {
    fn start(upstream: &str) -> Self {
        let (control, aws) = (free_port(), free_port());
        let mut child = Command::new("python3")
            .arg(COUNTER)
            .args(["--control", &control.to_string(), "--aws", &format!("{aws}={upstream}")])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs scripts/bench/aws_call_counter.py");
        let mut ready = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut ready).unwrap();
        assert!(ready.contains("ready"), "the counter did not start: {ready:?}");
        Counter { child, control, aws }
    }

    /// (service, operation) of every call `caller` made, sorted.
    async fn calls_of(&self, caller: &str) -> Vec<(String, String)> {
        let answer: Value =
            reqwest::get(format!("http://127.0.0.1:{}/", self.control)).await.unwrap().json().await.unwrap();
        let mut calls: Vec<(String, String)> = answer["calls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|call| call["caller"] == caller)
            .map(|call| (call["service"].as_str().unwrap().to_owned(), call["operation"].as_str().unwrap().to_owned()))
            .collect();
        calls.sort();
        calls
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_counter_classifies_each_protocol_as_the_sdks_send_it() {
    let output = Command::new("python3")
        .args(["-m", "unittest", "scripts/bench/test_aws_call_counter.py"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("python3 runs the counter's unit tests");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

#[tokio::test]
#[ignore = "needs moto (scripts/test.sh starts it)"]
async fn every_call_the_sdks_make_through_the_counter_is_counted_once_by_operation() {
    let counter = Counter::start(&moto::url());
    let sdk = aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(format!("http://127.0.0.1:{}", counter.aws))
        .region(Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new("COUNTER_TEST", "test", None, None, "test"))
        .load()
        .await;

    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let queue = sqs.create_queue().queue_name(moto::unique("counter")).send().await.unwrap().queue_url.unwrap();
    sqs.send_message().queue_url(&queue).message_body("counted").send().await.unwrap();
    let received = sqs.receive_message().queue_url(&queue).wait_time_seconds(1).send().await.unwrap();
    let handle = received.messages()[0].receipt_handle().unwrap();
    let entry = aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder().id("0").receipt_handle(handle).build();
    sqs.delete_message_batch().queue_url(&queue).entries(entry.unwrap()).send().await.unwrap();
    sqs.get_queue_attributes()
        .queue_url(&queue)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .unwrap();

    let s3 = gpuinfer::s3_client(&sdk);
    let bucket = moto::unique("counter");
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    s3.put_object().bucket(&bucket).key("results/a.json").body(b"{}".to_vec().into()).send().await.unwrap();
    s3.head_object().bucket(&bucket).key("results/a.json").send().await.unwrap();
    s3.get_object().bucket(&bucket).key("results/a.json").send().await.unwrap();
    s3.list_objects_v2().bucket(&bucket).prefix("results/").send().await.unwrap();
    s3.delete_object().bucket(&bucket).key("results/a.json").send().await.unwrap();

    // Answered or refused by moto, each is one call.
    let ecs = aws_sdk_ecs::Client::new(&sdk);
    let _ = ecs.describe_services().cluster("counter-cluster").services("counter-small").send().await;
    let cloudwatch = aws_sdk_cloudwatch::Client::new(&sdk);
    let now = aws_sdk_cloudwatch::primitives::DateTime::from(std::time::SystemTime::now());
    let query = aws_sdk_cloudwatch::types::MetricDataQuery::builder().id("q").expression("SELECT 1").build();
    let _ = cloudwatch.get_metric_data().metric_data_queries(query).start_time(now).end_time(now).send().await;

    let expected = [
        ("cloudwatch", "GetMetricData"),
        ("ecs", "DescribeServices"),
        ("s3", "CreateBucket"),
        ("s3", "DeleteObject"),
        ("s3", "GetObject"),
        ("s3", "HeadObject"),
        ("s3", "ListObjectsV2"),
        ("s3", "PutObject"),
        ("sqs", "CreateQueue"),
        ("sqs", "DeleteMessageBatch"),
        ("sqs", "GetQueueAttributes"),
        ("sqs", "ReceiveMessage"),
        ("sqs", "SendMessage"),
    ];
    let expected: Vec<(String, String)> = expected.iter().map(|(s, o)| ((*s).to_owned(), (*o).to_owned())).collect();
    assert_eq!(counter.calls_of("counter_test").await, expected);
}
