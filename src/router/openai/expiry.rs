//! How long the API keeps what it writes beside the results, and the sweep that ends what is due where no
//! lifecycle rule does (one machine; on AWS the results bucket's rules, template.yaml). An upload reads `expired`
//! an hour after its creation and a file is gone at its `expires_at` the moment they pass, wherever they are kept;
//! the sweep then saves the upload `expired` and removes its parts, and removes the file. Everything else expires
//! with the results.

use serde::de::DeserializeOwned;

use super::batch_record;
use super::files::{self, FileObject};
use super::response_record;
use super::upload_parts;
use super::uploads::{self, Upload};
use crate::callbacks::openai_events;
use crate::contract::batch_line;
use crate::ports::object_io::read_json;
use crate::ports::{ObjectStore, StoreError};

/// How long what is under a prefix is kept at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// As long as the results (the results bucket's `ResultRetentionDays`, `RESULT_RETENTION_DAYS` on one machine);
    /// a file given `expires_after` ends sooner.
    WithResults,
    /// A day: an upload is open an hour, and what is left of it (its record, a part a failed removal left) goes
    /// after a day on S3, whose lifecycle rules count whole days; the sweep removes the parts at the hour.
    OneDay,
}

/// Every prefix the Batch, Files, Uploads and Responses API write under, beside the results, and how long each is kept
/// (the OpenAI-shaped events' outbox too: a delivered event is kept, so that it is never recorded again).
pub const PREFIXES: [(&str, Kept); 6] = [
    (files::PREFIX, Kept::WithResults),
    (batch_record::PREFIX, Kept::WithResults),
    (response_record::PREFIX, Kept::WithResults),
    (batch_line::MARKS_PREFIX, Kept::WithResults),
    (upload_parts::PREFIX, Kept::OneDay),
    (openai_events::PREFIX, Kept::WithResults),
];

/// Ends what is due at `now` (Unix seconds): each upload past its hour saved `expired`, its parts removed; each
/// file past its `expires_at` removed. How many of them it ended.
pub(crate) async fn sweep(objects: &dyn ObjectStore, now: i64) -> Result<usize, StoreError> {
    let mut ended = 0;
    for upload in records::<Upload>(objects, upload_parts::PREFIX).await? {
        if upload.expired_by(now) {
            tracing::info!(upload_id = %upload.id, "upload expired: its parts are removed");
            uploads::expire(objects, upload).await?;
            ended += 1;
        }
    }
    for file in records::<FileObject>(objects, files::PREFIX).await? {
        if file.expired_by(now) {
            tracing::info!(file_id = %file.id, "file expired: removed");
            files::remove(objects, &file.id).await?;
            ended += 1;
        }
    }
    Ok(ended)
}

/// The records `{prefix}{id}.json` directly under `prefix`; one that cannot be read is skipped, and logged.
async fn records<T: DeserializeOwned>(objects: &dyn ObjectStore, prefix: &str) -> Result<Vec<T>, StoreError> {
    let mut found = Vec::new();
    for key in objects.list(prefix).await? {
        let id = key.strip_prefix(prefix).and_then(|name| name.strip_suffix(".json"));
        if id.is_none_or(|id| id.contains('/')) {
            continue;
        }
        match read_json(objects, &key).await {
            Ok(Some(record)) => found.push(record),
            Ok(None) => {}
            Err(error) => tracing::warn!(%key, %error, "a record the expiry sweep cannot read is left as it is"),
        }
    }
    Ok(found)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
