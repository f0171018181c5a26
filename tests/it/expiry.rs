//! What the API keeps ends when OpenAI says: a file at its `expires_after` (anchor `created_at`, 3600 to 2592000
//! seconds), an upload an hour after its creation (then `expired`, its parts removed); batch records, marks and
//! outputs with the results. `gpuinfer dev` removes each from its data directory as it ends.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::support::dev::Dev;
use crate::support::engine_process::EngineProcess;
use crate::support::router::{call, fixture, get};
use crate::support::{eventually, free_port};
use crate::uploads::{form, post_form, post_json};

const LINE: &[u8] = b"{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":\"small\",\"prompt\":\"hi\"}}\n";

/// The multipart body of POST /v1/files with `expires_after` as OpenAI's clients send it (one field per key).
fn file_form(anchor: Option<&str>, seconds: Option<&str>) -> Vec<u8> {
    let mut fields: Vec<(&str, Option<&str>, &[u8])> = vec![("purpose", None, b"batch")];
    if let Some(anchor) = anchor {
        fields.push(("expires_after[anchor]", None, anchor.as_bytes()));
    }
    if let Some(seconds) = seconds {
        fields.push(("expires_after[seconds]", None, seconds.as_bytes()));
    }
    fields.push(("file", Some("in.jsonl"), LINE));
    form(&fields)
}

/// Rewrites the JSON record at `path` with `change`, as a whole (renamed into place).
fn rewrite(path: &Path, change: impl FnOnce(&mut Value)) {
    let mut record: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    change(&mut record);
    let temp = path.with_extension("rewrite");
    std::fs::write(&temp, record.to_string()).unwrap();
    std::fs::rename(temp, path).unwrap();
}

/// OpenAI's Files API: `expires_after` {anchor: "created_at", seconds from 3600 to 2592000}. The file's
/// `expires_at` says when, and once it has passed the file is gone: not found, not listed, its content not served.
/// An upload opened with `expires_after` gives it to the file it becomes.
#[tokio::test]
async fn a_file_expires_after_the_seconds_it_was_given() {
    let f = fixture();
    let (status, file) = call(&f.state, post_form("/v1/files", file_form(Some("created_at"), Some("3600")))).await;
    assert_eq!(status, StatusCode::OK, "{file}");
    assert_eq!(file["expires_at"].as_i64(), file["created_at"].as_i64().map(|at| at + 3600), "{file}");
    let (_, kept) = call(&f.state, post_form("/v1/files", file_form(None, None))).await;
    assert_eq!(kept["expires_at"], Value::Null, "a file without expires_after is kept with the results: {kept}");

    for (anchor, seconds) in [
        (Some("created_at"), Some("3599")),
        (Some("created_at"), Some("2592001")),
        (Some("created_at"), Some("an hour")),
        (Some("last_active_at"), Some("3600")),
        (None, Some("3600")),
        (Some("created_at"), None),
    ] {
        let (status, body) = call(&f.state, post_form("/v1/files", file_form(anchor, seconds))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{anchor:?} {seconds:?}: {body}");
        assert_eq!(body["error"]["param"], "expires_after", "{body}");
    }
    let (_, listed) = call(&f.state, get("/v1/files")).await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 2, "refused files are not kept: {listed}");

    let opening = json!({"filename": "in.jsonl", "purpose": "batch", "bytes": LINE.len(), "mime_type": "text/jsonl",
        "expires_after": {"anchor": "created_at", "seconds": 7200}});
    let (_, upload) = call(&f.state, post_json("/v1/uploads", &opening)).await;
    let upload = upload["id"].as_str().unwrap().to_owned();
    let parts = format!("/v1/uploads/{upload}/parts");
    let (_, part) = call(&f.state, post_form(&parts, form(&[("data", Some("part"), LINE)]))).await;
    let completion = json!({"part_ids": [part["id"]]});
    let (status, done) = call(&f.state, post_json(&format!("/v1/uploads/{upload}/complete"), &completion)).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    let made = &done["file"];
    assert_eq!(made["expires_at"].as_i64(), made["created_at"].as_i64().map(|at| at + 7200), "{done}");

    let id = file["id"].as_str().unwrap();
    let record = f.backends.store.dir().join(format!("files/{id}.json"));
    rewrite(&record, |file| file["expires_at"] = json!(chrono::Utc::now().timestamp() - 1));
    for path in [format!("/v1/files/{id}"), format!("/v1/files/{id}/content")] {
        let (status, body) = call(&f.state, get(&path)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
    }
    let (_, listed) = call(&f.state, get("/v1/files")).await;
    assert!(!listed.to_string().contains(id), "an expired file is not listed: {listed}");
}

/// The files under `dir` (recursively), as paths relative to it.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else {
                found.push(path.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    found
}

/// Writes `path` (and its folder) under `results`, last modified `age` ago.
fn old_object(results: &Path, path: &str, age: Duration) {
    let path = results.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"{}").unwrap();
    std::fs::File::options().write(true).open(&path).unwrap().set_modified(SystemTime::now() - age).unwrap();
}

