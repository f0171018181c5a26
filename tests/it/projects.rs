//! Each key sees its own project's: on a router with keys of two projects (`a`, with two keys, and `b`), neither
//! project lists, reads, downloads, cancels, deletes or continues the other's files, uploads, batches and responses
//! (a 404 in OpenAI's shape, word for word the answer for an id that does not exist), while the project's second key
//! sees them and ends them; and the official `openai` client of one project gets `NotFoundError` for the other's
//! (tests/openai/two_projects_client.py).

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpuinfer::{ApiKeys, AppState, KeySource, new_object_id};
use serde_json::{Value, json};

use crate::support::dev::Dev;
use crate::support::engine_process::EngineProcess;
use crate::support::free_port;
use crate::support::router::{Fixture, admitted, call, fixture, get};
use crate::uploads::{form, post_form, post_json};

/// Two keys of project `a`, one of project `b`, as `--api-key` takes them.
const KEYS: &str = "a=sk-a,a=sk-a2,b=sk-b";
const A: &str = "sk-a";
const A2: &str = "sk-a2";
const B: &str = "sk-b";

/// A batch input file of one line.
const LINE: &[u8] =
    b"{\"custom_id\":\"a-0\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":\"small\",\"prompt\":\"hi\"}}\n";

/// The router over embedded backends, with `KEYS`.
fn router_with_keys() -> Fixture {
    let mut f = fixture();
    let mut state = Arc::into_inner(f.state).expect("the fixture's state, not yet shared");
    state.openai.api_keys = ApiKeys::parse_local(&[KEYS.into()]).unwrap().map(KeySource::Local);
    f.state = Arc::new(state);
    f
}

/// `request` sent with `key`: the status and JSON body (Null when not JSON).
async fn send(state: &Arc<AppState>, key: &str, mut request: Request<Body>) -> (StatusCode, Value) {
    request.headers_mut().insert("authorization", format!("Bearer {key}").parse().unwrap());
    call(state, request).await
}

fn post(path: &str) -> Request<Body> {
    post_json(path, &json!({}))
}

fn delete(path: &str) -> Request<Body> {
    Request::delete(path).body(Body::empty()).unwrap()
}

/// What one project made: a file, an upload still open with its one part, a batch and a background response.
struct Made {
    file: String,
    upload: String,
    part: String,
    batch: String,
    response: String,
}

async fn make(state: &Arc<AppState>, key: &str) -> Made {
    let id = |(status, body): (StatusCode, Value)| {
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body.get("owner").is_none(), "answered in OpenAI's shape, without its owner: {body}");
        body["id"].as_str().unwrap().to_owned()
    };
    let upload = form(&[("purpose", None, b"batch"), ("file", Some("in.jsonl"), LINE)]);
    let file = id(send(state, key, post_form("/v1/files", upload)).await);
    let opening = json!({"filename": "in.jsonl", "purpose": "batch", "bytes": LINE.len(), "mime_type": "text/jsonl"});
    let upload = id(send(state, key, post_json("/v1/uploads", &opening)).await);
    let part = post_form(&format!("/v1/uploads/{upload}/parts"), form(&[("data", Some("part"), LINE)]));
    let part = id(send(state, key, part).await);
    let batch = json!({"input_file_id": file, "endpoint": "/v1/completions", "completion_window": "24h"});
    let batch = id(send(state, key, post_json("/v1/batches", &batch)).await);
    admitted(state, &json!({ "id": batch }), Some(key)).await;
    let response = json!({"model": "small", "input": "Say hi.", "background": true});
    let response = id(send(state, key, post_json("/v1/responses", &response)).await);
    Made { file, upload, part, batch, response }
}

/// The ids a list call answers.
async fn listed(state: &Arc<AppState>, key: &str, path: &str) -> Vec<String> {
    let (status, list) = send(state, key, get(path)).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list["data"].as_array().unwrap().iter().map(|o| o["id"].as_str().unwrap().to_owned()).collect()
}

/// `key`'s `ask` of another project's object `id` is answered `status` in OpenAI's error shape, exactly as the same
/// ask of `missing`, an id of the same kind that does not exist (each id put in the other's place).
async fn as_if_missing(
    state: &Arc<AppState>,
    key: &str,
    ask: impl Fn(&str) -> Request<Body>,
    (id, missing): (&str, &str),
    status: StatusCode,
) {
    let (theirs_status, theirs) = send(state, key, ask(id)).await;
    let (missing_status, absent) = send(state, key, ask(missing)).await;
    assert_eq!((theirs_status, missing_status), (status, status), "{theirs} / {absent}");
    assert!(theirs["error"]["message"].is_string() && theirs["error"]["type"].is_string(), "{theirs}");
    assert_eq!(theirs.to_string().replace(id, "ID"), absent.to_string().replace(missing, "ID"));
}

