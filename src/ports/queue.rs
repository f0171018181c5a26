//! The queue port: a received message, queue counts, the limits of one call, the `Queue` trait.

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

use super::port_error::QueueError;

/// One received message, as the worker sees it.
#[derive(Debug, Clone)]
pub struct Message {
    pub body: String,
    /// Opaque handle for change-visibility and delete; valid for this receive only.
    pub receipt: String,
    /// How many times the message has been received, this time included.
    pub receive_count: u32,
    /// When the message was first sent, milliseconds since the Unix epoch.
    pub sent_at_ms: i64,
}

/// Approximate message counts of a queue, as SQS reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueCounts {
    pub visible: u64,
    pub in_flight: u64,
    pub delayed: u64,
}

impl std::ops::Add for QueueCounts {
    type Output = QueueCounts;

    /// The counts of two queues taken together (a tier's lanes).
    fn add(self, other: QueueCounts) -> QueueCounts {
        QueueCounts {
            visible: self.visible + other.visible,
            in_flight: self.in_flight + other.in_flight,
            delayed: self.delayed + other.delayed,
        }
    }
}

/// Most messages one queue call carries: a receive, a send or a delete of many messages (SQS's limit for each of
/// ReceiveMessage, SendMessageBatch and DeleteMessageBatch, which the embedded queue keeps too).
pub const MAX_MESSAGES_PER_CALL: usize = 10;
/// Longest wait of one receive (SQS's longest long poll).
pub(crate) const MAX_RECEIVE_WAIT: Duration = Duration::from_secs(20);

/// The queues' maxReceiveCount unless one is configured (the template's redrive policy): the attempt with this
/// receive count is a message's last.
pub(crate) const DEFAULT_MAX_RECEIVE_COUNT: u32 = 3;

/// An SQS-like queue: at-least-once delivery, visibility timeout, dead-letter redrive.
#[async_trait]
pub trait Queue: Send + Sync {
    async fn send(&self, body: &str) -> Result<(), QueueError>;
    /// Sends every body in as few calls as the queue allows; one outcome per body, in order.
    async fn send_many(&self, bodies: &[String]) -> Vec<Result<(), QueueError>>;
    /// Waits up to `wait` for messages and returns at most `max` of them.
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Message>, QueueError>;
    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> Result<(), QueueError>;
    async fn delete(&self, receipt: &str) -> Result<(), QueueError>;
    /// Moves the message to the dead-letter queue with `ErrorReason` and `OriginalQueue`, then deletes it.
    async fn dead_letter(&self, message: &Message, reason: &str) -> Result<(), QueueError>;
    async fn counts(&self) -> Result<QueueCounts, QueueError>;
    /// Whether dropping a `receive` before it returns is harmless. Not for SQS: the response may already
    /// hold messages, which would then stay invisible for their visibility timeout. The worker lets such a
    /// receive finish when it stops, and gives back at once what it brought.
    fn receive_is_cancel_safe(&self) -> bool {
        false
    }

    /// Whether a receive is a network round trip (SQS) rather than a local call: a worker then receives a few
    /// messages ahead of its free slots.
    fn receive_is_remote(&self) -> bool {
        true
    }
}
