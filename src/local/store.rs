//! File result store: `<dir>/results/{requestId}.json`, created atomically and never overwritten.

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use crate::contract::request_id::RequestId;
use crate::ports::{PutOutcome, ResultStore, StoreError};

#[derive(Debug, Clone)]
pub struct FileStore {
    results: PathBuf,
}

impl FileStore {
    /// Opens (and creates) `<root>/results/`.
    pub fn open(root: &Path) -> Result<Self, StoreError> {
        let results = root.join("results");
        std::fs::create_dir_all(&results)
            .map_err(|e| StoreError::caused(&format!("cannot create {}", results.display()), e))?;
        Ok(FileStore { results })
    }

    /// The folder results (and the Batch API's objects) are kept in.
    pub fn dir(&self) -> &Path {
        &self.results
    }

    pub fn path_of(&self, request_id: RequestId) -> PathBuf {
        self.results.join(format!("{request_id}.json"))
    }

    /// Removes every object last written more than `retention` before `now`, in every folder (results, cancels,
    /// acceptance records, and the Batch API's files, batches, marks and uploads), as the results bucket's
    /// lifecycle rule does on AWS for every key under the results prefix; a folder that was as old and is left
    /// empty goes too. How many objects.
    pub fn expire(&self, retention: Duration, now: SystemTime) -> Result<usize, StoreError> {
        expire_in(&self.results, now.checked_sub(retention).unwrap_or(SystemTime::UNIX_EPOCH))
    }

    fn cancel_mark_path(&self) -> PathBuf {
        self.results.join("cancels.mark")
    }

    fn acceptance_path_of(&self, request_id: RequestId) -> PathBuf {
        self.results.join(format!("{request_id}.accepted"))
    }

    /// Writes the whole document to a private temporary file, then hard-links it into place:
    /// the link fails if the name exists, so a reader never sees a partial document and a
    /// second writer never replaces the first.
    pub(super) fn create(&self, target: &Path, document: &[u8]) -> Result<PutOutcome, StoreError> {
        let mut temp = tempfile::NamedTempFile::new_in(&self.results).map_err(io_error)?;
        temp.write_all(document).map_err(io_error)?;
        match std::fs::hard_link(temp.path(), target) {
            Ok(()) => Ok(PutOutcome::Created),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(PutOutcome::AlreadyExists),
            Err(e) => Err(io_error(e)),
        }
    }
}

#[async_trait]
impl ResultStore for FileStore {
    async fn exists(&self, request_id: RequestId) -> Result<bool, StoreError> {
        self.path_of(request_id).try_exists().map_err(io_error)
    }

    async fn put_if_absent(&self, request_id: RequestId, document: &[u8]) -> Result<PutOutcome, StoreError> {
        self.create(&self.path_of(request_id), document)
    }

    async fn get(&self, request_id: RequestId) -> Result<Option<Vec<u8>>, StoreError> {
        read(&self.path_of(request_id))
    }

    async fn delete(&self, request_id: RequestId) -> Result<(), StoreError> {
        remove(&self.path_of(request_id))
    }

    async fn record_acceptance(&self, request_id: RequestId, record: &[u8]) -> Result<PutOutcome, StoreError> {
        self.create(&self.acceptance_path_of(request_id), record)
    }

    async fn acceptance(&self, request_id: RequestId) -> Result<Option<Vec<u8>>, StoreError> {
        read(&self.acceptance_path_of(request_id))
    }

    async fn forget_acceptance(&self, request_id: RequestId) -> Result<(), StoreError> {
        remove(&self.acceptance_path_of(request_id))
    }

    /// Written whole, then renamed into place: a reader sees the old mark or the new one.
    async fn mark_cancels(&self) -> Result<(), StoreError> {
        let mut temp = tempfile::NamedTempFile::new_in(&self.results).map_err(io_error)?;
        temp.write_all(&crate::contract::outcome::cancel_mark()).map_err(io_error)?;
        temp.persist(self.cancel_mark_path()).map(drop).map_err(|e| io_error(e.error))
    }

    async fn cancel_mark(&self) -> Result<Option<String>, StoreError> {
        Ok(read(&self.cancel_mark_path())?.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
    }

    fn objects(&self) -> Option<&dyn crate::ports::ObjectStore> {
        Some(self)
    }
}

fn read(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(e)),
    }
}

/// Removes the file at `path`; none there is no error.
fn remove(path: &Path) -> Result<(), StoreError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(io_error(e)),
        _ => Ok(()),
    }
}

/// Removes the objects of `dir`, and of the folders in it, last written before `cutoff`; and each folder in it
/// that was last changed before `cutoff` and is empty once its old objects are gone. How many objects.
/// What is gone by the time the sweep reaches it (removed meanwhile by the API) is passed over.
fn expire_in(dir: &Path, cutoff: SystemTime) -> Result<usize, StoreError> {
    let gone = |e: &std::io::Error| e.kind() == ErrorKind::NotFound;
    let entries = match std::fs::read_dir(dir) {
        Err(e) if gone(&e) => return Ok(0),
        entries => entries.map_err(io_error)?,
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry.map_err(io_error)?;
        let metadata = match entry.metadata() {
            Err(e) if gone(&e) => continue,
            metadata => metadata.map_err(io_error)?,
        };
        let old = metadata.modified().map_err(io_error)? < cutoff;
        if metadata.is_dir() {
            removed += expire_in(&entry.path(), cutoff)?;
            if old {
                // Refused while something is still in it (a recent object, one written meanwhile): kept.
                let _ = std::fs::remove_dir(entry.path());
            }
        } else if metadata.is_file() && old {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) if gone(&e) => {}
                Err(e) => return Err(io_error(e)),
            }
        }
    }
    Ok(removed)
}

fn io_error(e: std::io::Error) -> StoreError {
    StoreError::caused("result file", e)
}
