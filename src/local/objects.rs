//! The file result store as an object store: `<dir>/results/<key>`, written to a temporary file and renamed into
//! place, read a chunk at a time.

use std::io::ErrorKind;
use std::path::PathBuf;

use async_trait::async_trait;
use futures_util::StreamExt;
use tokio::io::{AsyncSeekExt, AsyncWriteExt};
use tokio_util::io::ReaderStream;

use super::store::FileStore;
use crate::ports::{ByteChunks, ObjectStore, PutOutcome, StoreError};

impl FileStore {
    /// The path of `key`; a key that would leave the folder (`..`, an absolute path) is refused.
    fn object_path(&self, key: &str) -> Result<PathBuf, StoreError> {
        let escapes = key.split('/').any(|part| part.is_empty() || part == "." || part == "..");
        if escapes || key.contains('\\') {
            return Err(StoreError::unavailable(format!("{key:?} is not a valid object key")));
        }
        Ok(self.dir().join(key))
    }

    /// The folder of `path`, created if needed, for a temporary file beside it.
    async fn parent_of(path: &std::path::Path) -> Result<PathBuf, StoreError> {
        let parent = path.parent().map(PathBuf::from).unwrap_or_default();
        tokio::fs::create_dir_all(&parent).await.map_err(object_error)?;
        Ok(parent)
    }
}

#[async_trait]
impl ObjectStore for FileStore {
    async fn put(&self, key: &str, mut chunks: ByteChunks<'_>) -> Result<u64, StoreError> {
        let path = self.object_path(key)?;
        let temp = tempfile::NamedTempFile::new_in(Self::parent_of(&path).await?).map_err(object_error)?;
        let (file, temp_path) = temp.into_parts();
        let mut file = tokio::fs::File::from_std(file);
        let mut written = 0u64;
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| StoreError::caused(&format!("writing {key}"), e))?;
            file.write_all(&chunk).await.map_err(object_error)?;
            written += chunk.len() as u64;
        }
        file.flush().await.map_err(object_error)?;
        temp_path.persist(&path).map_err(|e| object_error(e.error))?;
        Ok(written)
    }

    async fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<PutOutcome, StoreError> {
        let path = self.object_path(key)?;
        Self::parent_of(&path).await?;
        self.create(&path, bytes)
    }

    async fn get_from(&self, key: &str, from: u64) -> Result<Option<(u64, ByteChunks<'static>)>, StoreError> {
        let path = self.object_path(key)?;
        let mut file = match tokio::fs::File::open(&path).await {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(object_error(e)),
        };
        let metadata = file.metadata().await.map_err(object_error)?;
        if !metadata.is_file() {
            return Ok(None);
        }
        file.seek(std::io::SeekFrom::Start(from)).await.map_err(object_error)?;
        Ok(Some((metadata.len().saturating_sub(from), Box::pin(ReaderStream::new(file)))))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        // The folder that holds every key with this prefix, and the start of the names in it.
        let (folder, start) = prefix.rsplit_once('/').map_or(("", prefix), |(folder, start)| (folder, start));
        let dir = if folder.is_empty() { self.dir().to_path_buf() } else { self.object_path(folder)? };
        let mut entries = match tokio::fs::read_dir(&dir).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(object_error(e)),
        };
        let mut keys = Vec::new();
        while let Some(entry) = entries.next_entry().await.map_err(object_error)? {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(start)
                && !name.starts_with(".tmp")
                && entry.file_type().await.is_ok_and(|t| t.is_file())
            {
                keys.push(if folder.is_empty() { name } else { format!("{folder}/{name}") });
            }
        }
        keys.sort();
        Ok(keys)
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        match tokio::fs::remove_file(self.object_path(key)?).await {
            Err(e) if e.kind() != ErrorKind::NotFound => Err(object_error(e)),
            _ => Ok(()),
        }
    }
}

fn object_error(e: std::io::Error) -> StoreError {
    StoreError::caused("object file", e)
}
