//! A request body must keep coming: one that pauses, or comes slower than a minimum rate, for longer than the
//! body timeout fails, so a client sending half a body, or trickling it, cannot hold its connection (nor the
//! memory its bytes take); a body that keeps coming is taken whole however long it takes.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::{Body, Bytes};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// How fast a body must come.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyPace {
    /// Longest a body may fall behind: a pause this long, or this long below `min_rate`, cuts it.
    pub(crate) timeout: Duration,
    /// Bytes a second a body must average, with `timeout` of slack; 0 asks for no rate, only that it not pause.
    pub(crate) min_rate: u64,
}

impl BodyPace {
    /// The deadline once `bytes` more have come at `now`: `bytes` at `min_rate` later than `deadline`, and never
    /// more than `timeout` ahead of `now`.
    fn next_deadline(&self, deadline: Instant, bytes: usize, now: Instant) -> Instant {
        let latest = now + self.timeout;
        if self.min_rate == 0 {
            return latest;
        }
        let earned = Duration::from_secs_f64(bytes as f64 / self.min_rate as f64);
        deadline.checked_add(earned).map_or(latest, |paced| paced.min(latest))
    }
}

/// A request body that fails once it falls behind its pace. Time the handler spends between taking one frame and
/// asking for the next is the server's, not the client's, and does not count.
pub(crate) struct PacedBody {
    body: Body,
    pace: BodyPace,
    deadline: Pin<Box<Sleep>>,
    /// Since when the handler has not asked for a frame: from the body's start until it first asks, and from
    /// each frame it takes until it asks for the next.
    handed_at: Option<Instant>,
}

impl PacedBody {
    pub(crate) fn new(body: Body, pace: BodyPace) -> Self {
        let deadline = Box::pin(tokio::time::sleep(pace.timeout));
        PacedBody { body, pace, deadline, handed_at: Some(Instant::now()) }
    }
}

/// The error of a body that fell behind its pace.
#[derive(Debug)]
struct BodyFellBehind(BodyPace);

impl std::error::Error for BodyFellBehind {}

impl std::fmt::Display for BodyFellBehind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let BodyPace { timeout, min_rate } = self.0;
        match min_rate {
            0 => write!(f, "no byte of it came for {} s", timeout.as_secs()),
            rate => write!(f, "it came slower than {rate} bytes/s, or not at all, for {} s", timeout.as_secs()),
        }
    }
}

impl HttpBody for PacedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if let Some(handed_at) = this.handed_at.take() {
            let deadline = this.deadline.deadline() + handed_at.elapsed();
            this.deadline.as_mut().reset(deadline);
        }
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let now = Instant::now();
                if let Some(data) = frame.data_ref() {
                    let deadline = this.pace.next_deadline(this.deadline.deadline(), data.len(), now);
                    this.deadline.as_mut().reset(deadline);
                }
                this.handed_at = Some(now);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(other) => Poll::Ready(other),
            Poll::Pending => {
                ready!(this.deadline.as_mut().poll(cx));
                Poll::Ready(Some(Err(axum::Error::new(BodyFellBehind(this.pace)))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
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
        assert_eq!(
            PACE.next_deadline(deadline, 1_000_000, now),
            now + PACE.timeout,
            "never more than the timeout ahead"
        );
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
        assert!(
            cut_after >= PACE.timeout && cut_after < PACE.timeout + Duration::from_secs(1),
            "cut after {cut_after:?}"
        );
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
}
