//! Admission in steps: a step past its deadline saves where it stopped and releases its claim, and the next goes on
//! from there, the custom_ids already seen included; every line is enqueued once, whatever the number of steps; a
//! cancel before admission ends the batch with no files; a deleted input file fails it saying so.

use std::sync::Arc;

use super::*;
use crate::callbacks::outbound::OutboundPolicy;
use crate::contract::tier::{Lanes, PerTier};
use crate::local::LocalBackends;
use crate::ports::Queue;
use crate::router::body_budget::BodyBudget;
use crate::router::openai::batch_record::{BatchOrder, BatchTimes, RequestCounts};
use crate::router::openai::files;
use crate::router::routing::RoutingConfig;
use crate::router::state::CallbackAcceptance;

struct Admitting {
    _dir: tempfile::TempDir,
    backends: LocalBackends,
    state: AppState,
}

fn admitting() -> Admitting {
    let dir = tempfile::tempdir().unwrap();
    let backends = LocalBackends::open(dir.path()).unwrap();
    let lanes = |tier| -> Lanes<Arc<dyn Queue>> {
        backends.tier_lanes(tier, Duration::from_secs(30), 3).map(|q| q as Arc<dyn Queue>)
    };
    let state = AppState {
        queues: PerTier { small: lanes(Tier::Small), large: lanes(Tier::Large) },
        store: backends.store.clone(),
        routing: RoutingConfig::default(),
        classifier: None,
        callbacks: CallbackAcceptance::sent_under(OutboundPolicy::default()),
        metrics: crate::infra::metrics::Emf::to_writer(std::io::sink()),
        bodies: BodyBudget::default(),
        openai: Default::default(),
        wake: None,
        events: None,
    };
    Admitting { _dir: dir, backends, state }
}

/// A batch `validating` on a file of the lines whose custom_ids are `custom_ids` (blank lines between), saved
/// with its admission ahead.
async fn created(objects: &dyn ObjectStore, custom_ids: &[&str]) -> String {
    let text: String = custom_ids
        .iter()
        .map(|id| {
            let body = serde_json::json!({"model": "small", "prompt": "hi", "max_tokens": 4});
            let line = serde_json::json!({"custom_id": id, "method": "POST", "url": "/v1/completions", "body": body});
            format!("{line}\r\n\n")
        })
        .collect();
    let file_id = crate::router::openai::ids::new("file-");
    objects.put(&files::content_key(&file_id), one_chunk(text.into_bytes())).await.unwrap();
    let batch = Batch {
        id: crate::router::openai::ids::new("batch_"),
        object: "batch".into(),
        order: BatchOrder {
            endpoint: "/v1/completions".into(),
            input_file_id: file_id,
            completion_window: "24h".into(),
            metadata: None,
        },
        status: "validating".into(),
        errors: None,
        output_file_id: None,
        error_file_id: None,
        times: BatchTimes { created_at: 0, expires_at: Utc::now().timestamp() + 3600, ..BatchTimes::default() },
        request_counts: RequestCounts::default(),
        owner: None,
    };
    begin(objects, &batch).await.unwrap();
    batch.id
}

/// Steps the batch `id` with deadlines already passed (each step does one line or one send, then saves and
/// releases its claim), one after the other as a server's `admit` does, until it needs no more: how many steps
/// it took. Between two steps, a claim made just now keeps every step off the batch.
async fn step_until_done(state: &AppState, objects: &dyn ObjectStore, id: &str) -> usize {
    for steps in 1..1000 {
        if !step(state, objects, id, Instant::now()).await.unwrap() {
            return steps;
        }
        let released: Progress = read_json(objects, &progress_key(id)).await.unwrap().unwrap();
        assert_eq!(released.claimed_at, 0, "a step that stops releases its claim");
        let held = Progress { claimed_at: Utc::now().timestamp(), ..released };
        write_json(objects, &progress_key(id), &held).await.unwrap();
        assert!(!step(state, objects, id, Instant::now()).await.unwrap(), "a claim that holds keeps steps off");
        write_json(objects, &progress_key(id), &Progress { claimed_at: 0, ..held }).await.unwrap();
    }
    panic!("the admission never ended");
}

