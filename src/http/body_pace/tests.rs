//! A body's deadline: each byte buys time at the minimum rate, never more than the timeout ahead; a pause cuts
//! it; the handler's own time between frames does not count. On tokio's paused clock.

use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body_util::BodyExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{BodyPace, PacedBody};

const PACE: BodyPace = BodyPace { timeout: Duration::from_secs(10), min_rate: 1000 };

/// A paced body fed by the returned sender.
fn paced(pace: BodyPace) -> (mpsc::UnboundedSender<&'static [u8]>, PacedBody) {
    let (sender, receiver) = mpsc::unbounded_channel();
    let chunks = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let chunk = receiver.recv().await?;
        Some((Ok::<_, std::io::Error>(Bytes::from_static(chunk)), receiver))
    });
    (sender, PacedBody::new(Body::from_stream(chunks), pace))
}

#[tokio::test(start_paused = true)]
async fn bytes_buy_time_at_the_minimum_rate_up_to_the_timeout_ahead() {
    let now = Instant::now();
    let deadline = now + Duration::from_secs(5);
    assert_eq!(PACE.next_deadline(deadline, 2000, now), deadline + Duration::from_secs(2));
    assert_eq!(PACE.next_deadline(deadline, 1_000_000, now), now + PACE.timeout, "never more than the timeout ahead");
    let no_rate = BodyPace { min_rate: 0, ..PACE };
    assert_eq!(no_rate.next_deadline(deadline, 1, now), now + PACE.timeout, "without a rate, any byte will do");
}

#[tokio::test(start_paused = true)]
async fn a_body_that_pauses_for_the_timeout_fails_saying_why() {
    let (sender, mut body) = paced(PACE);
    sender.send(b"{\"prompt\": ").unwrap();
    assert!(body.frame().await.unwrap().is_ok());
    let started = Instant::now();
    let error = body.frame().await.unwrap().unwrap_err();
    assert_eq!(started.elapsed(), PACE.timeout);
    assert_eq!(error.to_string(), "it came slower than 1000 bytes/s, or not at all, for 10 s");
}

#[tokio::test(start_paused = true)]
async fn a_trickle_below_the_rate_fails_though_it_never_pauses_for_long() {
    let (sender, mut body) = paced(PACE);
    let started = Instant::now();
    let trickle = tokio::spawn(async move {
        while sender.send(b" ").is_ok() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    while body.frame().await.unwrap().is_ok() {}
    let cut_after = started.elapsed();
    assert!(cut_after >= PACE.timeout && cut_after < PACE.timeout + Duration::from_secs(1), "cut after {cut_after:?}");
    trickle.abort();
}

#[tokio::test(start_paused = true)]
async fn time_the_handler_takes_between_frames_is_not_the_clients() {
    let (sender, mut body) = paced(PACE);
    sender.send(b"{\"prompt\": ").unwrap();
    let client = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(65)).await; // 5 s after the handler asks again
        sender.send(b"\"hi\"}").unwrap();
    });
    tokio::time::sleep(Duration::from_secs(30)).await; // the handler busy before it reads
    assert!(body.frame().await.unwrap().is_ok());
    tokio::time::sleep(Duration::from_secs(30)).await; // and busy with the first frame
    assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), "\"hi\"}");
    client.await.unwrap();
    assert!(body.frame().await.is_none());
}
