//! Only hyper's bodiless refusals are rewritten; every other answer passes as it is.

use super::with_json_body;

#[test]
fn a_bodiless_refusal_gets_the_apis_json_error() {
    let head =
        b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
    let answer = String::from_utf8(with_json_body(head).unwrap()).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\n"));
    assert!(
        head.contains("content-type: application/json") && head.contains(&format!("content-length: {}", body.len()))
    );
    assert_eq!(body, r#"{"error":"headers: too large or too many"}"#);
}

#[test]
fn answers_with_a_body_or_another_status_pass_unchanged() {
    let api_refusal = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n";
    assert_eq!(with_json_body(api_refusal), None, "the API's own 400 has a body already");
    assert_eq!(with_json_body(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n"), None);
    assert_eq!(with_json_body(b"{\"status\":\"ok\"}"), None, "a body written on its own");
}
