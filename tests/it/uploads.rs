//! The Uploads API's bounds: a part never takes an upload past the `bytes` it was opened for, a part holds at most
//! 64 MiB (OpenAI's limit), an upload at most 1,000 parts; each refusal is a 400 in OpenAI's error shape naming why,
//! and completion still checks the parts' total.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};

use crate::support::router::{call, fixture, get};
use gpuinfer::AppState;

const BOUNDARY: &str = "gpuinfer-test-boundary";

/// A multipart/form-data body of `fields` (name, file name, bytes).
pub(crate) fn form(fields: &[(&str, Option<&str>, &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, filename, bytes) in fields {
        let filename = filename.map(|f| format!("; filename=\"{f}\"")).unwrap_or_default();
        body.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"{filename}\r\n\r\n").as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

/// POST `path` with a multipart body.
pub(crate) fn post_form(path: &str, body: Vec<u8>) -> Request<Body> {
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    Request::post(path).header("content-type", content_type).body(Body::from(body)).unwrap()
}

pub(crate) fn post_json(path: &str, body: &Value) -> Request<Body> {
    Request::post(path).header("content-type", "application/json").body(Body::from(body.to_string())).unwrap()
}

/// Opens an upload of `bytes`; its id.
async fn open(state: &Arc<AppState>, bytes: u64) -> String {
    let opening = json!({"filename": "in.jsonl", "purpose": "batch", "bytes": bytes, "mime_type": "text/jsonl"});
    let (status, upload) = call(state, post_json("/v1/uploads", &opening)).await;
    assert_eq!(status, StatusCode::OK, "{upload}");
    upload["id"].as_str().unwrap().to_owned()
}

async fn add_part(state: &Arc<AppState>, upload: &str, data: &[u8]) -> (StatusCode, Value) {
    call(state, post_form(&format!("/v1/uploads/{upload}/parts"), form(&[("data", Some("part"), data)]))).await
}

/// The message of a 400 in OpenAI's error shape that names `param`.
fn refused(status: StatusCode, body: &Value, param: &str) -> String {
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    assert_eq!(body["error"]["param"], param, "{body}");
    body["error"]["message"].as_str().unwrap().to_owned()
}

/// A batch input line of exactly `bytes` bytes (newline included).
fn line_of(bytes: usize) -> Vec<u8> {
    let start = r#"{"custom_id":"a","method":"POST","url":"/v1/completions","body":{"model":"small","prompt":""#;
    let end = "\"}}\n";
    let fill = bytes - start.len() - end.len();
    format!("{start}{}{end}", "x".repeat(fill)).into_bytes()
}

/// The issue's case: an upload opened for 100 bytes took three 20 MiB parts. A part that would take the parts past
/// the announced size is refused, and nothing of it is kept; parts that fit are taken, and the upload completes.
#[tokio::test]
async fn a_part_that_would_take_the_upload_past_its_announced_bytes_is_refused() {
    let f = fixture();
    let upload = open(&f.state, 100).await;
    let (status, body) = add_part(&f.state, &upload, &vec![b'x'; 20 * 1024 * 1024]).await;
    let message = refused(status, &body, "data");
    assert!(message.contains("100 bytes"), "the refusal names the announced size: {message}");

    let content = line_of(100);
    let (status, first) = add_part(&f.state, &upload, &content[..60]).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let (status, body) = add_part(&f.state, &upload, &[b'x'; 41]).await;
    let message = refused(status, &body, "data");
    assert!(message.contains("100 bytes") && message.contains("60"), "{message}");
    let (status, second) = add_part(&f.state, &upload, &content[60..]).await;
    assert_eq!(status, StatusCode::OK, "{second}");

    let parts = json!({"part_ids": [first["id"], second["id"]]});
    let (status, done) = call(&f.state, post_json(&format!("/v1/uploads/{upload}/complete"), &parts)).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!((done["status"].as_str(), done["file"]["bytes"].as_u64()), (Some("completed"), Some(100)), "{done}");

    // Completion still checks the total: parts that hold fewer bytes than announced are refused.
    let short = open(&f.state, 100).await;
    let (_, part) = add_part(&f.state, &short, &content[..60]).await;
    let parts = json!({"part_ids": [part["id"]]});
    let (status, body) = call(&f.state, post_json(&format!("/v1/uploads/{short}/complete"), &parts)).await;
    assert!(refused(status, &body, "bytes").contains("60"), "{body}");
}

/// Completes of one upload that race (a client retrying, or many at once) store one file: its id is the upload's,
/// so every racer writes the same bytes under the same key; a complete after the upload completed is refused.
#[tokio::test]
async fn completes_that_race_store_one_file() {
    let f = fixture();
    let content = line_of(200);
    let upload = open(&f.state, 200).await;
    let (_, part) = add_part(&f.state, &upload, &content).await;
    let parts = json!({"part_ids": [part["id"]]});
    let path = format!("/v1/uploads/{upload}/complete");
    let completes = (0..20).map(|_| call(&f.state, post_json(&path, &parts)));
    let answers = futures_util::future::join_all(completes).await;
    let completed: BTreeSet<&str> = answers
        .iter()
        .filter(|(status, _)| *status == StatusCode::OK)
        .map(|(_, done)| done["file"]["id"].as_str().unwrap())
        .collect();
    let statuses: Vec<StatusCode> = answers.iter().map(|(status, _)| *status).collect();
    assert_eq!(completed.len(), 1, "the completes that answered 200 name one file: {completed:?}, {statuses:?}");
    let (_, listed) = call(&f.state, get("/v1/files")).await;
    let files: Vec<&Value> = listed["data"].as_array().unwrap().iter().collect();
    assert_eq!(files.len(), 1, "{listed}");
    assert_eq!((files[0]["id"].as_str(), files[0]["bytes"].as_u64()), (completed.first().copied(), Some(200)));
    let (status, again) = call(&f.state, post_json(&path, &parts)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");
}

/// Names and metadata are bounded, so every list page is: a file name at most 256 characters (an upload's and a
/// multipart file's), a batch's metadata as OpenAI bounds it (values of at most 512 characters).
#[tokio::test]
async fn file_names_and_batch_metadata_are_bounded() {
    let f = fixture();
    let long = "n".repeat(257);
    let opening = |name: &str| json!({"filename": name, "purpose": "batch", "bytes": 10, "mime_type": "text/jsonl"});
    let (status, body) = call(&f.state, post_json("/v1/uploads", &opening(&long))).await;
    assert!(refused(status, &body, "filename").contains("256"), "{body}");
    let (status, body) = call(&f.state, post_json("/v1/uploads", &opening(&long[1..]))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let line = line_of(100);
    let upload = form(&[("purpose", None, b"batch"), ("file", Some(&long), &line)]);
    let (status, body) = call(&f.state, post_form("/v1/files", upload)).await;
    refused(status, &body, "filename");
    let upload = form(&[("purpose", None, b"batch"), ("file", Some("in.jsonl"), &line)]);
    let (_, file) = call(&f.state, post_form("/v1/files", upload)).await;
    let batch = |metadata: Value| json!({"input_file_id": file["id"], "endpoint": "/v1/completions", "completion_window": "24h", "metadata": metadata});
    let (status, body) = call(&f.state, post_json("/v1/batches", &batch(json!({"k": "v".repeat(513)})))).await;
    assert!(refused(status, &body, "metadata").contains("512"), "{body}");
    let (status, body) = call(&f.state, post_json("/v1/batches", &batch(json!({"k".repeat(65): "v"})))).await;
    assert!(refused(status, &body, "metadata").contains("64"), "{body}");
}

/// OpenAI: "Each Part can be at most 64 MB" (its clients send parts of 64 MiB): a part of 64 MiB is taken, one byte
/// more is refused with a 400 naming the limit, also on an upload that has room for it.
#[tokio::test]
async fn a_part_holds_at_most_64_mib() {
    const MIB_64: usize = 64 * 1024 * 1024;
    let f = fixture();
    let upload = open(&f.state, 200 * 1024 * 1024).await;
    let (status, body) = add_part(&f.state, &upload, &vec![b'x'; MIB_64 + 1]).await;
    let message = refused(status, &body, "data");
    assert!(message.contains(&MIB_64.to_string()), "the refusal names the limit: {message}");
    let (status, body) = add_part(&f.state, &upload, &vec![b'x'; MIB_64]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// An upload holds at most 1,000 parts: the 1,001st is refused with a 400 naming the bound, however small it is.
#[tokio::test]
async fn an_upload_holds_at_most_1000_parts() {
    let f = fixture();
    let upload = open(&f.state, 2_000).await;
    for part in 0..1_000 {
        let (status, body) = add_part(&f.state, &upload, b"x").await;
        assert_eq!(status, StatusCode::OK, "part {part}: {body}");
    }
    let (status, body) = add_part(&f.state, &upload, b"x").await;
    let message = refused(status, &body, "data");
    assert!(message.contains("1000 parts"), "{message}");
}
