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
mod tests {
    //! The sweep against a clock: nothing ends a second early, everything due ends on time; every key the API writes
    //! is under a prefix of the table.

    use super::*;
    use crate::local::store::FileStore;
    use crate::ports::object_io::{one_chunk, write_json};
    use crate::router::openai::owner::write_owned;
    use crate::router::openai::uploads::Declared;

    /// When the objects of these tests were created (Unix seconds).
    const CREATED: i64 = 1_700_000_000;

    fn upload(id: &str, status: &str) -> Upload {
        Upload {
            id: id.into(),
            object: "upload".into(),
            declared: Declared { filename: "in.jsonl".into(), purpose: "batch".into(), bytes: 100 },
            created_at: CREATED,
            status: status.into(),
            expires_at: CREATED + 3600,
            file: None,
            expires_after: None,
            owner: Some("team-a".into()),
        }
    }

    async fn status_of(objects: &dyn ObjectStore, id: &str) -> String {
        let upload: Upload = read_json(objects, &format!("uploads/{id}.json")).await.unwrap().unwrap();
        upload.status
    }

    #[tokio::test]
    async fn an_upload_expires_an_hour_after_its_creation_and_its_parts_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        let objects: &dyn ObjectStore = &store;
        for (id, status) in [("upload_open", "pending"), ("upload_done", "completed")] {
            write_owned(objects, &format!("uploads/{id}.json"), &upload(id, status)).await.unwrap();
        }
        upload_parts::store(objects, ("upload_open", 100), one_chunk(b"0123456789".to_vec())).await.unwrap();
        let folder = upload_parts::folder("upload_open");
        let parts = || objects.list(&folder);

        assert_eq!(sweep(objects, CREATED + 3599).await.unwrap(), 0);
        assert_eq!(status_of(objects, "upload_open").await, "pending");
        assert!(!parts().await.unwrap().is_empty(), "an open upload keeps its parts");

        assert_eq!(sweep(objects, CREATED + 3600).await.unwrap(), 1);
        assert_eq!(status_of(objects, "upload_open").await, "expired");
        let expired: Upload = read_json(objects, "uploads/upload_open.json").await.unwrap().unwrap();
        assert_eq!(expired.owner.as_deref(), Some("team-a"), "an upload saved expired is still its project's");
        assert_eq!(parts().await.unwrap(), Vec::<String>::new());
        assert_eq!(status_of(objects, "upload_done").await, "completed", "an upload that ended stays as it ended");
        assert_eq!(sweep(objects, CREATED + 7200).await.unwrap(), 0, "an expired upload is ended once");
    }

    #[tokio::test]
    async fn a_file_is_removed_at_its_expires_at_and_one_without_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        let objects: &dyn ObjectStore = &store;
        for (id, expires_at) in [("file-due", Some(CREATED + 3600)), ("file-kept", None)] {
            let mut file = FileObject::new(id.into(), 3, "in.jsonl".into(), "batch");
            file.expires_at = expires_at;
            objects.put(&files::content_key(id), one_chunk(b"{}\n".to_vec())).await.unwrap();
            write_json(objects, &files::record_key(id), &file).await.unwrap();
        }
        assert_eq!(sweep(objects, CREATED + 3599).await.unwrap(), 0);
        assert!(objects.get(&files::content_key("file-due")).await.unwrap().is_some(), "kept until its expires_at");
        assert_eq!(sweep(objects, CREATED + 3600).await.unwrap(), 1);
        for key in [files::content_key("file-due"), files::record_key("file-due")] {
            assert!(objects.get(&key).await.unwrap().is_none(), "{key} outlived its expires_at");
        }
        assert!(objects.get(&files::record_key("file-kept")).await.unwrap().is_some());
    }

    #[test]
    fn every_key_the_api_writes_is_under_a_prefix_of_the_table() {
        let keys = [
            files::record_key("file-a"),
            files::content_key("file-a"),
            batch_record::record_key("batch_a"),
            response_record::record_key("resp_a"),
            batch_line::mark_key("batch_a", 0, batch_line::LineEnd::Succeeded),
            upload_parts::folder("upload_a"),
            crate::callbacks::openai_events::record_key("evt_a"),
            crate::callbacks::openai_events::pending_key("evt_a"),
        ];
        for key in keys {
            assert!(PREFIXES.iter().any(|(prefix, _)| key.starts_with(prefix)), "{key} is under no prefix of PREFIXES");
        }
    }
}
