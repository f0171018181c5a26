//! The worker over the embedded queues and file store, driving the engine simulator through the real engine client:
//! delivery, retries, drain, engine loss, deadlines and cancels.

use std::time::{Duration, Instant};

use crate::support::request_body;
use crate::support::rig::{Rig, config, rig};
use gpuinfer::{
    ErrorCode, HealthSettings, LeaseSettings, Priority, Queue, QueueCounts, ResultStore, Status, Stopped, Tier,
    WorkerConfig, simulator::Behavior, simulator::Faults, simulator::Reply,
};
use serde_json::json;

#[tokio::test]
async fn a_request_becomes_a_success_document_and_its_message_is_deleted() {
    let rig = rig(Behavior::default(), config()).await;
    let id = rig.send("What is Amazon ECS?").await;
    let doc = rig.result(id).await;
    assert_eq!(doc.status, Status::Success);
    let result = doc.result.as_ref().unwrap();
    assert_eq!(result.text, "echo: What is Amazon ECS?");
    assert_eq!((result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.total_tokens), (4, 8, 12));
    assert_eq!(result.finish_reason, "stop", "8 tokens, under the request's 256");
    assert_eq!(
        (doc.processing.tier, doc.processing.attempts, doc.processing.task_arn.as_str()),
        (Tier::Small, 1, "local")
    );
    assert_eq!(doc.model.as_deref(), Some("simulator-model"), "model discovered from /v1/models");
    rig.drained().await;
    assert_eq!(rig.engine.calls(), 1);
    rig.stop().await;
}

#[tokio::test]
async fn an_existing_result_skips_inference_and_deletes_the_duplicate() {
    let rig = rig(Behavior::default(), config()).await;
    let (id, body) = request_body("already done");
    rig.backends.store.put_if_absent(id, b"{\"status\":\"success\"}").await.unwrap();
    rig.queue.send(&body).await.unwrap();
    rig.drained().await;
    assert_eq!(rig.engine.calls(), 0);
    assert_eq!(rig.backends.store.get(id).await.unwrap().unwrap(), b"{\"status\":\"success\"}", "never overwritten");
    rig.stop().await;
}

#[tokio::test]
async fn malformed_messages_go_to_the_dead_letter_queue_with_a_reason() {
    let rig = rig(Behavior::default(), config()).await;
    rig.queue.send("{\"prompt\": \"no id\"}").await.unwrap();
    rig.queue.send("not json at all").await.unwrap();
    rig.drained().await;
    let dead = rig.backends.dead_letter_queue().peek_all().unwrap();
    assert_eq!(dead.len(), 2);
    assert_eq!(dead[0].1.as_deref(), Some("requestId: required"));
    assert!(dead[1].1.as_deref().unwrap().starts_with("body: not valid JSON"));
    assert_eq!(rig.engine.calls(), 0);
    rig.stop().await;
}

#[tokio::test]
async fn a_transient_failure_is_retried_after_a_back_off_then_succeeds() {
    let rig = rig(Behavior::default(), config()).await;
    rig.engine.script([Reply::Status(503), Reply::Garbage]);
    let id = rig.send("flaky").await;
    let doc = rig.result(id).await;
    assert_eq!((doc.status, doc.processing.attempts), (Status::Success, 3));
    assert_eq!(rig.engine.calls(), 3);
    rig.drained().await;
    rig.stop().await;
}

#[tokio::test]
async fn an_engine_rejection_ends_as_an_error_document_at_once() {
    let rig = rig(Behavior::default(), config()).await;
    rig.engine.script([Reply::Status(400)]);
    let id = rig.send("too long for the context").await;
    let doc = rig.result(id).await;
    assert_eq!(doc.status, Status::Error);
    let error = doc.error.unwrap();
    assert_eq!(error.code, ErrorCode::EngineRejected);
    assert!(error.message.contains("HTTP 400: simulated failure 400"), "{}", error.message);
    assert_eq!(rig.engine.calls(), 1);
    rig.drained().await;
    rig.stop().await;
}

