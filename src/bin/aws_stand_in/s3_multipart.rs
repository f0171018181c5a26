//! S3's multipart uploads, as the project's large writes use them: CreateMultipartUpload, UploadPart,
//! CompleteMultipartUpload (parts in ascending order, each but the last at least 5 MiB) and AbortMultipartUpload.

use std::collections::BTreeMap;
use std::time::SystemTime;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use md5::{Digest, Md5};

use crate::errors::S3Error;
use crate::lock;
use crate::s3::{Bucket, Call, Object, condition, quoted};
use crate::wire::xml_escape;

/// The smallest part but the last (CompleteMultipartUpload, EntityTooSmall: "each part must be at least 5 MB").
const MIN_PART_BYTES: usize = 5 * 1024 * 1024;
/// Part numbers run from 1 to 10,000 (UploadPart, "partNumber").
const MAX_PART_NUMBER: u32 = 10_000;

/// An upload in progress: its key, what the object will carry and the parts sent so far.
#[derive(Debug)]
pub(crate) struct Upload {
    key: String,
    content_type: Option<String>,
    metadata: Vec<(String, HeaderValue)>,
    /// Part number → its bytes and MD5 digest.
    parts: BTreeMap<u32, (Bytes, [u8; 16])>,
}

fn xml(body: String) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/xml")], body).into_response()
}

/// CreateMultipartUpload (`POST /bucket/key?uploads`): a new upload id.
pub(crate) fn create(bucket: &Bucket, call: &Call) -> Result<Response, S3Error> {
    let upload_id = uuid::Uuid::new_v4().simple().to_string();
    let upload = Upload {
        key: call.key.clone(),
        content_type: call.header(header::CONTENT_TYPE).map(str::to_owned),
        metadata: call.metadata(),
        parts: BTreeMap::new(),
    };
    lock(&bucket.uploads).insert(upload_id.clone(), upload);
    Ok(xml(format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<InitiateMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Bucket>{}</Bucket><Key>{}</Key><UploadId>{upload_id}</UploadId></InitiateMultipartUploadResult>",
        xml_escape(&call.bucket),
        xml_escape(&call.key)
    )))
}

/// The upload id of a call, and NoSuchUpload unless it is an upload of this key in progress.
fn upload_id<'a>(bucket: &Bucket, call: &'a Call) -> Result<&'a str, S3Error> {
    let id = call.param("uploadId").unwrap_or_default();
    match lock(&bucket.uploads).get(id) {
        Some(upload) if upload.key == call.key => Ok(id),
        _ => Err(S3Error::no_such_upload(id)),
    }
}

/// UploadPart (`PUT /bucket/key?partNumber=n&uploadId=…`): stores the part (a part sent again replaces it),
/// answers its ETag.
pub(crate) fn upload_part(bucket: &Bucket, call: &Call) -> Result<Response, S3Error> {
    let number =
        call.param("partNumber").and_then(|n| n.parse::<u32>().ok()).filter(|n| (1..=MAX_PART_NUMBER).contains(n));
    let number = number.ok_or_else(|| {
        S3Error::invalid_argument("Part number must be an integer between 1 and 10000, inclusive", "partNumber")
    })?;
    let id = upload_id(bucket, call)?;
    let body = call.payload()?;
    let digest: [u8; 16] = Md5::digest(&body).into();
    let mut uploads = lock(&bucket.uploads);
    let upload = uploads.get_mut(id).ok_or_else(|| S3Error::no_such_upload(id))?;
    upload.parts.insert(number, (body, digest));
    Ok((StatusCode::OK, [(header::ETAG, quoted(&digest))]).into_response())
}

