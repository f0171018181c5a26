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

    /// Removes every document (results, cancels, acceptance records) last written more than `retention` ago, as
    /// the results bucket's lifecycle rule does on AWS; how many.
    pub fn expire(&self, retention: Duration) -> Result<usize, StoreError> {
        let cutoff = SystemTime::now() - retention;
        let mut removed = 0;
        for entry in std::fs::read_dir(&self.results).map_err(io_error)? {
            let entry = entry.map_err(io_error)?;
            let modified = entry.metadata().and_then(|m| m.modified()).map_err(io_error)?;
            if entry.file_type().map_err(io_error)?.is_file() && modified < cutoff {
                std::fs::remove_file(entry.path()).map_err(io_error)?;
                removed += 1;
            }
        }
        Ok(removed)
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

    async fn record_acceptance(&self, request_id: RequestId, record: &[u8]) -> Result<PutOutcome, StoreError> {
        self.create(&self.acceptance_path_of(request_id), record)
    }

    async fn acceptance(&self, request_id: RequestId) -> Result<Option<Vec<u8>>, StoreError> {
        read(&self.acceptance_path_of(request_id))
    }

    async fn forget_acceptance(&self, request_id: RequestId) -> Result<(), StoreError> {
        match std::fs::remove_file(self.acceptance_path_of(request_id)) {
            Err(e) if e.kind() != ErrorKind::NotFound => Err(io_error(e)),
            _ => Ok(()),
        }
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

fn io_error(e: std::io::Error) -> StoreError {
    StoreError::caused("result file", e)
}
