//! The S3 result store as an object store: `s3://bucket/prefix/<key>`; large writes go up as a multipart upload
//! a part at a time, reads come down as a stream, and reads can be handed out as presigned URLs.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use futures_util::StreamExt;
use tokio_util::io::ReaderStream;

use super::s3::S3Store;
use crate::ports::{ByteChunks, ObjectStore, PutOutcome, StoreError};

/// The size of each part of a multipart upload: S3 needs at least 5 MiB for every part but the last, and allows
/// 10,000 parts (80 GB at this size); memory holds one part at a time.
const PART_BYTES: usize = 8 * 1024 * 1024;

impl S3Store {
    fn object_key(&self, key: &str) -> String {
        format!("{}{key}", self.location.prefix)
    }

    /// Sends the parts after the first (already read into `first`) and completes the upload; aborts it on failure
    /// so no parts are left to bill.
    async fn put_multipart(&self, key: &str, first: Vec<u8>, chunks: ByteChunks<'_>) -> Result<u64, StoreError> {
        let bucket = &self.location.bucket;
        let created = self.client.create_multipart_upload().bucket(bucket).key(key).send().await;
        let created = created.map_err(self.unavailable("CreateMultipartUpload", key))?;
        let upload_id = created.upload_id().unwrap_or_default().to_owned();
        let sent = self.send_parts(key, &upload_id, first, chunks).await;
        let completed = match sent {
            Ok((parts, written)) => {
                let upload = CompletedMultipartUpload::builder().set_parts(Some(parts)).build();
                let completed = self
                    .client
                    .complete_multipart_upload()
                    .bucket(bucket)
                    .key(key)
                    .upload_id(&upload_id)
                    .multipart_upload(upload)
                    .send()
                    .await;
                completed.map(|_| written).map_err(self.unavailable("CompleteMultipartUpload", key))
            }
            Err(error) => Err(error),
        };
        if completed.is_err() {
            let aborted =
                self.client.abort_multipart_upload().bucket(bucket).key(key).upload_id(&upload_id).send().await;
            if let Err(e) = aborted.map_err(self.unavailable("AbortMultipartUpload", key)) {
                tracing::warn!(key, error = %e, "a failed multipart upload could not be aborted; the bucket's lifecycle removes its parts");
            }
        }
        completed
    }

    async fn send_parts(
        &self,
        key: &str,
        upload_id: &str,
        first: Vec<u8>,
        mut chunks: ByteChunks<'_>,
    ) -> Result<(Vec<CompletedPart>, u64), StoreError> {
        let mut parts = Vec::new();
        let mut written = 0u64;
        let mut part = first;
        loop {
            let last = fill(&mut part, &mut chunks, key).await?;
            if !part.is_empty() || parts.is_empty() {
                let number = i32::try_from(parts.len() + 1).unwrap_or(i32::MAX);
                written += part.len() as u64;
                let body = ByteStream::from(std::mem::take(&mut part));
                let sent = self
                    .client
                    .upload_part()
                    .bucket(&self.location.bucket)
                    .key(key)
                    .upload_id(upload_id)
                    .part_number(number)
                    .body(body)
                    .send()
                    .await
                    .map_err(self.unavailable("UploadPart", key))?;
                parts.push(CompletedPart::builder().part_number(number).set_e_tag(sent.e_tag).build());
            }
            if last {
                return Ok((parts, written));
            }
        }
    }
}

/// Reads chunks into `part` until it holds a whole part or the chunks end; true once they have ended.
async fn fill(part: &mut Vec<u8>, chunks: &mut ByteChunks<'_>, key: &str) -> Result<bool, StoreError> {
    while part.len() < PART_BYTES {
        match chunks.next().await {
            Some(chunk) => {
                part.extend_from_slice(&chunk.map_err(|e| StoreError::caused(&format!("writing {key}"), e))?)
            }
            None => return Ok(true),
        }
    }
    Ok(false)
}

#[async_trait]
impl ObjectStore for S3Store {
    async fn put(&self, key: &str, mut chunks: ByteChunks<'_>) -> Result<u64, StoreError> {
        let key = self.object_key(key);
        let mut first = Vec::new();
        if !fill(&mut first, &mut chunks, &key).await? {
            return self.put_multipart(&key, first, chunks).await;
        }
        let size = first.len() as u64;
        let put = self.client.put_object().bucket(&self.location.bucket).key(&key).body(ByteStream::from(first)).send();
        put.await.map(|_| size).map_err(self.unavailable("PutObject", &key))
    }

    async fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<PutOutcome, StoreError> {
        self.create(self.object_key(key), bytes).await
    }

    async fn get_from(&self, key: &str, from: u64) -> Result<Option<(u64, ByteChunks<'static>)>, StoreError> {
        let key = self.object_key(key);
        // GetObject's Range (RFC 9110 `bytes=N-`): a start at or past the end is 416 InvalidRange, read as no bytes.
        let range = (from > 0).then(|| format!("bytes={from}-"));
        match self.client.get_object().bucket(&self.location.bucket).key(&key).set_range(range).send().await {
            Ok(object) => {
                let size = object.content_length().and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
                let reader = object.body.into_async_read();
                Ok(Some((size, Box::pin(ReaderStream::new(reader)))))
            }
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => Ok(None),
            Err(e) if e.as_service_error().and_then(|s| s.meta().code()) == Some("InvalidRange") => {
                Ok(Some((0, Box::pin(futures_util::stream::empty()))))
            }
            Err(e) => Err(self.unavailable("GetObject", &key)(e)),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let full = self.object_key(prefix);
        let mut pages =
            self.client.list_objects_v2().bucket(&self.location.bucket).prefix(&full).into_paginator().send();
        let mut keys = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(self.unavailable("ListObjectsV2", &full))?;
            let names = page.contents().iter().filter_map(|object| object.key());
            keys.extend(names.filter_map(|name| name.strip_prefix(&self.location.prefix)).map(str::to_owned));
        }
        keys.sort();
        Ok(keys)
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.remove(self.object_key(key)).await
    }

    async fn presigned_get(&self, key: &str, valid_for: Duration) -> Result<Option<String>, StoreError> {
        let key = self.object_key(key);
        let config = PresigningConfig::expires_in(valid_for).map_err(|e| StoreError::caused("presigning", e))?;
        let request = self.client.get_object().bucket(&self.location.bucket).key(&key).presigned(config).await;
        let request = request.map_err(self.unavailable("GetObject", &key))?;
        Ok(Some(request.uri().to_owned()))
    }
}
