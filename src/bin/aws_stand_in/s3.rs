//! S3 over REST-XML, path-style (`/bucket/key`, as the project's client addresses it when the endpoint is
//! overridden): the buckets, the routing of each request to its operation, and CreateBucket, PutObject, GetObject,
//! HeadObject and DeleteObject. Listing is in s3_list.rs, multipart uploads in s3_multipart.rs.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::Bytes;
use md5::{Digest, Md5};

use crate::errors::S3Error;
use crate::lock;
use crate::s3_multipart::Upload;
use crate::wire::{aws_chunked_payload, http_date, percent_decode, query_pairs};
use crate::{s3_list, s3_multipart};

/// One stored object.
#[derive(Debug)]
pub(crate) struct Object {
    pub body: Bytes,
    /// The ETag, quoted: the body's MD5 in hex, or for a multipart upload the MD5 of its parts' MD5s with `-<parts>`.
    pub etag: String,
    pub content_type: Option<String>,
    pub last_modified: SystemTime,
    /// `x-amz-meta-*` headers, as given.
    pub metadata: Vec<(String, HeaderValue)>,
}

#[derive(Debug, Default)]
pub(crate) struct Bucket {
    pub objects: Mutex<BTreeMap<String, Arc<Object>>>,
    pub uploads: Mutex<HashMap<String, Upload>>,
}

/// A write's condition: `If-None-Match: *` (only where no object is) or `If-Match: <etag>` (only over that one).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Condition {
    /// No condition header: the write always happens.
    Always,
    Absent,
    Matching(String),
}

impl Bucket {
    /// Stores `object` at `key` if `condition` holds (S3 User Guide, "Conditional writes": 412 PreconditionFailed
    /// when `If-None-Match: *` finds the key, or `If-Match` another ETag; `If-Match` on a missing key is 404).
    pub(crate) fn write(&self, key: &str, object: Object, condition: &Condition) -> Result<(), S3Error> {
        let mut objects = lock(&self.objects);
        match (condition, objects.get(key)) {
            (Condition::Absent, Some(_)) => return Err(S3Error::precondition_failed("If-None-Match")),
            (Condition::Matching(_), None) => return Err(S3Error::no_such_key(key)),
            (Condition::Matching(etag), Some(existing))
                if existing.etag.trim_matches('"') != etag.trim_matches('"') =>
            {
                return Err(S3Error::precondition_failed("If-Match"));
            }
            _ => {}
        }
        objects.insert(key.to_owned(), Arc::new(object));
        Ok(())
    }
}

/// One S3 request, its path decoded into bucket and key.
#[derive(Debug)]
pub(crate) struct Call<'a> {
    pub bucket: String,
    pub key: String,
    pub query: Vec<(String, String)>,
    pub headers: &'a HeaderMap,
    pub body: Bytes,
}

impl Call<'_> {
    pub(crate) fn has(&self, name: &str) -> bool {
        self.query.iter().any(|(n, _)| n == name)
    }

    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub(crate) fn header(&self, name: impl header::AsHeaderName) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The query parameters that select an operation or a sub-resource: not the SDK's `x-id` nor a presigned
    /// URL's `X-Amz-*`.
    fn selectors(&self) -> Vec<&str> {
        let ignored = |name: &str| name == "x-id" || name.to_ascii_lowercase().starts_with("x-amz-");
        self.query.iter().map(|(n, _)| n.as_str()).filter(|n| !ignored(n)).collect()
    }

    /// The request's payload: its body, decoded when sent aws-chunked (SigV4 streaming uploads).
    pub(crate) fn payload(&self) -> Result<Bytes, S3Error> {
        let chunked = self.header(header::CONTENT_ENCODING).is_some_and(|e| e.contains("aws-chunked"))
            || self.header("x-amz-content-sha256").is_some_and(|s| s.starts_with("STREAMING-"));
        if !chunked {
            return Ok(self.body.clone());
        }
        aws_chunked_payload(&self.body)
            .map(Bytes::from)
            .ok_or_else(|| S3Error::invalid_request("The aws-chunked body is not well formed"))
    }

    /// The `x-amz-meta-*` headers, kept with the object.
    pub(crate) fn metadata(&self) -> Vec<(String, HeaderValue)> {
        let meta = self.headers.iter().filter(|(name, _)| name.as_str().starts_with("x-amz-meta-"));
        meta.map(|(name, value)| (name.as_str().to_owned(), value.clone())).collect()
    }
}

#[derive(Debug, Default)]
pub(crate) struct S3 {
    buckets: Mutex<HashMap<String, Arc<Bucket>>>,
}

