//! R7 notice: SIGTERM to `gpuinfer worker` with a short drain (a Spot instance's two-minute notice, as ECS drains
//! it), on the embedded queue and on SQS + S3 (moto). Requests whose token budget ends within the drain at the
//! engine's pace finish; the others are given back within a second, their engine calls aborted, and a second worker
//! ends them: each request once, none lost, no partial result stored.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuinfer::{LocalBackends, LocalQueue, Priority, Queue, QueueCounts, RequestId, Tier};
use serde_json::{Value, json};

use crate::harness::{seconds, sqs_counts, worker_env};
use crate::support::engine_process::EngineProcess;
use crate::support::process::ChildProcess;
use crate::support::{eventually, moto, report_figure};

/// The worker's drain: shorter than a long request, longer than a medium one.
const DRAIN_SECONDS: &str = "5";
/// The engine's time per token: 40 tokens take 2 s, 200 take 10 s.
const TOKEN_MS: &str = "50";
const MEDIUM_TOKENS: u32 = 40;
const LONG_TOKENS: u32 = 200;

/// Where the requests wait and their results go.
enum Backend {
    Embedded { dir: tempfile::TempDir, queue: Arc<LocalQueue>, dead_letters: LocalQueue },
    Sqs { queue_url: String, dlq_url: String, s3: aws_sdk_s3::Client, bucket: String, env: Vec<(&'static str, String)> },
}

impl Backend {
    fn embedded() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let backends = LocalBackends::open(dir.path()).unwrap();
        let queue = backends.lane_queue(Tier::Small, Priority::Normal, Duration::from_secs(300), 3);
        Backend::Embedded { queue, dead_letters: backends.dead_letter_queue(), dir }
    }

    async fn sqs() -> Self {
        let name = moto::unique("r7");
        let (queue_url, dlq_url) = moto::queue_with_dlq(&name, 300, 3).await;
        let (s3, bucket) = (moto::s3().await, moto::bucket(&name).await);
        let env = worker_env(&queue_url, &dlq_url, &bucket).await;
        Backend::Sqs { queue_url, dlq_url, s3, bucket, env }
    }

    async fn send(&self, tokens: u32) -> RequestId {
        let id = RequestId::new_v4();
        let body = json!({ "requestId": id, "prompt": "notice", "maxTokens": tokens }).to_string();
        match self {
            Backend::Embedded { queue, .. } => queue.send(&body).await.unwrap(),
            Backend::Sqs { queue_url, .. } => moto::send_all(queue_url, &[body]).await,
        }
        id
    }

    async fn counts(&self) -> QueueCounts {
        match self {
            Backend::Embedded { queue, .. } => queue.counts().await.unwrap(),
            Backend::Sqs { queue_url, .. } => sqs_counts(queue_url).await,
        }
    }

    async fn dead_lettered(&self) -> bool {
        match self {
            Backend::Embedded { dead_letters, .. } => !dead_letters.peek_all().unwrap().is_empty(),
            Backend::Sqs { dlq_url, .. } => sqs_counts(dlq_url).await != QueueCounts::default(),
        }
    }

    async fn document(&self, id: RequestId) -> Option<Value> {
        match self {
            Backend::Embedded { dir, .. } => std::fs::read(dir.path().join(format!("results/{id}.json")))
                .ok()
                .map(|bytes| serde_json::from_slice(&bytes).unwrap()),
            Backend::Sqs { s3, bucket, .. } => {
                let key = format!("results/{id}.json");
                let keys = moto::keys(s3, bucket, "results/").await;
                match keys.contains(&key) {
                    true => Some(moto::object(s3, bucket, &key).await),
                    false => None,
                }
            }
        }
    }

    fn worker(&self, engine: &str, log: &str) -> ChildProcess {
        let mut args = vec!["worker", "--tier", "small", "--engine-url", engine, "--wait-time-seconds", "1"];
        args.extend(["--drain-timeout-seconds", DRAIN_SECONDS]);
        match self {
            Backend::Embedded { dir, .. } => {
                args.extend(["--embedded-queues", "--data-dir", dir.path().to_str().unwrap()]);
                ChildProcess::gpuinfer(&args, &[], &dir.path().join(log))
            }
            Backend::Sqs { env, .. } => {
                ChildProcess::gpuinfer(&args, env, &std::env::temp_dir().join(format!("{}-{log}", std::process::id())))
            }
        }
    }

    /// The documents of `ids` once each has one, within `limit`.
    async fn documents(&self, ids: &[RequestId], limit: Duration) -> Vec<Value> {
        eventually(limit, "the requests' documents", || async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut found = Vec::new();
            for id in ids {
                found.push(self.document(*id).await?);
            }
            Some(found)
        })
        .await
    }
}

