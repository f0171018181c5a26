//! S3's ListObjectsV2 (`GET /bucket?list-type=2`): the keys under a prefix in UTF-8 binary order, a page of at most
//! `max-keys` (1,000 at most and by default), continued by an opaque `continuation-token` or from `start-after`.

use std::ops::Bound;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;

use crate::errors::S3Error;
use crate::lock;
use crate::s3::{Bucket, Call};
use crate::wire::{iso_date, percent_encode, xml_escape};

/// The most keys one page lists (ListObjectsV2, "max-keys": "returns up to 1,000 key names").
const MAX_KEYS: usize = 1000;

/// ListObjectsV2's answer as S3 writes it (API reference, "ListObjectsV2", response syntax): IsTruncated and a
/// NextContinuationToken when more keys follow; with `encoding-type=url`, keys and prefixes URL-encoded.
pub(crate) fn list_objects_v2(bucket: &Bucket, call: &Call) -> Result<Response, S3Error> {
    if call.param("delimiter").is_some_and(|d| !d.is_empty()) {
        return Err(S3Error::not_implemented("ListObjectsV2 with a delimiter"));
    }
    let prefix = call.param("prefix").unwrap_or_default();
    let max_keys = match call.param("max-keys") {
        None => MAX_KEYS,
        Some(text) => text
            .parse::<usize>()
            .map_err(|_| {
                S3Error::invalid_argument("Provided max-keys not an integer or within integer range", "max-keys")
            })?
            .min(MAX_KEYS),
    };
    let url_encoded = match call.param("encoding-type") {
        None => false,
        Some("url") => true,
        Some(_) => {
            return Err(S3Error::invalid_argument("Invalid Encoding Method specified in Request", "encoding-type"));
        }
    };
    let token = call.param("continuation-token");
    let token_key = token
        .map(|token| {
            let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token).ok();
            decoded.and_then(|bytes| String::from_utf8(bytes).ok()).ok_or_else(|| {
                S3Error::invalid_argument("The continuation token provided is incorrect", "continuation-token")
            })
        })
        .transpose()?;
    // A continuation token goes on from where the last page ended; start-after only applies to a first page.
    let start_after = call.param("start-after");
    let after = token_key.as_deref().or(start_after);
    let from = match after {
        Some(after) if after >= prefix => Bound::Excluded(after),
        _ => Bound::Included(prefix),
    };
    let objects = lock(&bucket.objects);
    let mut under = objects.range::<str, _>((from, Bound::Unbounded)).take_while(|(key, _)| key.starts_with(prefix));
    let page: Vec<_> =
        under.by_ref().take(max_keys).map(|(key, object)| (key.clone(), std::sync::Arc::clone(object))).collect();
    let truncated = under.next().is_some();
    drop(objects);

    let text = |value: &str| if url_encoded { percent_encode(value) } else { xml_escape(value) };
    let mut xml = String::with_capacity(256 + page.len() * 200);
    xml.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    xml.push_str("<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
    xml.push_str(&format!("<Name>{}</Name><Prefix>{}</Prefix>", xml_escape(&call.bucket), text(prefix)));
    if let Some(start_after) = start_after {
        xml.push_str(&format!("<StartAfter>{}</StartAfter>", text(start_after)));
    }
    if let Some(token) = token {
        xml.push_str(&format!("<ContinuationToken>{}</ContinuationToken>", xml_escape(token)));
    }
    xml.push_str(&format!("<KeyCount>{}</KeyCount><MaxKeys>{max_keys}</MaxKeys>", page.len()));
    if url_encoded {
        xml.push_str("<EncodingType>url</EncodingType>");
    }
    xml.push_str(&format!("<IsTruncated>{truncated}</IsTruncated>"));
    if truncated {
        let last = page.last().map_or(after.unwrap_or(prefix), |(key, _)| key.as_str());
        let next = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(last);
        xml.push_str(&format!("<NextContinuationToken>{next}</NextContinuationToken>"));
    }
    for (key, object) in &page {
        xml.push_str(&format!(
            "<Contents><Key>{}</Key><LastModified>{}</LastModified><ETag>{}</ETag><Size>{}</Size><StorageClass>STANDARD</StorageClass></Contents>",
            text(key),
            iso_date(object.last_modified),
            xml_escape(&object.etag),
            object.body.len()
        ));
    }
    xml.push_str("</ListBucketResult>");
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, "application/xml")], xml).into_response())
}
