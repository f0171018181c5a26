//! The Files API: POST /v1/files (multipart, `purpose=batch`), GET /v1/files, GET /v1/files/{id},
//! GET /v1/files/{id}/content, DELETE /v1/files/{id}. A file is `files/{id}.jsonl` with its record beside it,
//! `files/{id}.json`; uploads and downloads stream. A file given `expires_after` is gone once its `expires_at` passes
//! (the expiry sweep removes it where one runs, `expiry.rs`); one without is kept as long as the results.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::{Multipart, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::TryStreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::error::OpenAiError;
use super::expires_after::{ExpiresAfter, FormFields};
use super::ids;
use super::jsonl_check;
use super::objects::{CallerObjects, unix_now};
use super::owner::{Owned, find_record, write_owned};
use super::project_index;
use crate::infra::error_chain::describe;
use crate::ports::object_io::read_json;
use crate::ports::{ByteChunks, ObjectStore, StoreError};
use crate::router::api_keys::Caller;
use crate::router::state::AppState;

/// Where files and their records are kept.
pub(crate) const PREFIX: &str = "files/";
/// The only purpose gpuinfer keeps files for, as a client uploads them.
const BATCH_PURPOSE: &str = "batch";
/// How long a presigned download URL stays valid.
const DOWNLOAD_URL_VALIDITY: Duration = Duration::from_secs(15 * 60);

/// OpenAI's File object, as stored and as answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileObject {
    pub id: String,
    pub(crate) object: String,
    pub(crate) bytes: u64,
    pub(crate) created_at: i64,
    pub(crate) filename: String,
    pub(crate) purpose: String,
    pub status: String,
    pub(crate) status_details: Option<String>,
    pub(crate) expires_at: Option<i64>,
    /// The project the file belongs to (the batch's, for a batch's output and error files).
    #[serde(default, skip_serializing)]
    pub(crate) owner: Option<String>,
}

impl FileObject {
    pub fn new(id: String, bytes: u64, filename: String, purpose: &str) -> Self {
        FileObject {
            id,
            object: "file".into(),
            bytes,
            created_at: unix_now(),
            filename,
            purpose: purpose.into(),
            status: "processed".into(),
            status_details: None,
            expires_at: None,
            owner: None,
        }
    }

    /// Whether the file's `expires_at` has come at `now` (Unix seconds).
    pub(super) fn expired_by(&self, now: i64) -> bool {
        self.expires_at.is_some_and(|at| now >= at)
    }
}

impl Owned for FileObject {
    fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }
}

pub fn record_key(id: &str) -> String {
    format!("{PREFIX}{id}.json")
}

pub fn content_key(id: &str) -> String {
    format!("{PREFIX}{id}.jsonl")
}

/// Stores a checked batch input file of the project `owner`: its content from `chunks`, then its record. A refused
/// Longest file name kept (as most file systems bound one): a name is part of every list page that holds its file.
pub(crate) const MAX_FILENAME_CHARS: usize = 256;

/// A file's name as a client gives it, refused past `MAX_FILENAME_CHARS`.
pub(super) fn check_filename(filename: &str) -> Result<(), OpenAiError> {
    let chars = filename.chars().count();
    if chars > MAX_FILENAME_CHARS {
        let why = format!("filename: at most {MAX_FILENAME_CHARS} characters, got {chars}");
        return Err(OpenAiError::invalid_param("filename", why));
    }
    Ok(())
}

