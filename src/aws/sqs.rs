//! SQS queue adapter: long-poll receive, visibility heartbeat and back-off, many-message delete, dead-letter, counts.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::{
    BatchResultErrorEntry, DeleteMessageBatchRequestEntry, MessageAttributeValue, MessageSystemAttributeName,
    QueueAttributeName, SendMessageBatchRequestEntry,
};

use crate::aws::sqs_deletes::{DeleteMany, SharedDeletes};
use crate::ports::{MAX_MESSAGES_PER_CALL, MAX_RECEIVE_WAIT, Message, Queue, QueueCounts, QueueError};

/// Largest total body size of one SendMessageBatch.
const MAX_SEND_CALL_BYTES: usize = 1024 * 1024;
/// Longest visibility timeout SQS takes (12 hours).
const MAX_VISIBILITY_SECONDS: u64 = 43_200;

#[derive(Debug, Clone)]
pub struct SqsQueue {
    client: Client,
    url: String,
    dead_letter_url: Option<String>,
    /// Deletes share DeleteMessageBatch calls (every clone of this queue the same ones).
    deletes: Arc<SharedDeletes<SqsDeletes>>,
    /// How long a received message stays hidden; None leaves it to the queue's own visibility timeout.
    receive_visibility: Option<Duration>,
}

impl SqsQueue {
    /// A queue by URL; `dead_letter_url` is where malformed messages go (required by workers).
    pub fn new(client: Client, url: String, dead_letter_url: Option<String>) -> Self {
        let deletes = Arc::new(SharedDeletes::new(SqsDeletes { client: client.clone(), url: url.clone() }));
        SqsQueue { client, url, dead_letter_url, deletes, receive_visibility: None }
    }

    /// Messages this queue receives stay hidden for `timeout` (ReceiveMessage's VisibilityTimeout), whatever the
    /// queue's own default: a worker's heartbeat renews them on its own VISIBILITY_TIMEOUT's schedule.
    pub fn hiding_received_for(mut self, timeout: Duration) -> Self {
        self.receive_visibility = Some(timeout);
        self
    }

    /// One SendMessageBatch call; entry ids are the bodies' positions in `chunk`.
    async fn send_chunk(&self, chunk: &[String]) -> Vec<Result<(), QueueError>> {
        let entries: Result<Vec<_>, _> = chunk
            .iter()
            .enumerate()
            .map(|(i, body)| SendMessageBatchRequestEntry::builder().id(i.to_string()).message_body(body).build())
            .collect();
        let sent = match entries {
            Ok(entries) => self
                .client
                .send_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(unavailable("SendMessageBatch")),
            Err(e) => Err(QueueError::unavailable(format!("building an entry: {e}"))),
        };
        let answered =
            sent.map(|output| (output.successful.into_iter().map(|entry| entry.id).collect(), output.failed));
        call_outcomes(chunk.len(), "SendMessageBatch", answered, |_code| None)
    }
}

/// DeleteMessageBatch on one queue, for the [`SharedDeletes`].
#[derive(Debug)]
struct SqsDeletes {
    client: Client,
    url: String,
}

#[async_trait]
impl DeleteMany for SqsDeletes {
    /// One DeleteMessageBatch call; entry ids are the receipts' positions.
    async fn delete_many(&self, chunk: &[String]) -> Vec<Result<(), QueueError>> {
        let entries: Result<Vec<_>, _> = chunk
            .iter()
            .enumerate()
            .map(|(i, receipt)| {
                DeleteMessageBatchRequestEntry::builder().id(i.to_string()).receipt_handle(receipt).build()
            })
            .collect();
        let deleted = match entries {
            Ok(entries) => self
                .client
                .delete_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(unavailable("DeleteMessageBatch")),
            Err(e) => Err(QueueError::unavailable(format!("building an entry: {e}"))),
        };
        let answered =
            deleted.map(|output| (output.successful.into_iter().map(|entry| entry.id).collect(), output.failed));
        call_outcomes(chunk.len(), "DeleteMessageBatch", answered, |code| {
            (code == "ReceiptHandleIsInvalid").then_some(QueueError::ReceiptExpired)
        })
    }
}

/// One outcome per entry of a many-message call whose entry ids are positions: a failed call fails every entry; a
/// failed entry gets `known(code)` or else an Unavailable naming the code; an entry missing from the answer fails.
fn call_outcomes(
    len: usize,
    action: &str,
    answered: Result<(Vec<String>, Vec<BatchResultErrorEntry>), QueueError>,
    known: impl Fn(&str) -> Option<QueueError>,
) -> Vec<Result<(), QueueError>> {
    let (successful, failed) = match answered {
        Ok(answer) => answer,
        Err(error) => return vec![Err(error); len],
    };
    let mut outcomes = vec![Err(QueueError::unavailable(format!("{action}: entry missing from the answer"))); len];
    for id in successful {
        if let Some(outcome) = id.parse().ok().and_then(|i: usize| outcomes.get_mut(i)) {
            *outcome = Ok(());
        }
    }
    for entry in failed {
        if let Some(outcome) = entry.id.parse().ok().and_then(|i: usize| outcomes.get_mut(i)) {
            let message = entry.message.unwrap_or_default();
            *outcome = Err(known(&entry.code)
                .unwrap_or_else(|| QueueError::unavailable(format!("{action}: {}: {message}", entry.code))));
        }
    }
    outcomes
}