async fn a_notice_gives_back_at_once_what_cannot_finish(backend: Backend, label: &str) {
    let started = Instant::now();
    let engine = EngineProcess::start(&["--completion-tokens", "400", "--token-ms", TOKEN_MS]);
    let mut first = backend.worker(&engine.url, "first.log");
    // One generation gives the worker the engine's pace.
    let warm = backend.send(8).await;
    backend.documents(&[warm], Duration::from_secs(20)).await;
    let medium = vec![backend.send(MEDIUM_TOKENS).await, backend.send(MEDIUM_TOKENS).await];
    let long = vec![backend.send(LONG_TOKENS).await, backend.send(LONG_TOKENS).await];
    let engine = &engine;
    eventually(Duration::from_secs(20), "the four requests in the engine", || async {
        (engine.stat("inFlight").await == 4).then_some(())
    })
    .await;
    first.signal("TERM");
    let noticed = Instant::now();
    let given_back = eventually(Duration::from_secs(4), "the long requests visible again", || async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        (backend.counts().await.visible == 2).then(|| noticed.elapsed())
    })
    .await;
    // As soon as receiving has stopped: an open long poll returns first (`--wait-time-seconds 1`), so it cannot
    // take back what is given back.
    assert!(given_back <= Duration::from_millis(1500), "given back {given_back:?} after the notice");
    assert!(first.exited_within(Duration::from_secs(10)).await.success(), "the drained worker exits 0");
    let exited = noticed.elapsed();
    for document in backend.documents(&medium, Duration::from_secs(1)).await {
        assert_eq!((&document["status"], &document["attempts"]), (&json!("success"), &json!(1)), "{document}");
    }
    for id in &long {
        assert!(backend.document(*id).await.is_none(), "no partial result of a given-back request");
    }

    let mut second = backend.worker(&engine.url, "second.log");
    for document in backend.documents(&long, Duration::from_secs(30)).await {
        assert_eq!((&document["status"], &document["attempts"]), (&json!("success"), &json!(2)), "{document}");
        assert_eq!(document["result"]["usage"]["completionTokens"], LONG_TOKENS, "the whole answer: {document}");
    }
    assert_eq!(backend.counts().await, QueueCounts::default());
    assert!(!backend.dead_lettered().await, "nothing dead-lettered");
    second.signal("TERM");
    assert!(second.exited_within(Duration::from_secs(10)).await.success());
    report_figure(&format!(
        "R7 notice ({label}): drain {DRAIN_SECONDS} s; 2 requests that fit it finished, 2 that did not were visible \
         again {:.2} s after SIGTERM and ended by a second worker; exit {:.1} s after; 0 lost; {}",
        given_back.as_secs_f64(),
        exited.as_secs_f64(),
        seconds(started)
    ));
}

#[tokio::test]
async fn r7_a_notice_on_the_embedded_queue_gives_back_at_once_what_cannot_finish_before_the_drain_ends() {
    a_notice_gives_back_at_once_what_cannot_finish(Backend::embedded(), "embedded queue").await;
}

#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn r7_a_notice_on_sqs_gives_back_at_once_what_cannot_finish_before_the_drain_ends() {
    a_notice_gives_back_at_once_what_cannot_finish(Backend::sqs().await, "SQS + S3 on moto").await;
}
