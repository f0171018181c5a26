//! A write the client takes nothing of for the timeout fails; a client that reads slowly but keeps reading is
//! served. On tokio's paused clock, over an in-memory pipe of 64 bytes.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use super::WriteDeadline;

const TIMEOUT: Duration = Duration::from_secs(10);

#[tokio::test(start_paused = true)]
async fn a_write_the_client_takes_nothing_of_fails_after_the_timeout() {
    let (server, _client) = tokio::io::duplex(64);
    let mut server = WriteDeadline::new(server, TIMEOUT);
    let started = Instant::now();
    let error = server.write_all(&[b'x'; 1024]).await.unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
    assert_eq!(started.elapsed(), TIMEOUT);
}

#[tokio::test(start_paused = true)]
async fn a_client_that_reads_slowly_but_keeps_reading_is_served_whole() {
    let (server, mut client) = tokio::io::duplex(64);
    let mut server = WriteDeadline::new(server, TIMEOUT);
    let reader = tokio::spawn(async move {
        let mut received = Vec::new();
        let mut buffer = [0; 16];
        while let Ok(n @ 1..) = client.read(&mut buffer).await {
            received.extend_from_slice(&buffer[..n]);
            tokio::time::sleep(TIMEOUT / 2).await;
        }
        received.len()
    });
    let started = Instant::now();
    server.write_all(&[b'x'; 1024]).await.unwrap();
    server.shutdown().await.unwrap();
    assert!(started.elapsed() > TIMEOUT * 10, "the client took {:?}", started.elapsed());
    assert_eq!(reader.await.unwrap(), 1024);
}