/// CompleteMultipartUpload (`POST /bucket/key?uploadId=…` with the parts listed): the object of the listed parts
/// in order, its ETag the MD5 of their MD5s with `-<parts>`; `If-None-Match: *` is honoured as for PutObject.
pub(crate) fn complete(bucket: &Bucket, call: &Call) -> Result<Response, S3Error> {
    let id = upload_id(bucket, call)?;
    let listed = String::from_utf8_lossy(&call.body);
    let mut wanted = Vec::new();
    for part in elements(&listed, "Part") {
        let number = elements(part, "PartNumber").first().and_then(|n| n.trim().parse::<u32>().ok());
        let etag = elements(part, "ETag").first().map(|e| unescape(e).trim().trim_matches('"').to_ascii_lowercase());
        wanted.push((number.ok_or_else(S3Error::malformed_xml)?, etag));
    }
    if wanted.is_empty() {
        return Err(S3Error::malformed_xml());
    }
    if wanted.windows(2).any(|pair| pair[0].0 >= pair[1].0) {
        return Err(S3Error::invalid_part_order());
    }
    let condition = condition(call)?;
    let mut uploads = lock(&bucket.uploads);
    let upload = uploads.get(id).ok_or_else(|| S3Error::no_such_upload(id))?;
    let (mut body, mut digests) = (BytesMut::new(), Md5::new());
    for (at, (number, etag)) in wanted.iter().enumerate() {
        let (bytes, digest) = upload.parts.get(number).ok_or_else(|| S3Error::invalid_part(*number))?;
        if etag.as_ref().is_some_and(|etag| *etag != hex::encode(digest)) {
            return Err(S3Error::invalid_part(*number));
        }
        if at + 1 < wanted.len() && bytes.len() < MIN_PART_BYTES {
            return Err(S3Error::entity_too_small(*number));
        }
        body.extend_from_slice(bytes);
        digests.update(digest);
    }
    let etag = format!("\"{}-{}\"", hex::encode(digests.finalize()), wanted.len());
    let object = Object {
        body: body.freeze(),
        etag: etag.clone(),
        content_type: upload.content_type.clone(),
        last_modified: SystemTime::now(),
        metadata: upload.metadata.clone(),
    };
    bucket.write(&call.key, object, &condition)?;
    uploads.remove(id);
    Ok(xml(format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CompleteMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Location>/{bucket}/{key}</Location><Bucket>{bucket}</Bucket><Key>{key}</Key><ETag>{}</ETag></CompleteMultipartUploadResult>",
        xml_escape(&etag),
        bucket = xml_escape(&call.bucket),
        key = xml_escape(&call.key)
    )))
}

/// AbortMultipartUpload (`DELETE /bucket/key?uploadId=…`): drops the upload and its parts.
pub(crate) fn abort(bucket: &Bucket, call: &Call) -> Result<Response, S3Error> {
    let id = upload_id(bucket, call)?;
    lock(&bucket.uploads).remove(id);
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The text inside each `<tag>…</tag>` (or `<tag attributes>…</tag>`) of a small XML document, in order.
pub(crate) fn elements<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}"), format!("</{tag}>"));
    let mut found = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        // `<Part>` must not match `<PartNumber>`: the tag name ends at `>`, a space or `/`.
        let Some(end_of_tag) = after.find('>') else { break };
        if !matches!(after.chars().next(), Some('>' | ' ' | '/')) {
            rest = after;
            continue;
        }
        let inner = &after[end_of_tag + 1..];
        let Some(end) = inner.find(&close) else { break };
        found.push(&inner[..end]);
        rest = &inner[end + close.len()..];
    }
    found
}

fn unescape(text: &str) -> String {
    let replaced = text.replace("&quot;", "\"").replace("&apos;", "'").replace("&lt;", "<").replace("&gt;", ">");
    replaced.replace("&amp;", "&")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn elements_are_found_by_their_whole_tag_name() {
        let listed = "<CompleteMultipartUpload><Part><ETag>&quot;ab&quot;</ETag><PartNumber>1</PartNumber></Part>\
                      <Part><PartNumber>2</PartNumber></Part></CompleteMultipartUpload>";
        let parts = elements(listed, "Part");
        assert_eq!(parts.len(), 2);
        assert_eq!(elements(parts[0], "PartNumber"), ["1"]);
        assert_eq!(unescape(elements(parts[0], "ETag")[0]), "\"ab\"");
    }
}
