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
mod tests;
