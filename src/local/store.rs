//! File result store: `<dir>/results/{requestId}.json`, created atomically and never overwritten.

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use async_trait::async_trait;

use crate::ports::{PutOutcome, ResultStore, StoreError};
use crate::request_id::RequestId;

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

    pub fn path_of(&self, request_id: RequestId) -> PathBuf {
        self.results.join(format!("{request_id}.json"))
    }

    /// Writes the whole document to a private temporary file, then hard-links it into place:
    /// the link fails if the name exists, so a reader never sees a partial document and a
    /// second writer never replaces the first.
    fn create(&self, request_id: RequestId, document: &[u8]) -> Result<PutOutcome, StoreError> {
        let target = self.path_of(request_id);
        let mut temp = tempfile::NamedTempFile::new_in(&self.results).map_err(io_error)?;
        temp.write_all(document).map_err(io_error)?;
        match std::fs::hard_link(temp.path(), &target) {
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
        self.create(request_id, document)
    }

    async fn get(&self, request_id: RequestId) -> Result<Option<Vec<u8>>, StoreError> {
        match std::fs::read(self.path_of(request_id)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error(e)),
        }
    }
}

fn io_error(e: std::io::Error) -> StoreError {
    StoreError::caused("result file", e)
}
