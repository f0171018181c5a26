//! Each project's own list of the files and batches it owns: an empty marker `{kind}owners/{project in hex}/{id}`
//! written when the object is made, so that a project's list reads only its own objects, whatever other projects
//! keep. Objects made before the index are indexed once by the upkeep (`build`); until then a project's list reads
//! every record, as before. A marker whose object is gone is removed by the list that finds it.

use std::fmt::Write;

use serde_json::Value;

use crate::ports::object_io::read_json;
use crate::ports::{ObjectStore, StoreError};

/// The mark that every object made before the index has its marker.
const BUILT: &str = "files/owners/built";

/// Where `owner`'s markers of the kind kept under `kind` are: the project in hex, so that no name (`..` is a valid
/// project) is ever read as a path.
pub(super) fn folder(kind: &str, owner: &str) -> String {
    let hex = owner.bytes().fold(String::new(), |mut hex, byte| {
        let _ = write!(hex, "{byte:02x}");
        hex
    });
    format!("{kind}owners/{hex}/")
}

/// Marks the object `id` of the kind `kind` as `owner`'s (an object without owner is in no project's list but
/// everyone's, and needs none).
pub(super) async fn add(
    objects: &dyn ObjectStore,
    kind: &str,
    owner: Option<&str>,
    id: &str,
) -> Result<(), StoreError> {
    let Some(owner) = owner else { return Ok(()) };
    objects.put_if_absent(&format!("{}{id}", folder(kind, owner)), b"").await.map(drop)
}

/// The ids of `owner`'s objects of the kind `kind`, in no order; None while objects made before the index may lack
/// their marker.
pub(super) async fn ids(objects: &dyn ObjectStore, kind: &str, owner: &str) -> Result<Option<Vec<String>>, StoreError> {
    if objects.get(BUILT).await?.is_none() {
        return Ok(None);
    }
    let folder = folder(kind, owner);
    let keys = objects.list(&folder).await?;
    Ok(Some(keys.iter().filter_map(|key| key.strip_prefix(&folder)).map(str::to_owned).collect()))
}

/// Removes the marker of `owner`'s object `id` (its object is gone).
pub(super) async fn forget(objects: &dyn ObjectStore, kind: &str, owner: &str, id: &str) -> Result<(), StoreError> {
    objects.delete(&format!("{}{id}", folder(kind, owner))).await
}

/// Gives every object of the kinds `kinds` made before the index its marker, once: true when it did (the upkeep
/// calls it every time; after the first it is one read). A build cut short is done again whole by the next upkeep;
/// markers stand once.
pub(crate) async fn build(objects: &dyn ObjectStore, kinds: [&str; 2]) -> Result<bool, StoreError> {
    if objects.get(BUILT).await?.is_some() {
        return Ok(false);
    }
    for kind in kinds {
        for key in objects.list(kind).await? {
            let Some(id) = key.strip_prefix(kind).and_then(|name| name.strip_suffix(".json")) else { continue };
            if id.contains('/') {
                continue;
            }
            let record: Option<Value> = read_json(objects, &key).await?;
            let owner = record.as_ref().and_then(|record| record["owner"].as_str());
            add(objects, kind, owner, id).await?;
        }
    }
    objects.put_if_absent(BUILT, b"").await?;
    tracing::info!("every file and batch made before the project index is in its project's list");
    Ok(true)
}