#[tokio::test]
async fn the_last_allowed_attempt_writes_attempts_exhausted_instead_of_dead_lettering() {
    let rig = rig(
        Behavior { faults: Faults { fail_rate: 1.0, fail_status: 500, ..Faults::default() }, ..Behavior::default() },
        config(),
    )
    .await;
    let id = rig.send("always failing").await;
    let doc = rig.result(id).await;
    assert_eq!(doc.status, Status::Error);
    assert_eq!(doc.error.as_ref().unwrap().code, ErrorCode::AttemptsExhausted);
    assert_eq!(doc.processing.attempts, 3);
    assert_eq!(rig.engine.calls(), 3);
    rig.drained().await;
    assert!(rig.backends.dead_letter_queue().peek_all().unwrap().is_empty());
    rig.stop().await;
}

#[tokio::test]
async fn concurrency_fills_exactly_the_configured_slots() {
    let behavior = Behavior { latency: Duration::from_millis(300), ..Behavior::default() };
    let rig = rig(behavior, WorkerConfig { concurrency: 5, ..config() }).await;
    let mut ids = Vec::new();
    for i in 0..15 {
        ids.push(rig.send(&format!("request {i}")).await);
    }
    let started = Instant::now();
    for id in ids {
        assert_eq!(rig.result(id).await.status, Status::Success);
    }
    assert_eq!(rig.engine.max_in_flight(), 5, "never more, and reaching, the configured concurrency");
    assert!(started.elapsed() < Duration::from_millis(300 * 15 / 2), "requests overlap");
    rig.stop().await;
}

#[tokio::test]
async fn a_request_gives_its_slot_back_as_the_engine_answers_and_a_slow_store_pauses_receiving() {
    let rig = rig(Behavior::default(), WorkerConfig { concurrency: 1, adaptive: false, ..config() }).await;
    rig.store.set_stalled(true);
    let ids = [rig.send("first").await, rig.send("second").await];
    rig.engine_called(2).await;
    let third = rig.send("third").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rig.engine.calls(), 2, "two results waiting to be stored, more than the one slot: receiving pauses");
    rig.store.set_stalled(false);
    for id in ids.into_iter().chain([third]) {
        assert_eq!(rig.result(id).await.status, Status::Success);
    }
    assert_eq!(rig.engine.max_in_flight(), 1, "never more in the engine than the one slot");
    rig.stop().await;
}

#[tokio::test]
async fn the_heartbeat_keeps_a_slow_request_invisible() {
    let behavior = Behavior { latency: Duration::from_millis(2500), ..Behavior::default() };
    let lease = LeaseSettings { visibility_timeout: Duration::from_millis(900), ..config().lease };
    let rig = rig(behavior, WorkerConfig { lease, ..config() }).await;
    let id = rig.send("slow").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(rig.queue.counts().await.unwrap(), QueueCounts { visible: 0, in_flight: 1, delayed: 0 });
    assert_eq!(rig.result(id).await.status, Status::Success);
    assert_eq!(rig.engine.calls(), 1, "never received twice");
    rig.stop().await;
}

#[tokio::test]
async fn shutdown_stops_receiving_and_finishes_requests_in_flight() {
    let behavior = Behavior { latency: Duration::from_millis(800), ..Behavior::default() };
    let rig = rig(behavior, WorkerConfig { concurrency: 2, ..config() }).await;
    let ids = [rig.send("a").await, rig.send("b").await];
    let waiting = rig.send("c").await;
    rig.engine_called(2).await;
    let started = Instant::now();
    rig.shutdown.cancel();
    let Rig { worker, backends, queue, .. } = rig;
    let stopped = tokio::time::timeout(Duration::from_secs(5), worker).await.expect("drains in time").unwrap();
    assert_eq!(stopped, Stopped::Drained);
    assert!(started.elapsed() >= Duration::from_millis(300), "waited for the requests in flight");
    for id in ids {
        assert!(backends.store.get(id).await.unwrap().is_some(), "in-flight request {id} finished");
    }
    assert!(backends.store.get(waiting).await.unwrap().is_none());
    assert_eq!(
        queue.counts().await.unwrap(),
        QueueCounts { visible: 1, in_flight: 0, delayed: 0 },
        "the unstarted one is still queued"
    );
}