/// On one machine nothing the API writes outlives its time: with the sweep every second, an upload past its hour is
/// saved `expired` (a later call says so) and its parts removed; a file past its `expires_at` is removed; a batch's
/// record, secret, marks and output file older than RESULT_RETENTION_DAYS are removed, with the folders they leave
/// empty, and newer ones stay.
#[tokio::test]
async fn gpuinfer_dev_sweeps_expired_uploads_files_and_old_batches() {
    let engine = EngineProcess::start(&[]);
    let data = tempfile::tempdir().unwrap();
    let results = data.path().join("results");
    let month = Duration::from_secs(31 * 86_400);
    for path in ["batches/batch_old.json", "batches/batch_old.key", "batch-lines/batch_old/00000000.succeeded"] {
        old_object(&results, path, month);
    }
    old_object(&results, "files/file-old.jsonl", month);
    let marks = std::fs::File::open(results.join("batch-lines/batch_old")).unwrap();
    marks.set_modified(SystemTime::now() - month).unwrap();
    old_object(&results, "batches/batch_new.json", Duration::from_secs(86_400));
    let flags = ["--expiry-sweep-seconds", "1", "--classifier", "none", "--scaler-interval", "3600"];
    let dev = Dev::start(data.path(), free_port(), &engine.url, &flags);
    let http = reqwest::Client::new();
    dev.ready(&http).await;
    let form_type = "multipart/form-data; boundary=gpuinfer-test-boundary";
    let post = |path: &str, content_type: &'static str, body: Vec<u8>| {
        http.post(format!("{}{path}", dev.url)).header("content-type", content_type).body(body).send()
    };

    let opening = json!({"filename": "in.jsonl", "purpose": "batch", "bytes": 100, "mime_type": "text/jsonl"});
    let upload: Value =
        post("/v1/uploads", "application/json", opening.to_string().into_bytes()).await.unwrap().json().await.unwrap();
    let upload = upload["id"].as_str().unwrap().to_owned();
    let part = post(&format!("/v1/uploads/{upload}/parts"), form_type, form(&[("data", Some("p"), b"0123456789")]));
    assert_eq!(part.await.unwrap().status(), 200);
    let file: Value =
        post("/v1/files", form_type, file_form(Some("created_at"), Some("3600"))).await.unwrap().json().await.unwrap();
    let file = file["id"].as_str().unwrap().to_owned();
    assert!(!files_under(&results.join(format!("uploads/{upload}"))).is_empty(), "the part is kept meanwhile");

    // The hour passes: the records say they were created two hours ago.
    let two_hours_ago = chrono::Utc::now().timestamp() - 7200;
    rewrite(&results.join(format!("uploads/{upload}.json")), |upload| {
        (upload["created_at"], upload["expires_at"]) = (json!(two_hours_ago), json!(two_hours_ago + 3600));
    });
    rewrite(&results.join(format!("files/{file}.json")), |file| file["expires_at"] = json!(two_hours_ago + 3600));

    eventually(Duration::from_secs(20), "the sweep to end what is due", || {
        let results = results.clone();
        let (upload, file) = (upload.clone(), file.clone());
        async move {
            let record: Value =
                serde_json::from_slice(&std::fs::read(results.join(format!("uploads/{upload}.json"))).ok()?).ok()?;
            let left = files_under(&results);
            let gone = |name: &str| !left.iter().any(|path| path.to_string_lossy().contains(name));
            let ended = record["status"] == "expired"
                && files_under(&results.join(format!("uploads/{upload}"))).is_empty()
                && gone(&file)
                && gone("batch_old")
                && gone("file-old");
            ended.then_some(())
        }
    })
    .await;
    assert!(!results.join("batch-lines/batch_old").exists(), "the folder a batch's marks leave empty is removed");
    assert!(results.join("batches/batch_new.json").exists(), "a batch within the retention stays");

    let completion = json!({"part_ids": ["part_00000000000000000000000000000000"]});
    let answer =
        post(&format!("/v1/uploads/{upload}/complete"), "application/json", completion.to_string().into_bytes());
    let answer = answer.await.unwrap();
    assert_eq!(answer.status(), 409);
    let body: Value = answer.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("expired"), "{body}");
}
