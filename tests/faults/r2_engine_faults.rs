//! R2 engine faults: an engine answering 30% 5xx, hanging on 5% and sending malformed JSON on 3%. Every
//! request ends as a success or an error document, nothing stays in flight, and the dead-letter queue holds
//! exactly the poison messages.

use std::time::{Duration, Instant};

use gpuinfer::{LocalBackends, Queue, Tier};

use crate::harness::{FirstSeen, emptied, seconds, worker_args};
use crate::support::engine_process::EngineProcess;
use crate::support::process::ChildProcess;
use crate::support::{eventually, report_figure, request_body};

const REQUESTS: usize = 300;

#[tokio::test]
async fn r2_a_failing_hanging_garbling_engine_leaves_a_document_for_every_request_and_dead_letters_only_poison() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let backends = LocalBackends::open(dir.path()).unwrap();
    let queue = backends.lane_queue(Tier::Small, gpuinfer::Priority::Normal, Duration::from_secs(3), 3);
    let poison = [
        "not json at all".to_owned(),
        r#"{"prompt": "a request without its requestId"}"#.to_owned(),
        format!(r#"{{"requestId": "{}", "prompt": "hi", "maxTokens": 99999}}"#, uuid::Uuid::new_v4()),
        "[1, 2, 3]".to_owned(),
    ];
    for i in 0..REQUESTS {
        if i % 75 == 0 {
            queue.send(&poison[i / 75]).await.unwrap();
        }
        queue.send(&request_body(&format!("engine fault test {i}")).1).await.unwrap();
    }
    let engine = EngineProcess::start(&[
        "--latency-ms",
        "10",
        "--fail-rate",
        "0.30",
        "--fail-status",
        "503",
        "--hang-rate",
        "0.05",
        "--hang-ms",
        "5000",
        "--garbage-rate",
        "0.03",
    ]);
    let mut args = worker_args(&engine.url, "16", "3", "1");
    args.extend(["--engine-timeout-seconds", "1", "--embedded-queues", "--data-dir", dir.path().to_str().unwrap()]);
    let mut worker = ChildProcess::gpuinfer(&args, &[], &dir.path().join("worker.log"));

    let mut results = FirstSeen::new(&dir.path().join("results"));
    eventually(Duration::from_secs(90), "a document for every request", || {
        std::future::ready((results.scan() >= REQUESTS).then_some(()))
    })
    .await;
    emptied(&*queue, Duration::from_secs(20)).await;
    let documents = results.documents();
    assert_eq!(documents.len(), REQUESTS, "one document per request");
    let errors: Vec<_> = documents.iter().filter(|d| d["status"] != "success").collect();
    for error in &errors {
        assert_eq!(error["status"], "error", "{error}");
        assert_eq!(error["error"]["code"], "attempts_exhausted", "{error}");
        assert_eq!(error["attempts"], 3, "{error}");
    }
    let mut dead: Vec<String> = backends.dead_letter_queue().peek_all().unwrap().into_iter().map(|(b, _)| b).collect();
    dead.sort();
    let mut expected = poison.to_vec();
    expected.sort();
    assert_eq!(dead, expected, "the dead-letter queue holds exactly the poison messages");
    let [calls, failed, hung, garbled] =
        [engine.calls().await, engine.stat("failed").await, engine.stat("hung").await, engine.stat("garbled").await];
    assert!(failed > 0 && hung > 0 && garbled > 0, "every kind of fault happened: {failed} {hung} {garbled}");
    worker.signal("TERM");
    assert!(worker.exited_within(Duration::from_secs(10)).await.success());
    report_figure(&format!(
        "R2 engine faults: {REQUESTS} requests + {} poison, 0 lost, 0 stuck in flight, {} success + {} error \
         documents, {} dead-lettered (only the poison), {calls} engine calls ({failed} 5xx, {hung} timeouts, \
         {garbled} malformed), {}",
        poison.len(),
        REQUESTS - errors.len(),
        errors.len(),
        dead.len(),
        seconds(started)
    ));
}
