//! S3 result store: `s3://bucket/prefix/` → `prefix/{requestId}.json` (the AWS sample's key rule), written with If-None-Match: *.

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::error::SdkError;
use aws_sdk_s3::primitives::ByteStream;
use aws_smithy_runtime_api::http::Response as HttpResponse;

use super::sdk::endpoint_overridden;
use crate::contract::request_id::RequestId;
use crate::ports::{PutOutcome, ResultStore, StoreError};

/// An S3 client; path-style addressing when the endpoint is overridden (emulators).
pub fn client(sdk: &aws_config::SdkConfig) -> Client {
    Client::from_conf(aws_sdk_s3::config::Builder::from(sdk).force_path_style(endpoint_overridden(sdk, "S3")).build())
}

/// Where results go in S3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Location {
    pub bucket: String,
    /// Key prefix ending in `/`, or empty.
    pub prefix: String,
}

impl S3Location {
    /// Parses `s3://bucket`, `s3://bucket/` or `s3://bucket/some/prefix/`.
    pub fn parse(url: &str) -> Result<Self, String> {
        let rest = url.strip_prefix("s3://").ok_or_else(|| format!("{url}: an S3 destination starts with s3://"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(format!("{url}: no bucket name"));
        }
        let prefix = prefix.trim_matches('/');
        let prefix = if prefix.is_empty() { String::new() } else { format!("{prefix}/") };
        Ok(S3Location { bucket: bucket.to_owned(), prefix })
    }

    pub fn key(&self, request_id: RequestId) -> String {
        format!("{}{request_id}.json", self.prefix)
    }

    /// The router's record of accepting the request, beside its result (so the same lifecycle expires it).
    pub(crate) fn acceptance_key(&self, request_id: RequestId) -> String {
        format!("{}{request_id}.accepted", self.prefix)
    }

    /// The cancel mark, beside the results (the same grants and lifecycle).
    pub fn cancel_mark_key(&self) -> String {
        format!("{}cancels.mark", self.prefix)
    }
}

#[derive(Debug, Clone)]
pub struct S3Store {
    pub(super) client: Client,
    pub(super) location: S3Location,
}

impl S3Store {
    pub fn new(client: Client, location: S3Location) -> Self {
        S3Store { client, location }
    }
}

/// The permission a 403 to `action` says is missing.
fn missing_permission(action: &str) -> &'static str {
    match action {
        // S3 authorizes each step of a multipart upload with s3:PutObject.
        "PutObject" | "CreateMultipartUpload" | "UploadPart" | "CompleteMultipartUpload" => "s3:PutObject on the key",
        "AbortMultipartUpload" => "s3:AbortMultipartUpload on the key",
        "ListObjectsV2" => "s3:ListBucket on the bucket",
        "DeleteObject" => "s3:DeleteObject on the key",
        // S3 answers a read of a key that does not exist with 403 instead of 404 unless the caller may list the
        // bucket: without ListBucket every pending result reads as an error.
        _ => {
            "s3:GetObject on the key and s3:ListBucket on the bucket (without ListBucket, S3 answers 403, not 404, for a result not written yet)"
        }
    }
}

impl S3Store {
    /// A failed call as a store error; a 403 names the permission the role lacks.
    pub(super) fn unavailable<E>(
        &self,
        action: &'static str,
        key: &str,
    ) -> impl FnOnce(SdkError<E, HttpResponse>) -> StoreError
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let call = format!("{action} s3://{}/{key}", self.location.bucket);
        move |e| match e.raw_response().map(|r| r.status().as_u16()) {
            Some(403) => StoreError::with_source(
                format!("{call}: 403 Forbidden: the role needs {}", missing_permission(action)),
                Arc::new(e),
            ),
            _ => StoreError::caused(&call, e),
        }
    }
}

