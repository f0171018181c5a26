//! The Uploads API, for files larger than one request may carry (API Gateway → Lambda takes about 6 MB): POST
//! /v1/uploads opens an upload, POST …/parts adds a part (`upload_parts.rs`: where parts are kept, their bounds),
//! POST …/complete joins the parts in the order given into a file, checked as any upload, POST …/cancel drops it.
//! An upload stays open an hour (OpenAI's); after it, it reads `expired`, and the expiry sweep saves it so and
//! removes its parts where one runs (`expiry.rs`).

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Multipart, Path};
use futures_util::TryStreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::OpenAiError;
use super::expires_after::ExpiresAfter;
use super::files::{self, FileObject};
use super::ids;
use super::jsonl_check::MAX_FILE_BYTES;
use super::objects::{CallerObjects, unix_now};
use super::owner::{Owned, find_record, write_owned};
use super::upload_parts::{self, Added, PREFIX};
use crate::infra::error_chain::describe;
use crate::ports::{ByteChunks, ObjectStore, StoreError};
use crate::router::api_keys::Caller;

/// How long an upload stays open (OpenAI's: an hour after its creation).
const UPLOAD_SECONDS: i64 = 3600;

/// OpenAI's Upload object, as stored and as answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Upload {
    pub id: String,
    pub(crate) object: String,
    #[serde(flatten)]
    pub(crate) declared: Declared,
    pub(crate) created_at: i64,
    pub status: String,
    pub(crate) expires_at: i64,
    pub(crate) file: Option<FileObject>,
    /// The expiry the file it becomes is given, when the client asked for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) expires_after: Option<ExpiresAfter>,
    /// The project the upload belongs to, and the file it becomes.
    #[serde(default, skip_serializing)]
    pub(crate) owner: Option<String>,
}

/// The file the client said it would upload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Declared {
    pub(crate) filename: String,
    pub(crate) purpose: String,
    pub(crate) bytes: u64,
}

impl Upload {
    /// Whether the upload is past its hour at `now` (Unix seconds) without having ended: expired, whether or not
    /// its record says so yet.
    pub(super) fn expired_by(&self, now: i64) -> bool {
        self.status == "pending" && now >= self.expires_at
    }
}

impl Owned for Upload {
    fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }
}

fn record_key(id: &str) -> String {
    format!("{PREFIX}{id}.json")
}

/// The upload `id` when `caller` may see it, `expired` once past its hour.
async fn find(objects: &dyn ObjectStore, caller: &Caller, id: &str) -> Result<Upload, OpenAiError> {
    let mut upload: Upload = find_record(objects, caller, ("upload", "upload_"), record_key, id).await?;
    if upload.expired_by(unix_now()) {
        upload.status = "expired".into();
    }
    Ok(upload)
}

/// The upload `id` of `caller` while it is still open for parts.
async fn find_pending(objects: &dyn ObjectStore, caller: &Caller, id: &str) -> Result<Upload, OpenAiError> {
    let upload = find(objects, caller, id).await?;
    match upload.status.as_str() {
        "pending" => Ok(upload),
        "expired" => Err(OpenAiError::conflict(
            "the upload expired (an upload stays open an hour after its creation); start a new one",
        )),
        other => Err(OpenAiError::conflict(format!("the upload is {other}; parts go to a pending upload"))),
    }
}

async fn save(objects: &dyn ObjectStore, upload: &Upload) -> Result<(), OpenAiError> {
    write_owned(objects, &record_key(&upload.id), upload).await.map_err(|e| OpenAiError::store(&e))
}

/// Ends an upload past its hour: saved `expired`, its parts removed.
pub(super) async fn expire(objects: &dyn ObjectStore, mut upload: Upload) -> Result<(), StoreError> {
    upload.status = "expired".into();
    write_owned(objects, &record_key(&upload.id), &upload).await?;
    upload_parts::drop_all(objects, &upload.id).await
}

#[derive(Debug, Deserialize)]
pub(crate) struct Opening {
    #[serde(flatten)]
    declared: Declared,
    expires_after: Option<ExpiresAfter>,
}