/// ECS kills a container StopTimeout seconds after SIGTERM (120 s in the template) whatever runs in it; a longer
/// generation must not leave its message invisible for the rest of the visibility timeout.
#[tokio::test]
async fn a_drain_that_times_out_gives_the_unfinished_messages_back_at_once() {
    let behavior = Behavior { latency: Duration::from_secs(30), ..Behavior::default() };
    let config = WorkerConfig {
        concurrency: 2,
        lease: LeaseSettings { visibility_timeout: Duration::from_secs(300), ..config().lease },
        drain_timeout: Duration::from_millis(500),
        ..config()
    };
    let rig = rig(behavior, config).await;
    let ids = [rig.send("long a").await, rig.send("long b").await];
    rig.engine_called(2).await;
    let started = Instant::now();
    rig.shutdown.cancel();
    let Rig { worker, backends, queue, .. } = rig;
    let stopped = tokio::time::timeout(Duration::from_secs(5), worker).await.expect("stops after the drain timeout");
    assert_eq!(stopped.unwrap(), Stopped::Drained);
    assert!(started.elapsed() >= Duration::from_millis(500), "finishing was tried for the whole drain timeout");
    assert_eq!(queue.counts().await.unwrap(), QueueCounts { visible: 2, in_flight: 0, delayed: 0 }, "visible at once");
    for id in ids {
        assert!(backends.store.get(id).await.unwrap().is_none(), "no document for the given-back {id}");
    }
}

#[tokio::test]
async fn the_worker_waits_for_a_healthy_engine_before_receiving() {
    let rig = rig(Behavior { healthy: false, ..Behavior::default() }, config()).await;
    let id = rig.send("patience").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(rig.queue.counts().await.unwrap().visible, 1, "nothing received while the engine is unhealthy");
    rig.engine.set_healthy(true);
    assert_eq!(rig.result(id).await.status, Status::Success);
    rig.stop().await;
}

fn with_loss_window(window: Duration) -> WorkerConfig {
    WorkerConfig { health: HealthSettings { loss_window: window, ..config().health }, ..config() }
}

#[tokio::test]
async fn an_engine_failing_its_health_for_the_window_is_lost_and_every_held_message_given_back() {
    let behavior = Behavior { latency: Duration::from_secs(30), ..Behavior::default() };
    let rig = rig(
        behavior,
        WorkerConfig {
            lease: LeaseSettings { visibility_timeout: Duration::from_secs(300), ..config().lease },
            ..with_loss_window(Duration::from_millis(400))
        },
    )
    .await;
    let ids = [rig.send("a").await, rig.send("b").await, rig.send("c").await];
    rig.engine_called(3).await;
    rig.engine.set_healthy(false);
    let started = Instant::now();
    let Rig { worker, backends, queue, .. } = rig;
    let stopped =
        tokio::time::timeout(Duration::from_secs(5), worker).await.expect("gives up within the window").unwrap();
    assert_eq!(stopped, Stopped::EngineLost { given_back: 3 });
    assert!(started.elapsed() >= Duration::from_millis(400), "not before the window");
    assert_eq!(queue.counts().await.unwrap(), QueueCounts { visible: 3, in_flight: 0, delayed: 0 }, "visible at once");
    for id in ids {
        assert!(backends.store.get(id).await.unwrap().is_none(), "no result, error or otherwise, for {id}");
    }
}

/// A busy engine may answer its health probe late (llama.cpp on a CPU, at its full batch): generations that keep
/// completing say it answers, so the worker neither pauses nor gives the engine up.
#[tokio::test]
async fn an_engine_failing_its_probe_while_it_completes_generations_is_not_lost() {
    let behavior = Behavior { latency: Duration::from_millis(150), slots: 2, ..Behavior::default() };
    let rig = rig(behavior, WorkerConfig { concurrency: 2, ..with_loss_window(Duration::from_millis(600)) }).await;
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(rig.send(&format!("warm {i}")).await);
    }
    rig.engine_called(2).await;
    rig.engine.set_healthy(false);
    for i in 0..16 {
        ids.push(rig.send(&format!("busy {i}")).await);
    }
    for id in ids {
        assert_eq!(rig.result(id).await.status, Status::Success);
    }
    assert!(!rig.worker.is_finished(), "the worker kept running: the engine was not declared lost");
    rig.engine.set_healthy(true);
    rig.stop().await;
}