/// file leaves nothing.
pub(super) async fn store_input(
    objects: &dyn ObjectStore,
    owner: Option<&str>,
    id: String,
    filename: String,
    chunks: ByteChunks<'_>,
) -> Result<FileObject, OpenAiError> {
    let (checked, refusal) = jsonl_check::checked(chunks);
    let stored = objects.put(&content_key(&id), checked).await;
    let bytes = match (stored, jsonl_check::reason(&refusal)) {
        (Ok(bytes), None) => bytes,
        (_, Some(reason)) => {
            objects.delete(&content_key(&id)).await.map_err(|e| OpenAiError::store(&e))?;
            let refused = if reason.contains("larger than") { OpenAiError::too_large } else { OpenAiError::invalid };
            return Err(refused(format!("file: {reason}")));
        }
        (Err(error), None) => return Err(OpenAiError::store(&error)),
    };
    let file = FileObject { owner: owner.map(str::to_owned), ..FileObject::new(id, bytes, filename, BATCH_PURPOSE) };
    write_owned(objects, &record_key(&file.id), &file).await.map_err(|e| OpenAiError::store(&e))?;
    project_index::add(objects, PREFIX, owner, &file.id).await.map_err(|e| OpenAiError::store(&e))?;
    tracing::info!(file_id = %file.id, bytes, "file stored");
    Ok(file)
}

/// Gives `file` the expiry a client asked for (none: kept as long as the results), saving its record again.
pub(super) async fn expire_after(
    objects: &dyn ObjectStore,
    file: &mut FileObject,
    expires_after: Option<&ExpiresAfter>,
) -> Result<(), OpenAiError> {
    let Some(expires_after) = expires_after else { return Ok(()) };
    file.expires_at = Some(expires_after.expires_at(file.created_at));
    write_owned(objects, &record_key(&file.id), file).await.map_err(|e| OpenAiError::store(&e))
}

/// Checks the `purpose` a client gave.
pub(super) fn check_purpose(purpose: Option<&str>) -> Result<(), OpenAiError> {
    match purpose {
        Some(BATCH_PURPOSE) => Ok(()),
        Some(other) => Err(OpenAiError::invalid_param(
            "purpose",
            format!("purpose: gpuinfer keeps files for the Batch API only (purpose \"batch\"), got {other:?}"),
        )),
        None => Err(OpenAiError::invalid_param("purpose", "purpose: required (\"batch\")")),
    }
}

fn bad_multipart(error: axum::extract::multipart::MultipartError) -> OpenAiError {
    OpenAiError::unreadable_form(&error)
}

/// POST /v1/files: a multipart form with `purpose`, `file` and, optionally, `expires_after`; the file is the
/// caller's project's.
pub(crate) async fn create(mine: CallerObjects, mut form: Multipart) -> Result<Json<FileObject>, OpenAiError> {
    let objects = mine.objects();
    let mut purpose = None;
    let mut expiry = FormFields::default();
    let mut file = None;
    while let Some(field) = form.next_field().await.map_err(bad_multipart)? {
        match field.name() {
            Some("purpose") => purpose = Some(field.text().await.map_err(bad_multipart)?),
            Some("expires_after[anchor]") => expiry.anchor = Some(field.text().await.map_err(bad_multipart)?),
            Some("expires_after[seconds]") => expiry.seconds = Some(field.text().await.map_err(bad_multipart)?),
            Some("file") if file.is_none() => {
                if purpose.is_some() {
                    check_purpose(purpose.as_deref())?; // refused before a byte is kept
                }
                let filename = field.file_name().unwrap_or("input.jsonl").to_owned();
                check_filename(&filename)?;
                let chunks = Box::pin(field.map_err(|e| std::io::Error::other(describe(&e))));
                let owner = mine.caller.project.as_deref();
                file = Some(store_input(objects, owner, ids::new("file-"), filename, chunks).await?);
            }
            Some("file") => return Err(OpenAiError::invalid_param("file", "file: give one file per upload")),
            _ => {}
        }
    }
    let Some(mut file) = file else {
        return Err(OpenAiError::invalid_param("file", "file: required (the batch input, JSONL)"));
    };
    let expires_after = match check_purpose(purpose.as_deref()).and_then(|()| expiry.checked()) {
        Ok(expires_after) => expires_after,
        Err(refused) => {
            remove(objects, &file.id).await.map_err(|e| OpenAiError::store(&e))?;
            return Err(refused);
        }
    };
    expire_after(objects, &mut file, expires_after.as_ref()).await?;
    Ok(Json(file))
}