/// Every call of `other` on what `made` holds is answered as for an id that does not exist.
async fn invisible(state: &Arc<AppState>, other: &str, made: &Made) {
    let not_found = StatusCode::NOT_FOUND;
    let file = (made.file.as_str(), &*new_object_id("file-"));
    for ask in [
        |id: &str| get(&format!("/v1/files/{id}")),
        |id: &str| get(&format!("/v1/files/{id}/content")),
        |id: &str| delete(&format!("/v1/files/{id}")),
    ] {
        as_if_missing(state, other, ask, file, not_found).await;
    }
    let batch_on = |id: &str| {
        post_json(
            "/v1/batches",
            &json!({"input_file_id": id, "endpoint": "/v1/completions", "completion_window": "24h"}),
        )
    };
    as_if_missing(state, other, batch_on, file, StatusCode::BAD_REQUEST).await;

    let upload = (made.upload.as_str(), &*new_object_id("upload_"));
    let part = |id: &str| post_form(&format!("/v1/uploads/{id}/parts"), form(&[("data", Some("part"), LINE)]));
    as_if_missing(state, other, part, upload, not_found).await;
    let complete = |id: &str| post_json(&format!("/v1/uploads/{id}/complete"), &json!({"part_ids": []}));
    as_if_missing(state, other, complete, upload, not_found).await;
    as_if_missing(state, other, |id| post(&format!("/v1/uploads/{id}/cancel")), upload, not_found).await;

    let batch = (made.batch.as_str(), &*new_object_id("batch_"));
    as_if_missing(state, other, |id| get(&format!("/v1/batches/{id}")), batch, not_found).await;
    as_if_missing(state, other, |id| post(&format!("/v1/batches/{id}/cancel")), batch, not_found).await;

    let response = (made.response.as_str(), &*format!("resp_{}", uuid::Uuid::new_v4().simple()));
    for ask in [
        |id: &str| get(&format!("/v1/responses/{id}")),
        |id: &str| post(&format!("/v1/responses/{id}/cancel")),
        |id: &str| delete(&format!("/v1/responses/{id}")),
        |id: &str| get(&format!("/v1/responses/{id}/input_items")),
        |id: &str| post_json("/v1/responses", &json!({"model": "small", "input": "x", "previous_response_id": id})),
    ] {
        as_if_missing(state, other, ask, response, not_found).await;
    }
    assert!(!listed(state, other, "/v1/files").await.contains(&made.file));
    assert!(!listed(state, other, "/v1/batches").await.contains(&made.batch));
}

#[tokio::test]
async fn neither_project_sees_the_others_objects_and_a_second_key_of_a_project_sees_its_own() {
    let f = router_with_keys();
    let (of_a, of_b) = (make(&f.state, A).await, make(&f.state, B).await);
    invisible(&f.state, B, &of_a).await;
    invisible(&f.state, A, &of_b).await;
    assert_eq!(listed(&f.state, B, "/v1/files").await, [of_b.file.as_str()], "b's own file, and nothing of a's");

    // A's second key sees all of it, untouched by B's calls, and ends it.
    let ok = |(status, body): (StatusCode, Value)| {
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    };
    assert_eq!(listed(&f.state, A2, "/v1/files").await, [of_a.file.as_str()]);
    assert_eq!(listed(&f.state, A2, "/v1/batches").await, [of_a.batch.as_str()]);
    assert_eq!(ok(send(&f.state, A2, get(&format!("/v1/files/{}", of_a.file))).await)["bytes"], LINE.len());
    let (status, _) = send(&f.state, A2, get(&format!("/v1/files/{}/content", of_a.file))).await;
    assert_eq!(status, StatusCode::OK, "the content downloads");
    assert_eq!(ok(send(&f.state, A2, get(&format!("/v1/batches/{}", of_a.batch))).await)["status"], "in_progress");
    let items = ok(send(&f.state, A2, get(&format!("/v1/responses/{}/input_items", of_a.response))).await);
    assert_eq!(items["data"][0]["content"][0]["text"], "Say hi.", "{items}");
    let cancelled = ok(send(&f.state, A2, post(&format!("/v1/batches/{}/cancel", of_a.batch))).await);
    assert!(["cancelling", "cancelled"].contains(&cancelled["status"].as_str().unwrap()), "{cancelled}");
    let cancelled = ok(send(&f.state, A2, post(&format!("/v1/responses/{}/cancel", of_a.response))).await);
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    ok(send(&f.state, A2, delete(&format!("/v1/responses/{}", of_a.response))).await);

    let completion = json!({"part_ids": [of_a.part]});
    let completed =
        ok(send(&f.state, A2, post_json(&format!("/v1/uploads/{}/complete", of_a.upload), &completion)).await);
    let made_file = completed["file"]["id"].as_str().unwrap().to_owned();
    assert!(completed.get("owner").is_none() && completed["file"].get("owner").is_none(), "{completed}");
    assert!(listed(&f.state, A, "/v1/files").await.contains(&made_file), "the upload's file is a's");
    assert!(!listed(&f.state, B, "/v1/files").await.contains(&made_file));
    ok(send(&f.state, A2, delete(&format!("/v1/files/{}", of_a.file))).await);
    assert_eq!(listed(&f.state, A, "/v1/files").await, [made_file]);
}

