//! The small pieces of HTTP and XML text both services share: percent-coding, query strings, XML escaping,
//! aws-chunked bodies, AWS's date formats and MD5 digests.

use std::time::SystemTime;

use md5::{Digest, Md5};

/// `%XX` escapes decoded (invalid ones kept as they are); a `+` stays a `+`, as SigV4 clients escape spaces as `%20`.
pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%').then(|| text.get(i + 1..i + 3)).flatten();
        match escaped.and_then(|hex| u8::from_str_radix(hex, 16).ok()) {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// URL-encodes a key for `encoding-type=url` listings: everything but unreserved characters and `/`.
pub(crate) fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~/".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A query string's parameters, decoded, in order; `?uploads` gives `("uploads", "")`.
pub(crate) fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    let pairs = query.unwrap_or_default().split('&').filter(|pair| !pair.is_empty());
    pairs
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(name), percent_decode(value))
        })
        .collect()
}

pub(crate) fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// The payload of an aws-chunked body (SigV4 streaming: `<hex size>[;chunk-signature=…]\r\n<bytes>\r\n` until a
/// zero-size chunk, then trailers such as a checksum); None when it is not well formed.
pub(crate) fn aws_chunked_payload(body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(body.len());
    let mut rest = body;
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let header = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size = usize::from_str_radix(header.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size..)?.strip_prefix(b"\r\n")?;
    }
}

/// Milliseconds since the Unix epoch (SQS's timestamps).
pub(crate) fn epoch_millis(at: SystemTime) -> i64 {
    at.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// An HTTP date (`Last-Modified`): `Tue, 15 Nov 1994 08:12:31 GMT`.
pub(crate) fn http_date(at: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(at).format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

/// An ISO 8601 timestamp with milliseconds, as S3 lists `LastModified`: `2009-10-12T17:50:30.000Z`.
pub(crate) fn iso_date(at: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(at).format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

pub(crate) fn md5_hex(bytes: &[u8]) -> String {
    hex::encode(Md5::digest(bytes))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn percent_coding_round_trips_a_key() {
        let key = "results/a b+c/ü.json";
        assert_eq!(percent_encode(key), "results/a%20b%2Bc/%C3%BC.json");
        assert_eq!(percent_decode(&percent_encode(key)), key);
        assert_eq!(percent_decode("100%"), "100%");
    }

    #[test]
    fn an_aws_chunked_body_gives_its_payload() {
        let body = b"5;chunk-signature=abc\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32:AAAA\r\n\r\n";
        assert_eq!(aws_chunked_payload(body).as_deref(), Some(&b"hello world"[..]));
        assert_eq!(aws_chunked_payload(b"5\r\nhel"), None);
    }

    #[test]
    fn query_pairs_decode_names_and_values() {
        let pairs = query_pairs(Some("list-type=2&prefix=a%2Fb&uploads"));
        assert_eq!(pairs[1], ("prefix".to_owned(), "a/b".to_owned()));
        assert_eq!(pairs[2], ("uploads".to_owned(), String::new()));
    }
}