#[tokio::test]
async fn a_check_cut_into_steps_still_finds_a_custom_id_seen_steps_before() {
    let Admitting { state, backends, _dir } = admitting();
    let objects = backends.store.as_ref() as &dyn ObjectStore;
    let id = created(objects, &["a", "b", "c", "b"]).await;
    assert!(step_until_done(&state, objects, &id).await >= 4, "one line a step");
    let batch = find(objects, &Caller::default(), &id).await.unwrap();
    assert_eq!(batch.status, "failed");
    let errors = batch.errors.unwrap();
    assert_eq!(errors["data"][0]["code"], "duplicate_custom_id", "{errors}");
    assert_eq!(errors["data"][0]["line"], 7, "the 4th line, blank lines counted: {errors}");
    assert!(errors["data"][0]["message"].as_str().unwrap().contains("repeats line 3"), "{errors}");
    assert!(read_all(objects, &progress_key(&id)).await.unwrap().is_none(), "nothing kept once it ended");
    assert!(read_all(objects, &custom_ids_key(&id)).await.unwrap().is_none());
}

#[tokio::test]
async fn an_admission_cut_into_steps_enqueues_every_line_once() {
    let Admitting { state, backends, _dir } = admitting();
    let objects = backends.store.as_ref() as &dyn ObjectStore;
    let custom_ids: Vec<String> = (0..250).map(|i| format!("req-{i}")).collect();
    let id = created(objects, &custom_ids.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let steps = step_until_done(&state, objects, &id).await;
    assert!(steps > 250, "a line a step checked, then a send a step: {steps}");
    let batch = find(objects, &Caller::default(), &id).await.unwrap();
    assert_eq!((batch.status.as_str(), batch.request_counts.total), ("in_progress", 250));
    let queue = backends.lane_queue(Tier::Small, Priority::Batch, Duration::from_secs(30), 3);
    let mut lines = Vec::new();
    while let Ok(messages) = queue.receive(10, Duration::ZERO).await
        && !messages.is_empty()
    {
        lines.extend(messages.iter().map(|m| serde_json::from_str::<Value>(&m.body).unwrap()["batch"]["line"].clone()));
    }
    let mut lines: Vec<u64> = lines.iter().filter_map(Value::as_u64).collect();
    lines.sort_unstable();
    assert_eq!(lines, (0..250).collect::<Vec<u64>>(), "each line once, in a batch of sends cut three times");
}

#[tokio::test]
async fn a_batch_canceled_before_its_lines_were_admitted_ends_cancelled_with_no_files() {
    let Admitting { state, backends, _dir } = admitting();
    let objects = backends.store.as_ref() as &dyn ObjectStore;
    let id = created(objects, &["a", "b", "c"]).await;
    let mut batch = find(objects, &Caller::default(), &id).await.unwrap();
    batch_lifecycle::cancel(objects, &mut batch).await.unwrap();
    let ended = batch_lifecycle::refresh(&state, objects, batch).await.unwrap();
    assert_eq!(ended.status, "cancelled");
    assert_eq!((ended.output_file_id, ended.error_file_id), (None, None), "nothing ran: no file");
    assert!(!step(&state, objects, &id, Instant::now() + STEP).await.unwrap(), "nothing more to admit");
    assert!(read_all(objects, &progress_key(&id)).await.unwrap().is_none());
    let queue = backends.lane_queue(Tier::Small, Priority::Batch, Duration::from_secs(30), 3);
    assert!(queue.receive(10, Duration::ZERO).await.unwrap().is_empty(), "no line was enqueued");
}

#[tokio::test]
async fn a_batch_whose_input_file_is_deleted_while_it_is_admitted_fails_saying_so() {
    let Admitting { state, backends, _dir } = admitting();
    let objects = backends.store.as_ref() as &dyn ObjectStore;
    let id = created(objects, &["a", "b"]).await;
    let batch = find(objects, &Caller::default(), &id).await.unwrap();
    objects.delete(&files::content_key(&batch.order.input_file_id)).await.unwrap();
    assert!(!step(&state, objects, &id, Instant::now() + STEP).await.unwrap());
    let failed = find(objects, &Caller::default(), &id).await.unwrap();
    assert_eq!(failed.status, "failed");
    assert_eq!(failed.errors.unwrap()["data"][0]["code"], "input_file_deleted");
    assert!(read_all(objects, &progress_key(&id)).await.unwrap().is_none(), "nothing left to resume");
}