/// /results answers another project's response as an id it never saw (GET a pending 404, DELETE nothing to cancel),
/// exactly as a request id that does not exist; its own project reads it and is told it already finished.
#[tokio::test]
async fn results_answer_another_projects_response_as_an_id_never_seen() {
    use gpuinfer::ResultStore;
    let f = router_with_keys();
    let create = json!({"model": "small", "input": "Say hi.", "background": true});
    let (_, response) = send(&f.state, A, post_json("/v1/responses", &create)).await;
    let id = gpuinfer::RequestId::parse(
        &uuid::Uuid::parse_str(&response["id"].as_str().unwrap()["resp_".len()..]).unwrap().to_string(),
    )
    .unwrap();
    let document = json!({"requestId": id, "status": "success", "result": {"text": "hi"}});
    f.backends.store.put_if_absent(id, document.to_string().as_bytes()).await.unwrap();
    let never = gpuinfer::RequestId::new_v4();
    let as_missing = |answer: (StatusCode, Value), missing: (StatusCode, Value)| {
        assert_eq!(answer.0, missing.0);
        assert_eq!(
            answer.1.to_string().replace(&id.to_string(), "ID"),
            missing.1.to_string().replace(&never.to_string(), "ID")
        );
    };
    let read = |id| get(&format!("/results/{id}"));
    as_missing(send(&f.state, B, read(id)).await, send(&f.state, B, read(never)).await);
    let cancel = |id| delete(&format!("/results/{id}"));
    as_missing(send(&f.state, B, cancel(id)).await, send(&f.state, B, cancel(never)).await);
    assert_eq!(send(&f.state, A2, read(id)).await, (StatusCode::OK, document));
    assert_eq!(send(&f.state, A2, cancel(id)).await.0, StatusCode::CONFLICT, "a's own: already finished");
}

/// A list reads only the caller's own records (each project's index, built for what came before by the upkeep):
/// with every record of a's made unreadable, b still lists its files and batches, and a's own list is what fails.
#[tokio::test]
async fn a_project_lists_without_reading_anything_another_project_owns() {
    let f = router_with_keys();
    let of_a: Vec<Made> = futures_util::future::join_all((0..3).map(|_| make(&f.state, A))).await;
    let of_b = make(&f.state, B).await;
    gpuinfer::upkeep(&f.state).await;
    let results = f.backends.store.dir().to_path_buf();
    for made in &of_a {
        std::fs::write(results.join(format!("files/{}.json", made.file)), "not a record").unwrap();
        std::fs::write(results.join(format!("batches/{}.json", made.batch)), "not a record").unwrap();
    }
    assert_eq!(listed(&f.state, B, "/v1/files?limit=1").await, [of_b.file.as_str()]);
    assert_eq!(listed(&f.state, B, "/v1/batches?order=asc").await, [of_b.batch.as_str()]);
    let (status, _) = send(&f.state, A, get("/v1/files")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "a's own records are read, and unreadable");

    // A file of b's deleted behind the API's back leaves a marker with no record: the list skips it, and forgets it.
    std::fs::remove_file(results.join(format!("files/{}.json", of_b.file))).unwrap();
    assert!(listed(&f.state, B, "/v1/files").await.is_empty());
    let markers = std::fs::read_dir(results.join(format!("files/owners/{}", hex::encode("b")))).unwrap();
    assert_eq!(markers.count(), 0, "the stale marker is gone");
}

/// The official client, one project's key against another's (`gpuinfer dev` on the engine simulator): client A's
/// file, batch and response are `NotFoundError` to client B, whose lists hold none of them (a batch on A's file is
/// refused as one on a file that does not exist), and client A2, a second key of A's project, sees them all.
#[tokio::test]
#[ignore = "needs the openai client: scripts/test.sh"]
async fn the_openai_client_of_one_project_gets_not_found_for_anothers_file_batch_and_response() {
    let engine = EngineProcess::start(&["--latency-ms", "20"]);
    let data = tempfile::tempdir().unwrap();
    let dev = Dev::start(data.path(), free_port(), &engine.url, &["--api-key", KEYS, "--classifier", "none"]);
    dev.ready(&reqwest::Client::new()).await;
    let args = ["--base-url", &dev.url, "--key-a", A, "--key-a2", A2, "--key-b", B];
    let ran = crate::openai_events::openai_script("two_projects_client.py", &args).await;
    let to_b = ran["to_b"].as_object().unwrap();
    assert_eq!(to_b.len(), 10, "{ran}");
    for (call, outcome) in to_b {
        let expected = if call == "batches.create" { "BadRequestError" } else { "NotFoundError" };
        assert_eq!(outcome, expected, "{call}: {ran}");
    }
    assert_eq!(ran["b_lists"], json!({"files": [], "batches": []}), "{ran}");
    let a2_sees = ran["a2_sees"].as_object().unwrap();
    assert!(a2_sees.len() == 6 && a2_sees.values().all(|seen| *seen == json!(true)), "{ran}");
}
