//! The Uploads API, for files larger than one request may carry (API Gateway → Lambda takes about 6 MB): POST
//! /v1/uploads opens an upload, POST …/parts adds a part (`uploads/{id}/{part}`), POST …/complete joins the parts
//! in the order given into a file, checked as any upload, POST …/cancel drops it.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Multipart, Path, State};
use futures_util::{StreamExt, TryStreamExt, stream};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::files::{self, FileObject};
use super::jsonl_check::MAX_FILE_BYTES;
use super::{OpenAiError, ids, objects, unix_now};
use crate::ports::{ByteChunks, ObjectStore};
use crate::router::openai::object_io::write_json;
use crate::router::state::AppState;

/// How long an upload stays open (OpenAI's: an hour).
const UPLOAD_SECONDS: i64 = 3600;

/// OpenAI's Upload object, as stored and as answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Upload {
    pub id: String,
    pub object: String,
    pub bytes: u64,
    pub created_at: i64,
    pub filename: String,
    pub purpose: String,
    pub status: String,
    pub expires_at: i64,
    pub file: Option<FileObject>,
}

fn record_key(id: &str) -> String {
    format!("uploads/{id}.json")
}

fn part_key(upload: &str, part: &str) -> String {
    format!("uploads/{upload}/{part}")
}

async fn find(objects: &dyn ObjectStore, id: &str) -> Result<Upload, OpenAiError> {
    super::find_record(objects, ("upload", "upload_"), record_key, id).await
}

/// The upload `id` while it is still open for parts.
async fn find_pending(objects: &dyn ObjectStore, id: &str) -> Result<Upload, OpenAiError> {
    let upload = find(objects, id).await?;
    if upload.status != "pending" {
        return Err(OpenAiError::conflict(format!("the upload is {}; parts go to a pending upload", upload.status)));
    }
    if unix_now() > upload.expires_at {
        return Err(OpenAiError::conflict("the upload expired (an upload stays open an hour); start a new one"));
    }
    Ok(upload)
}

async fn save(objects: &dyn ObjectStore, upload: &Upload) -> Result<(), OpenAiError> {
    write_json(objects, &record_key(&upload.id), upload).await.map_err(|e| OpenAiError::store(&e))
}

#[derive(Debug, Deserialize)]
pub struct Opening {
    filename: String,
    purpose: String,
    bytes: u64,
}

/// POST /v1/uploads
pub async fn create(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Json<Upload>, OpenAiError> {
    let objects = objects(&state)?;
    let opening: Opening = serde_json::from_slice(&body)
        .map_err(|e| OpenAiError::invalid(format!("body: filename, purpose, bytes and mime_type ({e})")))?;
    files::check_purpose(Some(&opening.purpose))?;
    if opening.bytes > MAX_FILE_BYTES {
        return Err(OpenAiError::invalid_param(
            "bytes",
            format!("bytes: at most {MAX_FILE_BYTES} for a batch input file"),
        ));
    }
    let created_at = unix_now();
    let upload = Upload {
        id: ids::new("upload_"),
        object: "upload".into(),
        bytes: opening.bytes,
        created_at,
        filename: opening.filename,
        purpose: opening.purpose,
        status: "pending".into(),
        expires_at: created_at + UPLOAD_SECONDS,
        file: None,
    };
    save(objects, &upload).await?;
    Ok(Json(upload))
}

/// POST /v1/uploads/{id}/parts: a multipart form with the part's bytes in `data`.
pub async fn add_part(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    mut form: Multipart,
) -> Result<Json<Value>, OpenAiError> {
    let objects = objects(&state)?;
    find_pending(objects, &id).await?;
    let part = ids::new("part_");
    let bad = |e: axum::extract::multipart::MultipartError| {
        OpenAiError::invalid(format!("body: not a readable multipart upload ({e})"))
    };
    while let Some(field) = form.next_field().await.map_err(bad)? {
        if field.name() == Some("data") {
            let chunks: ByteChunks<'_> = Box::pin(field.map_err(std::io::Error::other));
            objects.put(&part_key(&id, &part), chunks).await.map_err(|e| OpenAiError::store(&e))?;
            let answer =
                serde_json::json!({ "id": part, "object": "upload.part", "created_at": unix_now(), "upload_id": id });
            return Ok(Json(answer));
        }
    }
    Err(OpenAiError::invalid_param("data", "data: required, the part's bytes"))
}

#[derive(Debug, Deserialize)]
pub struct Completion {
    part_ids: Vec<String>,
}

/// POST /v1/uploads/{id}/complete: the parts joined in the order of `part_ids` become a file.
pub async fn complete(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Upload>, OpenAiError> {
    let objects = objects(&state)?;
    let mut upload = find_pending(objects, &id).await?;
    let completion: Completion = serde_json::from_slice(&body)
        .map_err(|e| OpenAiError::invalid(format!("body: part_ids, the parts in order ({e})")))?;
    if let Some(bad) = completion.part_ids.iter().find(|part| !ids::is_valid("part_", part)) {
        return Err(OpenAiError::invalid_param("part_ids", format!("part_ids: {bad:?} is not a part of this upload")));
    }
    let keys: Vec<String> = completion.part_ids.iter().map(|part| part_key(&id, part)).collect();
    let joined = stream::iter(keys)
        .then(move |key| async move {
            match objects.get(&key).await {
                Ok(Some((_, chunks))) => Ok(chunks),
                Ok(None) => Err(std::io::Error::other(format!("part {key} was never added"))),
                Err(error) => Err(std::io::Error::other(error)),
            }
        })
        .try_flatten();
    let file = files::store_input(objects, ids::new("file-"), upload.filename.clone(), Box::pin(joined)).await?;
    if file.bytes != upload.bytes {
        let message = format!("bytes: the parts hold {} bytes, the upload was opened for {}", file.bytes, upload.bytes);
        objects.delete(&files::content_key(&file.id)).await.map_err(|e| OpenAiError::store(&e))?;
        objects.delete(&files::record_key(&file.id)).await.map_err(|e| OpenAiError::store(&e))?;
        return Err(OpenAiError::invalid_param("bytes", message));
    }
    upload.status = "completed".into();
    upload.file = Some(file);
    save(objects, &upload).await?;
    drop_parts(objects, &id).await;
    Ok(Json(upload))
}

/// POST /v1/uploads/{id}/cancel
pub async fn cancel(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Upload>, OpenAiError> {
    let objects = objects(&state)?;
    let mut upload = find_pending(objects, &id).await?;
    upload.status = "cancelled".into();
    save(objects, &upload).await?;
    drop_parts(objects, &id).await;
    Ok(Json(upload))
}

/// Removes an upload's parts; one left behind is only logged (the store's lifecycle removes it).
async fn drop_parts(objects: &dyn ObjectStore, id: &str) {
    let parts = match objects.list(&format!("uploads/{id}/")).await {
        Ok(parts) => parts,
        Err(error) => return tracing::warn!(upload_id = id, %error, "could not list the upload's parts to remove them"),
    };
    for part in parts {
        if let Err(error) = objects.delete(&part).await {
            tracing::warn!(upload_id = id, %error, "could not remove an upload part");
        }
    }
}
