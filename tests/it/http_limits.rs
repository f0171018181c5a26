//! The local HTTP server against slow and idle clients, over raw TCP: half a header, nothing, an idle keep-alive
//! connection, half a body and a trickled body are each cut off after their timeout; a connection cap holds the
//! next connection unaccepted; SIGTERM with a connection held open ends `gpuinfer dev` by the shutdown deadline.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::engine_process::EngineProcess;
use crate::support::process::ChildProcess;
use crate::support::{eventually, free_port};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Time a closing or an exit may take beyond its deadline on a busy test machine.
pub(crate) const MARGIN: Duration = Duration::from_secs(4);
/// A timer may fire this much earlier than the test's own clock says it should.
pub(crate) const EARLY: Duration = Duration::from_millis(200);
pub(crate) const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n";

/// `gpuinfer <command>` on a free loopback port (embedded backends in `data`, no classifier) with `flags`, once
/// it answers; and its address.
pub(crate) async fn start(command: &str, data: &Path, extra: &[&str], flags: &[&str]) -> (ChildProcess, String) {
    let address = format!("127.0.0.1:{}", free_port());
    let data_dir = data.display().to_string();
    let mut args = vec![command, "--listen", &address, "--data-dir", &data_dir, "--classifier", "none"];
    if command == "router" {
        args.push("--embedded-queues");
    }
    args.extend(extra.iter().chain(flags));
    let process = ChildProcess::gpuinfer(&args, &[], &data.join("log"));
    eventually(Duration::from_secs(20), "the server to answer", || answers_healthz(&address)).await;
    (process, address)
}

/// Whether GET /healthz on a connection of its own (closed after) gets a 200.
pub(crate) async fn answers_healthz(address: &str) -> Option<()> {
    let mut stream = TcpStream::connect(address).await.ok()?;
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").await.ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.ok()?;
    answer.starts_with("HTTP/1.1 200").then_some(())
}

/// Sends `bytes` on a new connection.
pub(crate) async fn send(address: &str, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    stream
}

/// Reads until the server closes the connection; what it sent, and when it closed. Panics if still open after `limit`.
pub(crate) async fn read_until_closed(mut stream: TcpStream, limit: Duration) -> (String, Duration) {
    let started = Instant::now();
    let mut received = Vec::new();
    let read = tokio::time::timeout(limit, async {
        let mut buffer = [0; 4096];
        while let Ok(n @ 1..) = stream.read(&mut buffer).await {
            received.extend_from_slice(&buffer[..n]);
        }
    });
    assert!(read.await.is_ok(), "the connection is still open after {limit:?}");
    (String::from_utf8_lossy(&received).into_owned(), started.elapsed())
}

