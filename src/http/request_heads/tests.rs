//! A head giving both lengths is found in either order, however the bytes are split, after any bodies before
//! it (Content-Length or chunked, with extensions and trailers), and only there: not in a body's bytes.

use super::RequestHeads;

const BOTH: &str = "POST /infer HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n";

/// The index `follow` reports for `bytes` fed whole, and fed a byte at a time (which must agree).
fn both_lengths_at(bytes: &str) -> Option<u64> {
    let whole = RequestHeads::default().follow(bytes.as_bytes());
    let mut heads = RequestHeads::default();
    let bytewise = bytes.as_bytes().chunks(1).find_map(|byte| heads.follow(byte));
    assert_eq!(whole, bytewise, "fed whole and a byte at a time: {bytes:?}");
    whole
}

#[test]
fn a_head_giving_both_lengths_is_found_in_either_order_and_in_any_case() {
    assert_eq!(both_lengths_at(BOTH), Some(0));
    let length_first = "POST / HTTP/1.1\r\ncontent-length: 4\r\nTRANSFER-ENCODING: chunked\r\n\r\n0\r\n\r\n";
    assert_eq!(both_lengths_at(length_first), Some(0));
    let unreadable_length = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: lots\r\n\r\n";
    assert_eq!(both_lengths_at(unreadable_length), Some(0), "hyper does not read a length after the encoding");
}

#[test]
fn heads_after_bodies_of_either_framing_are_counted_in_order() {
    let get = "\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    let sized = "POST /infer HTTP/1.1\r\nContent-Length: 16\r\n\r\n{\"prompt\": \"hi\"}";
    let chunked = "POST /infer HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n\
                   5;name=value\r\n{\"pro\r\n0b\r\nmpt\": \"hi\"}\r\n0\r\nExpires: never\r\n\r\n";
    assert_eq!(both_lengths_at(&format!("{get}{sized}{chunked}{BOTH}")), Some(3));
    assert_eq!(both_lengths_at(&format!("{get}{sized}{chunked}")), None);
}

#[test]
fn field_lines_inside_a_body_are_not_a_head() {
    let inner = "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n";
    let sized = format!("POST /v1/files HTTP/1.1\r\nContent-Length: {}\r\n\r\n{inner}", inner.len());
    let chunked = format!(
        "POST /v1/files HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{inner}\r\n0\r\n\r\n",
        inner.len()
    );
    assert_eq!(both_lengths_at(&format!("{sized}{chunked}")), None);
    assert_eq!(both_lengths_at(&format!("{sized}{chunked}{BOTH}")), Some(2));
}

#[test]
fn bytes_hyper_refuses_end_the_following() {
    let two_lengths = "POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc";
    assert_eq!(both_lengths_at(&format!("{two_lengths}{BOTH}")), None);
    let long_value = format!("POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n", "0".repeat(2000));
    assert_eq!(both_lengths_at(&format!("{long_value}{BOTH}")), None, "a length too long to read is not guessed");
    let long_other = format!("GET / HTTP/1.1\r\nCookie: {}\r\n\r\n", "c".repeat(5000));
    assert_eq!(both_lengths_at(&format!("{long_other}{BOTH}")), Some(1), "other long lines are only skipped");
}