/// POST /v1/uploads: an upload of the caller's project.
pub(crate) async fn create(mine: CallerObjects, body: Bytes) -> Result<Json<Upload>, OpenAiError> {
    let objects = mine.objects();
    let opening: Opening = serde_json::from_slice(&body)
        .map_err(|e| OpenAiError::invalid(format!("body: filename, purpose, bytes and mime_type ({e})")))?;
    files::check_purpose(Some(&opening.declared.purpose))?;
    files::check_filename(&opening.declared.filename)?;
    let expires_after = opening.expires_after.map(ExpiresAfter::checked).transpose()?;
    if opening.declared.bytes > MAX_FILE_BYTES {
        return Err(OpenAiError::invalid_param(
            "bytes",
            format!("bytes: at most {MAX_FILE_BYTES} for a batch input file"),
        ));
    }
    let created_at = unix_now();
    let upload = Upload {
        id: ids::new("upload_"),
        object: "upload".into(),
        declared: opening.declared,
        created_at,
        status: "pending".into(),
        expires_at: created_at + UPLOAD_SECONDS,
        file: None,
        expires_after,
        owner: mine.caller.project.clone(),
    };
    save(objects, &upload).await?;
    Ok(Json(upload))
}

/// POST /v1/uploads/{id}/parts: a multipart form with the part's bytes in `data`.
pub(crate) async fn add_part(
    mine: CallerObjects,
    Path(id): Path<String>,
    mut form: Multipart,
) -> Result<Json<Value>, OpenAiError> {
    let objects = mine.objects();
    let upload = find_pending(objects, &mine.caller, &id).await?;
    while let Some(field) = form.next_field().await.map_err(|e| OpenAiError::unreadable_form(&e))? {
        if field.name() == Some("data") {
            let chunks: ByteChunks<'_> = Box::pin(field.map_err(|e| std::io::Error::other(describe(&e))));
            let part = upload_parts::store(objects, (&id, upload.declared.bytes), chunks).await?;
            let answer =
                serde_json::json!({ "id": part, "object": "upload.part", "created_at": unix_now(), "upload_id": id });
            return Ok(Json(answer));
        }
    }
    Err(OpenAiError::invalid_param("data", "data: required, the part's bytes"))
}

#[derive(Debug, Deserialize)]
pub(crate) struct Completion {
    part_ids: Vec<String>,
}

/// POST /v1/uploads/{id}/complete: the parts joined in the order of `part_ids` become a file.
pub(crate) async fn complete(
    mine: CallerObjects,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Upload>, OpenAiError> {
    let objects = mine.objects();
    let mut upload = find_pending(objects, &mine.caller, &id).await?;
    let completion: Completion = serde_json::from_slice(&body)
        .map_err(|e| OpenAiError::invalid(format!("body: part_ids, the parts in order ({e})")))?;
    let total = Added::list(objects, &id).await?.total_of(&completion.part_ids)?;
    if total != upload.declared.bytes {
        let message =
            format!("bytes: the parts hold {total} bytes, the upload was opened for {}", upload.declared.bytes);
        return Err(OpenAiError::invalid_param("bytes", message));
    }
    let joined = upload_parts::joined(objects, &id, &completion.part_ids);
    let (owner, filename) = (upload.owner.as_deref(), upload.declared.filename.clone());
    // The file's id is the upload's: completes that race store one file, each the same bytes under the same key.
    let file_id = format!("file-{}", id.trim_start_matches("upload_"));
    let mut file = files::store_input(objects, owner, file_id, filename, joined).await?;
    files::expire_after(objects, &mut file, upload.expires_after.as_ref()).await?;
    upload.status = "completed".into();
    upload.file = Some(file);
    save(objects, &upload).await?;
    drop_parts(objects, &id).await;
    Ok(Json(upload))
}

/// POST /v1/uploads/{id}/cancel
pub(crate) async fn cancel(mine: CallerObjects, Path(id): Path<String>) -> Result<Json<Upload>, OpenAiError> {
    let objects = mine.objects();
    let mut upload = find_pending(objects, &mine.caller, &id).await?;
    upload.status = "cancelled".into();
    save(objects, &upload).await?;
    drop_parts(objects, &id).await;
    Ok(Json(upload))
}

/// Removes the parts of an upload that ended; failing that, they expire with the results.
async fn drop_parts(objects: &dyn ObjectStore, id: &str) {
    if let Err(error) = upload_parts::drop_all(objects, id).await {
        tracing::warn!(upload_id = id, %error, "could not list the upload's parts to remove them");
    }
}