/// The query of a list call: OpenAI's cursor (`after`, an id) and page size.
#[derive(Debug, Deserialize)]
pub(crate) struct ListQuery {
    pub(crate) after: Option<String>,
    pub(crate) limit: Option<usize>,
    pub(crate) order: Option<String>,
    pub(crate) purpose: Option<String>,
}

/// Which page of a list: after which id, how many, in which order of creation.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cursor<'a> {
    after: Option<&'a str>,
    limit: usize,
    oldest_first: bool,
}

impl ListQuery {
    /// The page this query asks for: `limit` from 1 to `max` (`default` when absent), `order` `desc` (newest first,
    /// the default) or `asc`; else a 400 naming the parameter, as OpenAI answers.
    pub(super) fn cursor(&self, default: usize, max: usize) -> Result<Cursor<'_>, OpenAiError> {
        let limit = self.limit.unwrap_or(default);
        if !(1..=max).contains(&limit) {
            return Err(OpenAiError::invalid_param("limit", format!("limit: from 1 to {max}, got {limit}")));
        }
        let oldest_first = match self.order.as_deref() {
            None | Some("desc") => false,
            Some("asc") => true,
            Some(_) => return Err(OpenAiError::invalid_param("order", "order: \"asc\" or \"desc\"")),
        };
        Ok(Cursor { after: self.after.as_deref(), limit, oldest_first })
    }
}

/// The most bytes of records one list page holds: past it the page ends early with `has_more` (a client follows
/// `has_more` as for any page), so an answer's memory is bounded whatever `limit` asks (and stays under Lambda's 6 MB).
pub const PAGE_BYTES: usize = 1024 * 1024;

/// A page of a list in OpenAI's list shape: of the records `{prefix}{id}.json` the caller may see (with a project,
/// only its own are read: `project_index`), in the cursor's order, those whose id comes after the cursor's `after`
/// (ids sort by creation, so a cursor deleted meanwhile still places the page), read in order until `limit` of them
/// pass `keep` or `PAGE_BYTES` are held.
pub(super) async fn page<T: Serialize + serde::de::DeserializeOwned + Owned>(
    objects: &dyn ObjectStore,
    (prefix, caller): (&str, &Caller),
    Cursor { after, limit, oldest_first }: Cursor<'_>,
    keep: impl Fn(&T) -> bool,
) -> Result<Value, OpenAiError> {
    let store_error = |e: StoreError| OpenAiError::store(&e);
    if after.is_some_and(str::is_empty) {
        return Err(OpenAiError::invalid_param("after", "after: the id of the last object of the previous page"));
    }
    let indexed = match &caller.project {
        Some(project) => project_index::ids(objects, prefix, project).await.map_err(store_error)?,
        None => None,
    };
    let from_index = indexed.is_some();
    let mut ids = match indexed {
        Some(ids) => ids,
        None => {
            let keys = objects.list(prefix).await.map_err(store_error)?;
            let records = keys.iter().filter_map(|key| key.strip_prefix(prefix)?.strip_suffix(".json"));
            records.filter(|id| !id.contains('/')).map(str::to_owned).collect()
        }
    };
    ids.retain(|id| after.is_none_or(|after| if oldest_first { id.as_str() > after } else { id.as_str() < after }));
    ids.sort_unstable_by(|a, b| if oldest_first { a.cmp(b) } else { b.cmp(a) });
    let (mut data, mut bytes, mut has_more) = (Vec::new(), 0, false);
    for id in ids {
        let record = read_json::<T>(objects, &format!("{prefix}{id}.json")).await.map_err(store_error)?;
        let Some(record) = record else {
            if let (true, Some(project)) = (from_index, &caller.project) {
                project_index::forget(objects, prefix, project, &id).await.map_err(store_error)?;
            }
            continue;
        };
        if !caller.owns(record.owner()) || !keep(&record) {
            continue;
        }
        let size = serde_json::to_vec(&record).map_or(0, |json| json.len());
        if data.len() == limit || (!data.is_empty() && bytes + size > PAGE_BYTES) {
            has_more = true;
            break;
        }
        bytes += size;
        data.push((id, record));
    }
    let (first_id, last_id) = (data.first().map(|(id, _)| id.clone()), data.last().map(|(id, _)| id.clone()));
    let data: Vec<T> = data.into_iter().map(|(_, record)| record).collect();
    Ok(json!({ "object": "list", "data": data, "first_id": first_id, "last_id": last_id, "has_more": has_more }))
}