#[tokio::test]
async fn a_health_blip_shorter_than_the_window_is_ridden_out() {
    let behavior = Behavior { latency: Duration::from_millis(600), ..Behavior::default() };
    let rig = rig(behavior, with_loss_window(Duration::from_secs(5))).await;
    let id = rig.send("steady").await;
    rig.engine_called(1).await;
    rig.engine.set_healthy(false);
    tokio::time::sleep(Duration::from_millis(300)).await;
    rig.engine.set_healthy(true);
    let doc = rig.result(id).await;
    assert_eq!((doc.status, doc.processing.attempts), (Status::Success, 1));
    rig.stop().await;
}

#[tokio::test]
async fn a_request_failing_while_the_engine_is_down_is_held_and_retried_on_the_same_lease() {
    let behavior = Behavior { latency: Duration::from_millis(300), ..Behavior::default() };
    let rig = rig(behavior, with_loss_window(Duration::from_secs(5))).await;
    rig.engine.script([Reply::Status(503)]);
    let id = rig.send("through the outage").await;
    rig.engine_called(1).await;
    rig.engine.set_healthy(false);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(rig.engine.calls(), 1, "not retried while the engine is down");
    assert_eq!(rig.queue.counts().await.unwrap().in_flight, 1, "held, not failed nor given back");
    rig.engine.set_healthy(true);
    let doc = rig.result(id).await;
    assert_eq!(
        (doc.status, doc.processing.attempts),
        (Status::Success, 1),
        "one receive: the 503 of a dead engine is not an attempt"
    );
    assert_eq!(rig.engine.calls(), 2);
    rig.stop().await;
}

#[tokio::test]
async fn a_request_whose_deadline_passed_never_reaches_the_engine_and_ends_expired() {
    let rig = rig(Behavior::default(), config()).await;
    let id = gpuinfer::RequestId::new_v4();
    let past = chrono::Utc::now() - chrono::Duration::seconds(1);
    rig.send_to(Priority::Normal, &json!({"requestId": id, "prompt": "too late", "deadline": past.to_rfc3339()})).await;
    let doc = rig.result(id).await;
    assert_eq!((doc.status, doc.error.as_ref().unwrap().code), (Status::Error, ErrorCode::Expired));
    assert!(doc.error.unwrap().message.contains("passed before inference started"));
    rig.drained().await;
    assert_eq!(rig.engine.calls(), 0, "never run");
    rig.stop().await;
}

#[tokio::test]
async fn a_deadline_that_passes_while_the_request_waits_for_a_slot_expires_it() {
    let behavior = Behavior { latency: Duration::from_millis(1500), ..Behavior::default() };
    let rig = rig(behavior, WorkerConfig { concurrency: 1, ..config() }).await;
    let busy = rig.send("keeps the only slot busy").await;
    rig.engine_called(1).await;
    let (late, on_time) = (gpuinfer::RequestId::new_v4(), gpuinfer::RequestId::new_v4());
    rig.send_to(Priority::Normal, &json!({"requestId": late, "prompt": "late", "deadlineSeconds": 1})).await;
    rig.send_to(Priority::Normal, &json!({"requestId": on_time, "prompt": "fine", "deadlineSeconds": 60})).await;
    assert_eq!(rig.result(busy).await.status, Status::Success);
    assert_eq!(rig.result(late).await.error.unwrap().code, ErrorCode::Expired);
    assert_eq!(rig.result(on_time).await.status, Status::Success);
    assert_eq!(rig.engine.prompts(), ["keeps the only slot busy", "fine"], "the expired one never reached the engine");
    rig.stop().await;
}

#[tokio::test]
async fn a_request_canceled_before_inference_is_never_run() {
    let rig = rig(Behavior::default(), config()).await;
    let (id, body) = request_body("never mind");
    let canceled = rig.cancel(id).await;
    rig.queue.send(&body).await.unwrap();
    rig.drained().await;
    assert_eq!(rig.engine.calls(), 0);
    assert_eq!(rig.document(id).await, canceled, "the cancel stays the request's document");
    rig.stop().await;
}