impl S3 {
    /// Answers one request.
    pub(crate) fn handle(&self, method: &Method, uri: &Uri, headers: &HeaderMap, body: Bytes) -> Response {
        let path = uri.path().strip_prefix('/').unwrap_or(uri.path());
        let (bucket, key) = path.split_once('/').unwrap_or((path, ""));
        let call = Call {
            bucket: percent_decode(bucket),
            key: percent_decode(key),
            query: query_pairs(uri.query()),
            headers,
            body,
        };
        self.route(method, &call).unwrap_or_else(|error| error.respond(method == Method::HEAD))
    }

    fn route(&self, method: &Method, call: &Call) -> Result<Response, S3Error> {
        let selectors = call.selectors();
        let plain = selectors.is_empty();
        if call.bucket.is_empty() {
            return Err(S3Error::not_implemented("ListBuckets"));
        }
        if call.key.is_empty() {
            return match *method {
                Method::PUT if plain => self.create_bucket(call),
                Method::GET if call.param("list-type") == Some("2") => {
                    s3_list::list_objects_v2(&*self.bucket(&call.bucket)?, call)
                }
                _ => Err(not_served(method, call, &selectors)),
            };
        }
        let bucket = self.bucket(&call.bucket)?;
        match *method {
            Method::PUT if call.has("uploadId") && call.has("partNumber") => s3_multipart::upload_part(&bucket, call),
            Method::PUT if call.headers.contains_key("x-amz-copy-source") => {
                Err(S3Error::not_implemented("CopyObject"))
            }
            Method::PUT if plain => put_object(&bucket, call),
            Method::GET | Method::HEAD if plain => get_object(&bucket, call),
            Method::DELETE if call.has("uploadId") => s3_multipart::abort(&bucket, call),
            Method::DELETE if plain => {
                lock(&bucket.objects).remove(&call.key);
                Ok(StatusCode::NO_CONTENT.into_response())
            }
            Method::POST if call.has("uploads") => s3_multipart::create(&bucket, call),
            Method::POST if call.has("uploadId") => s3_multipart::complete(&bucket, call),
            _ => Err(not_served(method, call, &selectors)),
        }
    }

    fn bucket(&self, name: &str) -> Result<Arc<Bucket>, S3Error> {
        lock(&self.buckets).get(name).cloned().ok_or_else(|| S3Error::no_such_bucket(name))
    }

    /// CreateBucket. Bucket names: 3 to 63 lowercase letters, digits, dots and hyphens, starting and ending with a
    /// letter or digit. Creating one already owned answers 200 in us-east-1 (this stand-in's region) and 409
    /// BucketAlreadyOwnedByYou where the request names another region (CreateBucket, "BucketAlreadyOwnedByYou").
    fn create_bucket(&self, call: &Call) -> Result<Response, S3Error> {
        let name = &call.bucket;
        let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-';
        let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        if !(3..=63).contains(&name.len())
            || !name.chars().all(allowed)
            || !ends(name.chars().next())
            || !ends(name.chars().last())
        {
            return Err(S3Error::invalid_bucket_name(name));
        }
        let body = String::from_utf8_lossy(&call.body);
        let elsewhere = s3_multipart::elements(&body, "LocationConstraint")
            .first()
            .is_some_and(|r| !r.is_empty() && *r != "us-east-1");
        let mut buckets = lock(&self.buckets);
        if buckets.contains_key(name) && elsewhere {
            return Err(S3Error::bucket_already_owned(name));
        }
        buckets.entry(name.clone()).or_default();
        let location = HeaderValue::from_str(&format!("/{name}")).map_err(|_| S3Error::invalid_bucket_name(name))?;
        Ok((StatusCode::OK, [(header::LOCATION, location)]).into_response())
    }
}

/// The answer to a request this stand-in does not serve, naming it.
fn not_served(method: &Method, call: &Call, selectors: &[&str]) -> S3Error {
    let path = if call.key.is_empty() { format!("/{}", call.bucket) } else { format!("/{}/{}", call.bucket, call.key) };
    let query = if selectors.is_empty() { String::new() } else { format!("?{}", selectors.join("&")) };
    S3Error::not_implemented(&format!("{method} {path}{query}"))
}

/// The condition of a write's `If-None-Match` / `If-Match` header; `If-None-Match` takes only `*` (S3 User Guide,
/// "Conditional writes": "The If-None-Match header requires the * (asterisk) value"), anything else answers 501.
pub(crate) fn condition(call: &Call) -> Result<Condition, S3Error> {
    match (call.header(header::IF_NONE_MATCH), call.header(header::IF_MATCH)) {
        (Some("*"), None) => Ok(Condition::Absent),
        (Some(_), _) => Err(S3Error::not_implemented("If-None-Match with a value other than *")),
        (None, Some(etag)) => Ok(Condition::Matching(etag.to_owned())),
        (None, None) => Ok(Condition::Always),
    }
}

