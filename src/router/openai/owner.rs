//! Which project owns a stored object (a file, an upload, a batch, a response): its `owner`, kept in its record
//! beside OpenAI's own fields and never answered, and the one rule of who sees it. Another project's object is
//! answered as one that does not exist (`find_record`); a record written before objects had owners has none, and is
//! seen only where no keys are configured (`Caller::owns`).

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::OpenAiError;
use super::ids;
use crate::ports::object_io::{read_json, write_json};
use crate::ports::{ObjectStore, StoreError};
use crate::router::api_keys::Caller;

/// A record that names the project owning it: its `owner` field, read from the store and skipped when answered.
pub(crate) trait Owned {
    /// The owning project; None for what was made where no key was asked.
    fn owner(&self) -> Option<&str>;
}

/// A record as stored: its owner, then its own fields (which leave the owner out).
#[derive(Serialize)]
struct Stored<'a, T> {
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<&'a str>,
    #[serde(flatten)]
    record: &'a T,
}

/// Writes `record` at `key` with its owner, replacing what is there.
pub(crate) async fn write_owned<T: Serialize + Owned>(
    objects: &dyn ObjectStore,
    key: &str,
    record: &T,
) -> Result<(), StoreError> {
    write_json(objects, key, &Stored { owner: record.owner(), record }).await
}

/// `record` when `caller` may see it; another project's is None, as a record that does not exist.
pub(crate) fn visible_to<T: Owned>(caller: &Caller, record: Option<T>) -> Option<T> {
    record.filter(|record| caller.owns(record.owner()))
}

/// The stored record of the `what` whose id is `id` (ids of its kind start with `prefix`) when `caller` may see it;
/// or 404, another project's exactly as one that does not exist.
pub(crate) async fn find_record<T: DeserializeOwned + Owned>(
    objects: &dyn ObjectStore,
    caller: &Caller,
    (what, prefix): (&str, &str),
    key: fn(&str) -> String,
    id: &str,
) -> Result<T, OpenAiError> {
    if !ids::is_valid(prefix, id) {
        return Err(OpenAiError::not_found(what, id));
    }
    let record = read_json(objects, &key(id)).await.map_err(|e| OpenAiError::store(&e))?;
    visible_to(caller, record).ok_or_else(|| OpenAiError::not_found(what, id))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Owners kept and checked: a record is stored with its owner and answered without it; another project's record is
    //! not found exactly as a missing one is; a record from before owners is seen only where no keys are configured.

    use super::*;
    use crate::local::store::FileStore;
    use crate::ports::object_io::read_json;
    use crate::router::openai::files::{self, FileObject};

    fn file_of(owner: Option<&str>) -> FileObject {
        FileObject {
            owner: owner.map(str::to_owned),
            ..FileObject::new(ids::new("file-"), 3, "in.jsonl".into(), "batch")
        }
    }

    async fn find(objects: &dyn ObjectStore, caller: &Caller, id: &str) -> Result<FileObject, OpenAiError> {
        find_record(objects, caller, ("file", "file-"), files::record_key, id).await
    }

    #[tokio::test]
    async fn a_record_is_stored_with_its_owner_and_answered_without_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        let file = file_of(Some("team-a"));
        write_owned(&store, &files::record_key(&file.id), &file).await.unwrap();

        let stored: serde_json::Value = read_json(&store, &files::record_key(&file.id)).await.unwrap().unwrap();
        assert_eq!(stored["owner"], "team-a", "{stored}");
        let read: FileObject = read_json(&store, &files::record_key(&file.id)).await.unwrap().unwrap();
        assert_eq!(read.owner(), Some("team-a"));
        let answered = serde_json::to_value(&read).unwrap();
        assert!(answered.get("owner").is_none(), "the answer is OpenAI's File object, without the owner: {answered}");
        let mut without_owner = stored.clone();
        without_owner.as_object_mut().unwrap().remove("owner");
        assert_eq!(answered, without_owner, "the record holds the File object and its owner, nothing else");
    }

    #[tokio::test]
    async fn another_projects_record_is_not_found_exactly_as_a_missing_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        let file = file_of(Some("team-a"));
        write_owned(&store, &files::record_key(&file.id), &file).await.unwrap();

        assert_eq!(find(&store, &Caller::of("team-a"), &file.id).await.unwrap().id, file.id);
        assert_eq!(
            find(&store, &Caller::default(), &file.id).await.unwrap().id,
            file.id,
            "no keys: everything is seen"
        );
        let theirs = find(&store, &Caller::of("team-b"), &file.id).await.unwrap_err();
        let missing_id = ids::new("file-");
        let missing = find(&store, &Caller::of("team-b"), &missing_id).await.unwrap_err();
        assert_eq!((theirs.status, theirs.code, theirs.param), (missing.status, missing.code, missing.param));
        assert_eq!(theirs.message.replace(&file.id, "ID"), missing.message.replace(&missing_id, "ID"));
    }

    #[tokio::test]
    async fn a_record_from_before_owners_is_seen_only_where_no_keys_are_configured() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        let file = file_of(None);
        write_owned(&store, &files::record_key(&file.id), &file).await.unwrap();
        let stored: serde_json::Value = read_json(&store, &files::record_key(&file.id)).await.unwrap().unwrap();
        assert!(stored.get("owner").is_none(), "{stored}");

        assert!(find(&store, &Caller::default(), &file.id).await.is_ok());
        assert!(find(&store, &Caller::of("team-a"), &file.id).await.unwrap_err().is_not_found());
        assert!(visible_to(&Caller::of("team-a"), Some(file_of(None))).is_none());
        assert!(visible_to(&Caller::of("team-a"), Some(file_of(Some("team-a")))).is_some());
    }
}