/// A cancel stored after the engine answered but before the result: the cancel stands, and the finished generation
/// is neither counted as a success nor logged as one.
#[tokio::test]
async fn a_result_that_loses_to_a_cancel_is_not_counted_as_a_success() {
    let behavior = Behavior { latency: Duration::from_millis(400), ..Behavior::default() };
    let rig = rig(behavior, WorkerConfig { cancel_poll: Duration::from_secs(30), ..config() }).await;
    let id = rig.send("cancel me late").await;
    rig.engine_called(1).await;
    let canceled = rig.cancel(id).await;
    rig.drained().await;
    assert_eq!(rig.document(id).await, canceled, "the cancel stays the request's document");
    let succeeded = rig.emf.json_lines().iter().filter(|line| line.get("RequestsSucceeded").is_some()).count();
    assert_eq!(succeeded, 0, "a dropped result is not counted as a success");
    rig.stop().await;
}

/// `queueWaitMs` is how long the message waited before processing began, not waiting plus processing.
#[tokio::test]
async fn queue_wait_excludes_the_processing_time() {
    let behavior = Behavior { latency: Duration::from_millis(600), ..Behavior::default() };
    let rig = rig(behavior, config()).await;
    let id = rig.send("slow").await;
    let document = rig.result(id).await;
    assert!(document.processing.processing_time_ms >= 600, "{}", document.processing.processing_time_ms);
    assert!(
        document.processing.queue_wait_ms < 500,
        "queueWaitMs {} includes the 600 ms generation",
        document.processing.queue_wait_ms
    );
    rig.stop().await;
}

/// What watching for cancels costs: 4 requests running 3 s each at a 100 ms cancel poll look for their document once
/// each before the engine (not once per poll: that was 30 looks per request, 120 in all), while the worker reads the
/// one cancel mark once per poll for all of them; a cancel among them still stops its request within a few polls.
#[tokio::test]
async fn running_requests_share_one_read_of_the_cancel_mark_per_poll() {
    let behavior = Behavior { latency: Duration::from_secs(3), ..Behavior::default() };
    let rig = rig(behavior, config()).await;
    let ids = [rig.send("a").await, rig.send("b").await, rig.send("c").await, rig.send("d").await];
    rig.engine_called(4).await;
    let started = Instant::now();
    for &id in &ids[..3] {
        assert_eq!(rig.result(id).await.status, Status::Success);
    }
    let (looks, mark_reads) = rig.store.looks();
    let polls = started.elapsed().as_millis() as u64 / 100;
    assert!(looks <= 8, "looks for a document: {looks} for 4 requests (a pre-run look each; none per poll)");
    assert!(mark_reads <= polls + 3, "cancel-mark reads: {mark_reads} in {polls} polls, one per poll for all four");
    crate::support::report_figure(&format!(
        "cancel watch: 4 requests × 3 s at a 100 ms cancel poll → {looks} document looks and {mark_reads} mark reads \
         (one look per request per poll would be ~120)"
    ));
    let canceled = rig.send("canceled while it runs").await;
    rig.engine_called(5).await;
    let asked = Instant::now();
    rig.cancel(canceled).await;
    assert_eq!(rig.document(canceled).await["error"]["code"], "canceled");
    crate::support::eventually(Duration::from_secs(2), "the canceled engine call dropped", || async {
        (rig.engine.aborted() == 1).then_some(())
    })
    .await;
    assert!(asked.elapsed() < Duration::from_secs(2), "stopped within a few polls of the mark, not after 3 s");
    rig.stop().await;
}

#[tokio::test]
async fn a_cancel_during_inference_aborts_the_engine_call_and_frees_the_slot() {
    let behavior = Behavior { latency: Duration::from_secs(20), ..Behavior::default() };
    let rig = rig(behavior, WorkerConfig { concurrency: 1, ..config() }).await;
    let id = rig.send("a long generation").await;
    rig.engine_called(1).await;
    let started = Instant::now();
    rig.cancel(id).await;
    rig.drained().await;
    assert!(started.elapsed() < Duration::from_secs(2), "noticed within a few polls, not after the generation");
    let engine = &rig.engine;
    crate::support::eventually(Duration::from_secs(2), "the engine to see its request dropped", || async {
        (engine.aborted() == 1).then_some(())
    })
    .await;
    assert_eq!(rig.document(id).await["error"]["code"], "canceled");
    rig.engine.set_latency(Duration::from_millis(5));
    assert_eq!(rig.result(rig.send("next").await).await.status, Status::Success, "the slot is free again");
    rig.stop().await;
}
