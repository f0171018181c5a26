//! Owners kept and checked: a record is stored with its owner and answered without it; another project's record is
//! not found exactly as a missing one is; a record from before owners is seen only where no keys are configured.

use super::*;
use crate::local::store::FileStore;
use crate::ports::object_io::read_json;
use crate::router::openai::files::{self, FileObject};

fn file_of(owner: Option<&str>) -> FileObject {
    FileObject { owner: owner.map(str::to_owned), ..FileObject::new(ids::new("file-"), 3, "in.jsonl".into(), "batch") }
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
    assert_eq!(find(&store, &Caller::default(), &file.id).await.unwrap().id, file.id, "no keys: everything is seen");
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