/// GET /v1/files: the caller's files, newest first unless `order=asc` (`after`, `limit`, `purpose`).
pub(crate) async fn list(mine: CallerObjects, Query(query): Query<ListQuery>) -> Result<Json<Value>, OpenAiError> {
    let cursor = query.cursor(10_000, 10_000)?;
    let now = unix_now();
    let wanted = |file: &FileObject| query.purpose.as_ref().is_none_or(|p| *p == file.purpose) && !file.expired_by(now);
    Ok(Json(page(mine.objects(), (PREFIX, &mine.caller), cursor, wanted).await?))
}

/// The record of file `id` when `caller` may see it, or 404 (also once it expired).
pub(super) async fn find(objects: &dyn ObjectStore, caller: &Caller, id: &str) -> Result<FileObject, OpenAiError> {
    let file: FileObject = find_record(objects, caller, ("file", "file-"), record_key, id).await?;
    if file.expired_by(unix_now()) {
        return Err(OpenAiError::not_found("file", id));
    }
    Ok(file)
}

/// GET /v1/files/{id}
pub(crate) async fn retrieve(mine: CallerObjects, Path(id): Path<String>) -> Result<Json<FileObject>, OpenAiError> {
    Ok(Json(find(mine.objects(), &mine.caller, &id).await?))
}

/// GET /v1/files/{id}/content: streamed, or a redirect to a presigned URL where the response would be too large.
pub(crate) async fn content(
    State(state): State<Arc<AppState>>,
    mine: CallerObjects,
    Path(id): Path<String>,
) -> Result<Response, OpenAiError> {
    let objects = mine.objects();
    let file = find(objects, &mine.caller, &id).await?;
    if state.openai.redirect_downloads_over.is_some_and(|limit| file.bytes > limit) {
        let url = objects.presigned_get(&content_key(&id), DOWNLOAD_URL_VALIDITY).await;
        if let Some(url) = url.map_err(|e| OpenAiError::store(&e))? {
            return Ok((StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, url)]).into_response());
        }
    }
    let stored = objects.get(&content_key(&id)).await.map_err(|e| OpenAiError::store(&e))?;
    let Some((size, chunks)) = stored else {
        return Err(OpenAiError::not_found("file content", &id));
    };
    let headers =
        [(header::CONTENT_TYPE, "application/octet-stream".to_owned()), (header::CONTENT_LENGTH, size.to_string())];
    Ok((headers, Body::from_stream(chunks)).into_response())
}

/// Removes a file's content and record.
pub(super) async fn remove(objects: &dyn ObjectStore, id: &str) -> Result<(), StoreError> {
    objects.delete(&content_key(id)).await?;
    objects.delete(&record_key(id)).await
}

/// DELETE /v1/files/{id}
pub(crate) async fn delete(mine: CallerObjects, Path(id): Path<String>) -> Result<Json<Value>, OpenAiError> {
    let objects = mine.objects();
    let file = find(objects, &mine.caller, &id).await?;
    remove(objects, &id).await.map_err(|e| OpenAiError::store(&e))?;
    if let Some(owner) = file.owner() {
        project_index::forget(objects, PREFIX, owner, &id).await.map_err(|e| OpenAiError::store(&e))?;
    }
    Ok(Json(json!({ "id": id, "object": "file", "deleted": true })))
}