#[async_trait]
impl ResultStore for S3Store {
    async fn exists(&self, request_id: RequestId) -> Result<bool, StoreError> {
        let key = self.location.key(request_id);
        let head = self.client.head_object().bucket(&self.location.bucket).key(&key).send().await;
        match head {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => Ok(false),
            Err(e) => Err(self.unavailable("HeadObject", &key)(e)),
        }
    }

    async fn put_if_absent(&self, request_id: RequestId, document: &[u8]) -> Result<PutOutcome, StoreError> {
        self.create(self.location.key(request_id), document).await
    }

    async fn get(&self, request_id: RequestId) -> Result<Option<Vec<u8>>, StoreError> {
        self.read(self.location.key(request_id)).await
    }

    async fn delete(&self, request_id: RequestId) -> Result<(), StoreError> {
        self.remove(self.location.key(request_id)).await
    }

    async fn record_acceptance(&self, request_id: RequestId, record: &[u8]) -> Result<PutOutcome, StoreError> {
        self.create(self.location.acceptance_key(request_id), record).await
    }

    async fn acceptance(&self, request_id: RequestId) -> Result<Option<Vec<u8>>, StoreError> {
        self.read(self.location.acceptance_key(request_id)).await
    }

    async fn forget_acceptance(&self, request_id: RequestId) -> Result<(), StoreError> {
        self.remove(self.location.acceptance_key(request_id)).await
    }

    async fn mark_cancels(&self) -> Result<(), StoreError> {
        let key = self.location.cancel_mark_key();
        let mark = crate::contract::outcome::cancel_mark();
        let put = self.client.put_object().bucket(&self.location.bucket).key(&key).body(ByteStream::from(mark));
        put.send().await.map(drop).map_err(self.unavailable("PutObject", &key))
    }

    /// The mark's ETag (its bytes differ at each write, so does the ETag).
    async fn cancel_mark(&self) -> Result<Option<String>, StoreError> {
        let key = self.location.cancel_mark_key();
        match self.client.head_object().bucket(&self.location.bucket).key(&key).send().await {
            Ok(head) => Ok(head.e_tag),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => Ok(None),
            Err(e) => Err(self.unavailable("HeadObject", &key)(e)),
        }
    }

    fn objects(&self) -> Option<&dyn crate::ports::ObjectStore> {
        Some(self)
    }
}

impl S3Store {
    /// Writes `document` at `key` unless something is there: first writer wins.
    pub(super) async fn create(&self, key: String, document: &[u8]) -> Result<PutOutcome, StoreError> {
        let put = self
            .client
            .put_object()
            .bucket(&self.location.bucket)
            .key(&key)
            .content_type("application/json")
            .if_none_match("*")
            .body(ByteStream::from(document.to_vec()))
            .send()
            .await;
        match put {
            Ok(_) => Ok(PutOutcome::Created),
            // 412: another worker stored this result first; 409: a concurrent conditional write is in progress.
            Err(e) if e.raw_response().is_some_and(|r| matches!(r.status().as_u16(), 412 | 409)) => {
                Ok(PutOutcome::AlreadyExists)
            }
            Err(e) => Err(self.unavailable("PutObject", &key)(e)),
        }
    }

    /// Removes the object at `key` (a whole key, prefix included); none there is no error.
    pub(super) async fn remove(&self, key: String) -> Result<(), StoreError> {
        let deleted = self.client.delete_object().bucket(&self.location.bucket).key(&key).send().await;
        deleted.map(|_| ()).map_err(self.unavailable("DeleteObject", &key))
    }

    async fn read(&self, key: String) -> Result<Option<Vec<u8>>, StoreError> {
        let get = self.client.get_object().bucket(&self.location.bucket).key(&key).send().await;
        match get {
            Ok(object) => {
                let bytes = object.body.collect().await.map_err(|e| StoreError::caused("reading the object", e))?;
                Ok(Some(bytes.into_bytes().to_vec()))
            }
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => Ok(None),
            Err(e) => Err(self.unavailable("GetObject", &key)(e)),
        }
    }
}