/// A quoted ETag from an MD5 digest.
pub(crate) fn quoted(digest: &[u8]) -> String {
    format!("\"{}\"", hex::encode(digest))
}

/// PutObject: stores the body (checked against `Content-MD5` when sent), answers its ETag.
fn put_object(bucket: &Bucket, call: &Call) -> Result<Response, S3Error> {
    let body = call.payload()?;
    let digest = Md5::digest(&body);
    if let Some(sent) = call.header("content-md5") {
        let sent = base64::engine::general_purpose::STANDARD.decode(sent).map_err(|_| S3Error::invalid_digest())?;
        if sent.as_slice() != digest.as_slice() {
            return Err(S3Error::bad_digest());
        }
    }
    let etag = quoted(&digest);
    let object = Object {
        body,
        etag: etag.clone(),
        content_type: call.header(header::CONTENT_TYPE).map(str::to_owned),
        last_modified: SystemTime::now(),
        metadata: call.metadata(),
    };
    bucket.write(&call.key, object, &condition(call)?)?;
    Ok((StatusCode::OK, [(header::ETAG, etag)]).into_response())
}

/// GetObject and HeadObject (whose body the server leaves out): the object with its headers; a `Range` of one
/// `bytes=` range answers 206 with that part, one that starts past the end 416 InvalidRange; a range of any other
/// form is ignored and the whole object answered, as HTTP allows (RFC 9110, "Range").
fn get_object(bucket: &Bucket, call: &Call) -> Result<Response, S3Error> {
    let object = lock(&bucket.objects).get(&call.key).cloned().ok_or_else(|| S3Error::no_such_key(&call.key))?;
    let size = object.body.len();
    let range = call.header(header::RANGE).and_then(|r| parse_range(r, size)).transpose()?;
    let (status, body) = match range {
        Some((start, end)) => (StatusCode::PARTIAL_CONTENT, object.body.slice(start..=end)),
        None => (StatusCode::OK, object.body.clone()),
    };
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    let content_type = object.content_type.as_deref().unwrap_or("binary/octet-stream");
    let text = |value: &str| HeaderValue::from_str(value).unwrap_or(HeaderValue::from_static(""));
    headers.insert(header::CONTENT_TYPE, text(content_type));
    headers.insert(header::ETAG, text(&object.etag));
    headers.insert(header::LAST_MODIFIED, text(&http_date(object.last_modified)));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Some((start, end)) = range {
        headers.insert(header::CONTENT_RANGE, text(&format!("bytes {start}-{end}/{size}")));
    }
    for (name, value) in &object.metadata {
        if let Ok(name) = header::HeaderName::from_bytes(name.as_bytes()) {
            headers.insert(name, value.clone());
        }
    }
    Ok(response)
}

/// The inclusive byte range `bytes=a-b`, `bytes=a-` or `bytes=-n` names in an object of `size` bytes; None for a
/// header of another form (ignored), InvalidRange for one that selects nothing.
fn parse_range(header: &str, size: usize) -> Option<Result<(usize, usize), S3Error>> {
    let spec = header.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (first, last) = spec.split_once('-')?;
    let (first, last) = (first.trim(), last.trim());
    let range = match (first.is_empty(), last.is_empty()) {
        (true, false) => {
            let suffix: usize = last.parse().ok()?;
            (suffix > 0 && size > 0).then(|| (size.saturating_sub(suffix), size - 1))
        }
        (false, _) => {
            let start: usize = first.parse().ok()?;
            let end: usize = if last.is_empty() { usize::MAX } else { last.parse().ok()? };
            if end < start {
                return None;
            }
            (start < size).then(|| (start, end.min(size - 1)))
        }
        (true, true) => return None,
    };
    Some(range.ok_or_else(|| S3Error::invalid_range(size)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ranges_select_as_http_says() {
        let range = |header: &str| parse_range(header, 10).map(|r| r.map_err(|e| e.code));
        assert_eq!(range("bytes=0-3"), Some(Ok((0, 3))));
        assert_eq!(range("bytes=5-"), Some(Ok((5, 9))));
        assert_eq!(range("bytes=-4"), Some(Ok((6, 9))));
        assert_eq!(range("bytes=8-100"), Some(Ok((8, 9))));
        assert_eq!(range("bytes=10-12"), Some(Err("InvalidRange")));
        assert_eq!(range("bytes=0-1,4-5"), None, "several ranges: the whole object");
        assert_eq!(range("items=0-1"), None);
    }
}