/// Splits bodies into SendMessageBatch calls: at most 10 messages and 1 MiB of bodies each.
fn chunks(bodies: &[String]) -> Vec<&[String]> {
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, body) in bodies.iter().enumerate() {
        if i > start && (i - start == MAX_MESSAGES_PER_CALL || bytes + body.len() > MAX_SEND_CALL_BYTES) {
            chunks.push(&bodies[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += body.len();
    }
    if start < bodies.len() {
        chunks.push(&bodies[start..]);
    }
    chunks
}

/// A visibility timeout as SQS takes it: whole seconds, at most 12 hours.
fn visibility_seconds(timeout: Duration) -> i32 {
    timeout.as_secs().min(MAX_VISIBILITY_SECONDS) as i32
}

fn unavailable<E: std::error::Error + Send + Sync + 'static>(action: &str) -> impl FnOnce(E) -> QueueError + '_ {
    move |e| QueueError::caused(action, e)
}

fn attribute(attributes: &std::collections::HashMap<QueueAttributeName, String>, name: QueueAttributeName) -> u64 {
    attributes.get(&name).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn string_attribute(value: &str) -> Result<MessageAttributeValue, QueueError> {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .map_err(|e| QueueError::unavailable(format!("building a message attribute: {e}")))
}

#[async_trait]
impl Queue for SqsQueue {
    async fn send(&self, body: &str) -> Result<(), QueueError> {
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .send()
            .await
            .map_err(unavailable("SendMessage"))?;
        Ok(())
    }

    async fn send_many(&self, bodies: &[String]) -> Vec<Result<(), QueueError>> {
        let mut outcomes = Vec::with_capacity(bodies.len());
        for chunk in chunks(bodies) {
            outcomes.extend(self.send_chunk(chunk).await);
        }
        outcomes
    }

    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Message>, QueueError> {
        let output = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(max.clamp(1, MAX_MESSAGES_PER_CALL) as i32)
            .wait_time_seconds(wait.min(MAX_RECEIVE_WAIT).as_secs() as i32)
            .set_visibility_timeout(self.receive_visibility.map(visibility_seconds))
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .send()
            .await
            .map_err(unavailable("ReceiveMessage"))?;
        Ok(output
            .messages
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| {
                let attributes = m.attributes.unwrap_or_default();
                let number = |name| attributes.get(&name).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
                Some(Message {
                    receive_count: u32::try_from(number(MessageSystemAttributeName::ApproximateReceiveCount))
                        .unwrap_or(1)
                        .max(1),
                    sent_at_ms: number(MessageSystemAttributeName::SentTimestamp),
                    receipt: m.receipt_handle?,
                    body: m.body.unwrap_or_default(),
                })
            })
            .collect())
    }

    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> Result<(), QueueError> {
        let result = self
            .client
            .change_message_visibility()
            .queue_url(&self.url)
            .receipt_handle(receipt)
            .visibility_timeout(visibility_seconds(timeout))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            // An expired receipt handle comes back as InvalidParameterValue, which the SDK does not model.
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_receipt_handle_is_invalid() || s.is_message_not_inflight())
                    || e.code() == Some("InvalidParameterValue") =>
            {
                Err(QueueError::ReceiptExpired)
            }
            Err(e) => Err(unavailable("ChangeMessageVisibility")(e)),
        }
    }

    /// In a DeleteMessageBatch with the deletes that come due while earlier ones are on the wire.
    async fn delete(&self, receipt: &str) -> Result<(), QueueError> {
        self.deletes.delete(receipt).await
    }

    async fn dead_letter(&self, message: &Message, reason: &str) -> Result<(), QueueError> {
        let Some(dead_letter_url) = &self.dead_letter_url else {
            return Err(QueueError::unavailable("no dead-letter queue configured (set DLQ_URL)"));
        };
        self.client
            .send_message()
            .queue_url(dead_letter_url)
            .message_body(&message.body)
            .message_attributes("ErrorReason", string_attribute(reason)?)
            .message_attributes("OriginalQueue", string_attribute(&self.url)?)
            .send()
            .await
            .map_err(unavailable("SendMessage to the dead-letter queue"))?;
        self.delete(&message.receipt).await
    }

    async fn counts(&self) -> Result<QueueCounts, QueueError> {
        let output = self
            .client
            .get_queue_attributes()
            .queue_url(&self.url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
            .send()
            .await
            .map_err(unavailable("GetQueueAttributes"))?;
        let attributes = output.attributes.unwrap_or_default();
        Ok(QueueCounts {
            visible: attribute(&attributes, QueueAttributeName::ApproximateNumberOfMessages),
            in_flight: attribute(&attributes, QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
            delayed: attribute(&attributes, QueueAttributeName::ApproximateNumberOfMessagesDelayed),
        })
    }
}
