//! A tier's high or batch lane without a queue of its own (the AWS sample's one queue per tier): sends go to the
//! normal queue, and it never receives, so each message is received and counted once, on the normal lane.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::ports::{Message, Queue, QueueCounts, QueueError};

/// It hands out no message, so no receipt of its own can be valid: receipt calls answer `ReceiptExpired`.
pub(crate) struct SharedLane {
    normal: Arc<dyn Queue>,
}

impl SharedLane {
    pub(crate) fn new(normal: Arc<dyn Queue>) -> Self {
        SharedLane { normal }
    }
}

#[async_trait]
impl Queue for SharedLane {
    async fn send(&self, body: &str) -> Result<(), QueueError> {
        self.normal.send(body).await
    }

    async fn send_many(&self, bodies: &[String]) -> Vec<Result<(), QueueError>> {
        self.normal.send_many(bodies).await
    }

    /// An empty long poll: what was sent here is received on the normal lane.
    async fn receive(&self, _max: usize, wait: Duration) -> Result<Vec<Message>, QueueError> {
        tokio::time::sleep(wait).await;
        Ok(Vec::new())
    }

    async fn change_visibility(&self, _receipt: &str, _timeout: Duration) -> Result<(), QueueError> {
        Err(QueueError::ReceiptExpired)
    }

    async fn delete(&self, _receipt: &str) -> Result<(), QueueError> {
        Err(QueueError::ReceiptExpired)
    }

    async fn dead_letter(&self, _message: &Message, _reason: &str) -> Result<(), QueueError> {
        Err(QueueError::ReceiptExpired)
    }

    /// Nothing: its messages are counted on the normal lane.
    async fn counts(&self) -> Result<QueueCounts, QueueError> {
        Ok(QueueCounts::default())
    }

    fn receive_is_cancel_safe(&self) -> bool {
        true
    }
}
