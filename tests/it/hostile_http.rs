//! The local HTTP server against hostile clients, over raw TCP: downloads that stop being read are dropped and
//! give their connections back; bodies that announce a large Content-Length and stall leave the body budget to
//! others; a body that keeps coming is taken whole however long it takes; a request that gives both
//! Transfer-Encoding and Content-Length is refused and its connection closed.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::http_limits::{EARLY, HEALTHZ, MARGIN, answers_healthz, read_healthz, read_until_closed, send, start};

/// A JSONL batch input file of about `bytes` bytes, in lines of about `line` bytes.
fn jsonl(bytes: usize, line: usize) -> Vec<u8> {
    let one = format!("{{\"pad\": \"{}\"}}\n", "x".repeat(line));
    one.repeat(bytes.div_ceil(one.len())).into_bytes()
}

/// POST /v1/files with OpenAI's multipart form (`purpose=batch`, `file`), its body written in pieces of `piece`
/// bytes `pause` apart; the whole answer, once the server closes the connection.
async fn upload(address: &str, content: &[u8], piece: usize, pause: Duration) -> String {
    let body = [
        &b"--form\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"[..],
        b"--form\r\nContent-Disposition: form-data; name=\"file\"; filename=\"input.jsonl\"\r\n\r\n",
        content,
        b"\r\n--form--\r\n",
    ]
    .concat();
    let head = format!(
        "POST /v1/files HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\
         Content-Type: multipart/form-data; boundary=form\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut stream = send(address, head.as_bytes()).await;
    for piece in body.chunks(piece) {
        if stream.write_all(piece).await.is_err() {
            break; // cut off: its answer says why
        }
        tokio::time::sleep(pause).await;
    }
    read_until_closed(stream, Duration::from_secs(60)).await.0
}

/// The JSON body of a whole answer.
fn json_body(answer: &str) -> serde_json::Value {
    let body = answer.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no body: {answer}")).1;
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Everything the server answers to `request` sent on a connection of its own, until it closes that connection.
async fn whole_answer(address: &str, request: &str) -> String {
    read_until_closed(send(address, request.as_bytes()).await, Duration::from_secs(10)).await.0
}

/// The status codes of the answers in `answer`, in order.
fn statuses(answer: &str) -> Vec<&str> {
    answer
        .match_indices("HTTP/1.1 ")
        .filter_map(|(at, _)| answer.get(at + 9..at + 12))
        .filter(|code| code.bytes().all(|b| b.is_ascii_digit()))
        .collect()
}

#[tokio::test]
async fn downloads_the_client_stops_reading_are_dropped_after_the_write_timeout_freeing_their_connections() {
    let data = tempfile::tempdir().unwrap();
    let flags =
        ["--http-max-connections", "8", "--http-write-timeout-seconds", "1", "--http-header-timeout-seconds", "60"];
    let (_router, address) = start("router", data.path(), &[], &flags).await;
    let content = jsonl(20 * 1024 * 1024, 1024 * 1024);
    let uploaded = upload(&address, &content, content.len(), Duration::ZERO).await;
    assert!(uploaded.starts_with("HTTP/1.1 200"), "{}", &uploaded[..uploaded.len().min(500)]);
    let id = json_body(&uploaded)["id"].as_str().unwrap().to_owned();

    // Eight downloads, one per connection the server may hold, each read as far as its status line, then never.
    let request = format!("GET /v1/files/{id}/content HTTP/1.1\r\nHost: test\r\n\r\n");
    let mut downloads = Vec::new();
    for _ in 0..8 {
        let mut stream = send(&address, request.as_bytes()).await;
        let mut status = [0; 12];
        stream.read_exact(&mut status).await.unwrap();
        assert_eq!(&status, b"HTTP/1.1 200");
        downloads.push(stream);
    }
    let stalled = Instant::now();
    let timeout = Duration::from_secs(1);
    let served = tokio::time::timeout(timeout + MARGIN, answers_healthz(&address)).await;
    let waited = stalled.elapsed();
    assert!(matches!(served, Ok(Some(()))), "GET /healthz not served in {waited:?} with eight downloads stalled");
    assert!(waited + EARLY >= timeout, "served after {waited:?}: the downloads held no connection");
    // Every stalled download gave its connection back: eight connections held open at once are each served (a
    // download still held would leave the eighth waiting). Only then are the stalled sockets read: one read earlier
    // would let its download go on.
    let mut held = Vec::new();
    let all_served = tokio::time::timeout(Duration::from_secs(30), async {
        for _ in 0..8 {
            let mut stream = send(&address, HEALTHZ).await;
            let answer = read_healthz(&mut stream).await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            held.push(stream);
        }
    })
    .await;
    assert!(all_served.is_ok(), "{} of 8 connections served: a stalled download kept its connection", held.len());
    drop(held);
    for download in downloads {
        let (received, _) = read_until_closed(download, MARGIN).await;
        assert!(received.len() < content.len(), "a stalled download came whole: {} bytes", received.len());
    }
}

#[tokio::test]
async fn bodies_that_announce_the_whole_budget_and_stall_leave_it_to_other_requests() {
    let data = tempfile::tempdir().unwrap();
    let (_router, address) = start("router", data.path(), &[], &[]).await;
    // 25 × 5 MiB + 3 × 1 MiB announced: the whole 128 MiB budget; one byte of each sent.
    let mut stalled = Vec::new();
    for length in std::iter::repeat_n(5 * 1024 * 1024, 25).chain(std::iter::repeat_n(1024 * 1024, 3)) {
        let head = format!(
            "POST /infer/batch HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n["
        );
        stalled.push(send(&address, head.as_bytes()).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await; // the server has read their headers

    let body = r#"{"prompt": "hello"}"#;
    let request = format!(
        "POST /infer HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (answer, _) = read_until_closed(send(&address, request.as_bytes()).await, MARGIN).await;
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    for mut stream in stalled {
        let mut buffer = [0; 64];
        let read = tokio::time::timeout(Duration::from_millis(20), stream.read(&mut buffer)).await;
        assert!(read.is_err(), "a stalled body was answered or closed: {read:?}");
    }
}

#[tokio::test]
async fn a_body_that_keeps_coming_for_longer_than_the_body_timeout_is_taken_whole() {
    let data = tempfile::tempdir().unwrap();
    let flags = ["--http-body-timeout-seconds", "1", "--http-header-timeout-seconds", "60"];
    let (_router, address) = start("router", data.path(), &[], &flags).await;
    // 480 KiB in 16 KiB pieces 100 ms apart: about 3 s, three body timeouts, never a pause of one.
    let content = jsonl(480 * 1024, 1024);
    let started = Instant::now();
    let answer = upload(&address, &content, 16 * 1024, Duration::from_millis(100)).await;
    assert!(started.elapsed() > Duration::from_secs(2), "sent in {:?}", started.elapsed());
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(json_body(&answer)["bytes"], content.len());
}

#[tokio::test]
async fn a_request_giving_both_transfer_encoding_and_content_length_gets_a_json_400_and_its_connection_closed() {
    let data = tempfile::tempdir().unwrap();
    let (_router, address) = start("router", data.path(), &[], &[]).await;
    let post = "POST /infer HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n";
    let chunked = "f\r\n{\"prompt\":\"hi\"}\r\n0\r\n\r\n";
    let pipelined = "GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n";
    let plain = r#"{"prompt": "hi"}"#;
    let plain = format!("{post}Content-Length: {}\r\n\r\n{plain}", plain.len());

    let both_orders = [
        format!("{post}Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n{chunked}{pipelined}"),
        format!("{post}Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n{chunked}{pipelined}"),
        format!("{plain}{post}Transfer-Encoding: chunked\r\nContent-Length: 99\r\n\r\n{chunked}{pipelined}"),
    ];
    for (case, request) in both_orders.into_iter().enumerate() {
        let answer = whole_answer(&address, &request).await;
        let expected: &[&str] = if case == 2 { &["202", "400"] } else { &["400"] };
        assert_eq!(statuses(&answer), expected, "case {case}, answered and then closed: {answer}");
        let refusal = &answer[answer.rfind("HTTP/1.1 400").unwrap()..];
        let error = json_body(refusal)["error"].as_str().unwrap().to_owned();
        assert!(error.starts_with("request: Transfer-Encoding and Content-Length"), "case {case}: {error}");
        assert!(refusal.to_ascii_lowercase().contains("content-type: application/json"), "case {case}: {refusal}");
    }

    let chunked_alone = format!("{post}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n{chunked}");
    let answer = whole_answer(&address, &chunked_alone).await;
    assert_eq!(statuses(&answer), ["202"], "{answer}");
}