/// Reads one GET /healthz answer from a kept-alive connection.
pub(crate) async fn read_healthz(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let mut buffer = [0; 4096];
    while !answer.ends_with(br#"{"status":"ok"}"#) {
        let n = stream.read(&mut buffer).await.unwrap();
        assert!(n > 0, "closed before the answer was whole: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buffer[..n]);
    }
    String::from_utf8(answer).unwrap()
}

fn assert_closed_after(what: &str, closed_after: Duration, timeout: Duration) {
    assert!(
        closed_after + EARLY >= timeout && closed_after <= timeout + MARGIN,
        "{what}: closed after {closed_after:?}, the timeout is {timeout:?}"
    );
}

#[tokio::test]
async fn half_a_header_nothing_at_all_and_an_idle_keep_alive_connection_are_closed_after_the_header_timeout() {
    let data = tempfile::tempdir().unwrap();
    let (_router, address) = start("router", data.path(), &[], &["--http-header-timeout-seconds", "1"]).await;
    let timeout = Duration::from_secs(1);
    let limit = timeout + MARGIN;
    let (half_header, nothing, idle) = tokio::join!(
        async { read_until_closed(send(&address, b"POST /infer HTTP/1.1\r\nHost: te").await, limit).await },
        async { read_until_closed(send(&address, b"").await, limit).await },
        async { read_until_closed(send(&address, HEALTHZ).await, limit).await },
    );
    assert_eq!(half_header.0, "", "no answer to half a header");
    assert_closed_after("half a header", half_header.1, timeout);
    assert_eq!(nothing.0, "");
    assert_closed_after("nothing sent", nothing.1, timeout);
    assert!(idle.0.starts_with("HTTP/1.1 200") && idle.0.ends_with(r#"{"status":"ok"}"#), "{}", idle.0);
    assert_closed_after("idle after its answer", idle.1, timeout);
}

#[tokio::test]
async fn half_a_body_and_a_trickled_body_get_a_json_400_after_the_body_timeout_and_are_closed() {
    let data = tempfile::tempdir().unwrap();
    let flags = ["--http-body-timeout-seconds", "1", "--http-header-timeout-seconds", "60"];
    let (_router, address) = start("router", data.path(), &[], &flags).await;
    let timeout = Duration::from_secs(1);
    let head = b"POST /infer HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n";
    let trickled = async {
        let mut stream = send(&address, head).await;
        // One byte every 200 ms: never a pause of the timeout, but far below the minimum rate.
        let started = Instant::now();
        while stream.write_all(b" ").await.is_ok() && started.elapsed() < timeout + MARGIN {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        started.elapsed()
    };
    let (half, trickled) = tokio::join!(
        async {
            read_until_closed(send(&address, &[&head[..], br#"{"prompt": "#].concat()).await, timeout + MARGIN).await
        },
        trickled,
    );
    assert_closed_after("half a body", half.1, timeout);
    assert!(half.0.starts_with("HTTP/1.1 400"), "{}", half.0);
    let body = half.0.split_once("\r\n\r\n").unwrap().1;
    let body: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(body["error"], "body: could not be read (it came slower than 65536 bytes/s, or not at all, for 1 s)");
    assert_closed_after("a trickled body", trickled, timeout);
}

/// A multipart upload cut for falling behind its pace is refused saying so, as a JSON body is, in OpenAI's shape:
/// stopped before its first field, and stopped inside its file.
#[tokio::test]
async fn a_multipart_upload_cut_by_the_body_pace_is_refused_naming_the_pace() {
    let data = tempfile::tempdir().unwrap();
    let flags = ["--http-body-timeout-seconds", "1", "--http-header-timeout-seconds", "60"];
    let (_router, address) = start("router", data.path(), &[], &flags).await;
    let head = b"POST /v1/files HTTP/1.1\r\nHost: test\r\nContent-Type: multipart/form-data; boundary=XyZ\r\n\
                 Content-Length: 100000\r\n\r\n";
    let fields = b"--XyZ\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--XyZ\r\n\
                   Content-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n\r\n{\"custom_id\"";
    for sent in [&head[..], &[&head[..], &fields[..]].concat()] {
        let (answer, _) = read_until_closed(send(&address, sent).await, Duration::from_secs(1) + MARGIN).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        let body: serde_json::Value = serde_json::from_str(answer.split_once("\r\n\r\n").unwrap().1).unwrap();
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("came slower than 65536 bytes/s, or not at all, for 1 s"), "{body}");
    }
}

#[tokio::test]
async fn with_a_cap_of_two_connections_a_third_is_served_only_once_one_closes() {
    let data = tempfile::tempdir().unwrap();
    let flags = ["--http-max-connections", "2", "--http-header-timeout-seconds", "60"];
    let (_router, address) = start("router", data.path(), &[], &flags).await;
    let mut first = send(&address, HEALTHZ).await;
    let mut second = send(&address, HEALTHZ).await;
    read_healthz(&mut first).await;
    read_healthz(&mut second).await;

    let mut third = send(&address, HEALTHZ).await;
    let waiting = tokio::time::timeout(Duration::from_secs(1), read_healthz(&mut third)).await;
    assert!(waiting.is_err(), "the third connection was served while two were open: {waiting:?}");
    drop(first);
    let answer = tokio::time::timeout(MARGIN, read_healthz(&mut third)).await.expect("served once one closed");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn sigterm_ends_gpuinfer_dev_by_the_shutdown_deadline_with_half_a_header_held_open() {
    let engine = EngineProcess::start(&[]);
    let data = tempfile::tempdir().unwrap();
    let extra = ["--small-engine-url", &engine.url];
    let flags = ["--http-shutdown-seconds", "1", "--http-header-timeout-seconds", "60"];
    let (mut dev, address) = start("dev", data.path(), &extra, &flags).await;
    let held = send(&address, b"POST /infer HTTP/1.1\r\nHost: te").await;
    tokio::time::sleep(Duration::from_millis(200)).await; // the server has read those bytes

    let signaled = Instant::now();
    dev.signal("TERM");
    let status = dev.exited_within(Duration::from_secs(1) + MARGIN).await;
    let exited_after = signaled.elapsed();
    assert!(status.success(), "{status}\n{}", dev.log());
    assert!(exited_after + EARLY >= Duration::from_secs(1), "exited after {exited_after:?}, before the deadline");
    let log = dev.log();
    assert!(log.contains("HTTP shutdown deadline passed") && log.contains("connections=1"), "{log}");
    drop(held);
}

/// Every refusal the API gives is JSON, also those the HTTP layer makes before a request reaches the API.
#[tokio::test]
async fn refusals_made_before_the_api_are_json_too() {
    let data = tempfile::tempdir().unwrap();
    let (_router, address) = start("router", data.path(), &[], &[]).await;
    let many_headers: String = (0..120).map(|i| format!("x-header-{i}: {i}\r\n")).collect();
    let cases = [
        (format!("GET /healthz HTTP/1.1\r\nHost: test\r\n{many_headers}\r\n"), "431", "headers: too large or too many"),
        (format!("GET /{} HTTP/1.1\r\nHost: test\r\n\r\n", "a".repeat(70 * 1024)), "414", "path: the request target"),
        (
            "POST /infer HTTP/1.1\r\nHost: test\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}".into(),
            "400",
            "request: not a valid HTTP/1.1 request",
        ),
        ("NOT A REQUEST\r\n\r\n".into(), "400", "request: not a valid HTTP/1.1 request"),
    ];
    for (request, status, error) in cases {
        let stream = send(&address, request.as_bytes()).await;
        let (answer, _) = read_until_closed(stream, Duration::from_secs(10)).await;
        assert!(answer.starts_with(&format!("HTTP/1.1 {status} ")), "{status}: {answer}");
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
        let body: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{status}: {e}: {body:?}"));
        assert!(body["error"].as_str().unwrap().starts_with(error), "{status}: {body}");
    }
}
