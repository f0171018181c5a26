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
    pub fn new(body: Body, pace: BodyPace) -> Self {
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
mod tests;
