//! An upload's parts and their bounds. A part is kept at `uploads/{upload}/{part}`, with a mark beside it whose name
//! carries its size (`uploads/{upload}/{part}.{bytes}`), so that one listing counts an upload's parts and their
//! bytes. A part holds at most 64 MiB, never takes the parts past the bytes the upload was opened for, and an upload
//! holds at most 1,000 parts. Parts sent at the same moment are each checked against the parts stored before them;
//! completion checks the exact total.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::{StreamExt, TryStreamExt, stream};

use super::error::OpenAiError;
use super::ids;
use crate::ports::{ByteChunks, ObjectStore, StoreError};

/// Where uploads, their records and their parts are kept.
pub(crate) const PREFIX: &str = "uploads/";
/// Largest part: OpenAI's "at most 64 MB", counted as its clients count it (their parts are 64 MiB).
pub(crate) const MAX_PART_BYTES: u64 = 64 * 1024 * 1024;
/// Most parts an upload holds. OpenAI publishes no bound; 1,000 parts still make the largest batch input file
/// (200 MB) from parts of 200 KB, twenty times the parts it takes on Lambda (at most 4 MiB each), and the parts and
/// their marks are two pages of an S3 listing.
pub(crate) const MAX_PARTS: usize = 1000;

/// The folder of an upload's parts.
pub(super) fn folder(upload: &str) -> String {
    format!("{PREFIX}{upload}/")
}

fn content_key(upload: &str, part: &str) -> String {
    format!("{}{part}", folder(upload))
}

fn size_mark(upload: &str, part: &str, bytes: u64) -> String {
    format!("{}{part}.{bytes}", folder(upload))
}

/// The parts added to an upload so far (those whose size mark is written), each with its size.
pub(super) struct Added(HashMap<String, u64>);

impl Added {
    pub(super) async fn list(objects: &dyn ObjectStore, upload: &str) -> Result<Self, OpenAiError> {
        let folder = folder(upload);
        let keys = objects.list(&folder).await.map_err(|e| OpenAiError::store(&e))?;
        let sizes = keys.iter().filter_map(|key| {
            let (part, bytes) = key.strip_prefix(&folder)?.rsplit_once('.')?;
            Some((part.to_owned(), bytes.parse().ok()?))
        });
        Ok(Added(sizes.collect()))
    }

    /// The bytes of `parts` joined, or the refusal naming a part that was never added.
    pub(super) fn total_of(&self, parts: &[String]) -> Result<u64, OpenAiError> {
        parts.iter().try_fold(0, |total, part| match self.0.get(part) {
            Some(bytes) => Ok(total + bytes),
            None => Err(OpenAiError::invalid_param(
                "part_ids",
                format!("part_ids: {part:?} was never added to this upload"),
            )),
        })
    }
}

/// Stores `chunks` as a new part of `upload`, opened for `announced` bytes: the part's id, or the refusal that
/// names the bound it would break (nothing of a refused part is kept).
pub(super) async fn store(
    objects: &dyn ObjectStore,
    (upload, announced): (&str, u64),
    chunks: ByteChunks<'_>,
) -> Result<String, OpenAiError> {
    let added = Added::list(objects, upload).await?;
    if added.0.len() >= MAX_PARTS {
        return Err(OpenAiError::invalid_param(
            "data",
            format!(
                "data: an upload holds at most {MAX_PARTS} parts; complete it, or start a new one with larger parts"
            ),
        ));
    }
    let stored: u64 = added.0.values().sum();
    let room = announced.saturating_sub(stored);
    let most = room.min(MAX_PART_BYTES);
    let over = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&over);
    let mut seen = 0u64;
    let capped = chunks.map(move |chunk| {
        let chunk = chunk?;
        seen += chunk.len() as u64;
        if seen > most {
            flag.store(true, Ordering::Relaxed);
            return Err(std::io::Error::other(format!("a part over its {most} bytes")));
        }
        Ok(chunk)
    });
    let part = ids::new("part_");
    match objects.put(&content_key(upload, &part), Box::pin(capped)).await {
        Ok(bytes) => {
            let marked = objects.put_if_absent(&size_mark(upload, &part, bytes), b"").await;
            marked.map_err(|e| OpenAiError::store(&e))?;
            Ok(part)
        }
        Err(_) if over.load(Ordering::Relaxed) && most == MAX_PART_BYTES => Err(OpenAiError::invalid_param(
            "data",
            format!("data: a part holds at most {MAX_PART_BYTES} bytes (64 MiB); send the file in smaller parts"),
        )),
        Err(_) if over.load(Ordering::Relaxed) => Err(OpenAiError::invalid_param(
            "data",
            format!(
                "data: the upload was opened for {announced} bytes and its parts hold {stored}: this part would take \
                 them past it"
            ),
        )),
        Err(error) => Err(OpenAiError::store(&error)),
    }
}

/// The bytes of `parts` of `upload`, one after the other.
pub(super) fn joined<'a>(objects: &'a dyn ObjectStore, upload: &str, parts: &[String]) -> ByteChunks<'a> {
    let keys: Vec<String> = parts.iter().map(|part| content_key(upload, part)).collect();
    let chunks = stream::iter(keys)
        .then(move |key| async move {
            match objects.get(&key).await {
                Ok(Some((_, chunks))) => Ok(chunks),
                Ok(None) => Err(std::io::Error::other(format!("part {key} was never added"))),
                Err(error) => Err(std::io::Error::other(error)),
            }
        })
        .try_flatten();
    Box::pin(chunks)
}

/// Removes an upload's parts; one left behind is only logged (it expires with the results).
pub(super) async fn drop_all(objects: &dyn ObjectStore, upload: &str) -> Result<(), StoreError> {
    for key in objects.list(&folder(upload)).await? {
        if let Err(error) = objects.delete(&key).await {
            tracing::warn!(upload_id = upload, %error, "could not remove an upload part");
        }
    }
    Ok(())
}
