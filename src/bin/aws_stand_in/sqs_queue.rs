//! One SQS queue's messages: sent (maybe delayed), received under a visibility timeout with a fresh receipt handle
//! each time, long-polled for, deleted, made visible again, counted, and moved to the dead-letter queue once
//! received more often than its redrive policy allows.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use base64::Engine;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::errors::SqsError;
use crate::lock;
use crate::sqs_attributes::{MessageAttributes, Settings, attributes_md5};
use crate::wire::{epoch_millis, md5_hex};

/// The longest a message may stay hidden, counted from the receive (12 hours: ChangeMessageVisibility, "you can't
/// extend the timeout of a message to more than a total visibility timeout of 12 hours").
const MAX_VISIBILITY: Duration = Duration::from_secs(43_200);
/// Separates the parts of a receipt handle before it is encoded.
const RECEIPT_SEPARATOR: char = '\u{1}';

/// A message as sent: the same in whichever queue holds it.
#[derive(Debug)]
pub(crate) struct Sent {
    pub id: String,
    pub body: String,
    pub body_md5: String,
    pub attributes: MessageAttributes,
    pub attributes_md5: Option<String>,
    pub sent_ms: i64,
    /// When it was first enqueued: retention counts from here, in a dead-letter queue too (Developer Guide, "Using
    /// dead-letter queues": a standard queue's message keeps its original enqueue timestamp when moved).
    enqueued: Instant,
}

impl Sent {
    pub(crate) fn new(body: String, attributes: MessageAttributes) -> Self {
        Sent {
            id: uuid::Uuid::new_v4().to_string(),
            body_md5: md5_hex(body.as_bytes()),
            attributes_md5: attributes_md5(&attributes),
            attributes,
            body,
            sent_ms: epoch_millis(SystemTime::now()),
            enqueued: Instant::now(),
        }
    }
}

/// A message in a queue and where its deliveries stand.
#[derive(Debug)]
struct Held {
    sent: Arc<Sent>,
    visible_at: Instant,
    receive_count: u32,
    first_received_ms: Option<i64>,
    /// The newest receipt handle and when that receive was.
    receipt: Option<(String, Instant)>,
}

/// One delivery of a message to a receiver.
#[derive(Debug)]
pub(crate) struct Delivery {
    pub sent: Arc<Sent>,
    pub receipt: String,
    pub receive_count: u32,
    pub first_received_ms: i64,
}

/// What a ReceiveMessage asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask {
    pub max: usize,
    /// Seconds the messages stay hidden; None: the queue's VisibilityTimeout.
    pub visibility: Option<u32>,
    pub wait: Duration,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    pub visible: usize,
    pub in_flight: usize,
    pub delayed: usize,
}

#[derive(Debug)]
struct Messages {
    settings: Settings,
    held: HashMap<u64, Held>,
    /// Every message by the time it becomes visible, then by age: the receivable ones come first.
    by_visibility: BTreeSet<(Instant, u64)>,
    next: u64,
    last_modified: SystemTime,
}

/// A receive's outcome before any long-poll wait.
struct Taken {
    deliveries: Vec<Delivery>,
    /// Messages past their redrive policy's maxReceiveCount, for the dead-letter queue.
    moved: Vec<Held>,
    /// When the next hidden message becomes visible.
    next_visible: Option<Instant>,
}

#[derive(Debug)]
pub(crate) struct Queue {
    pub name: String,
    pub url: String,
    pub arn: String,
    pub created: SystemTime,
    messages: Mutex<Messages>,
    /// Woken when a message may have become receivable: long polls wait on it.
    arrived: Notify,
}

impl Queue {
    pub(crate) fn new(name: String, url: String, arn: String, settings: Settings) -> Self {
        let now = SystemTime::now();
        let messages =
            Messages { settings, held: HashMap::new(), by_visibility: BTreeSet::new(), next: 0, last_modified: now };
        Queue { name, url, arn, created: now, messages: Mutex::new(messages), arrived: Notify::new() }
    }

    pub(crate) fn settings(&self) -> Settings {
        lock(&self.messages).settings.clone()
    }

    pub(crate) fn last_modified(&self) -> SystemTime {
        lock(&self.messages).last_modified
    }

    /// SetQueueAttributes: all of `attributes` or, if one is invalid, none.
    pub(crate) fn set(&self, attributes: &BTreeMap<String, String>) -> Result<(), SqsError> {
        let mut messages = lock(&self.messages);
        messages.settings = messages.settings.with(attributes)?;
        messages.last_modified = SystemTime::now();
        Ok(())
    }

    /// Enqueues a message, hidden for `delay` seconds (None: the queue's DelaySeconds).
    pub(crate) fn send(&self, sent: Arc<Sent>, delay: Option<u32>) {
        let mut messages = lock(&self.messages);
        let delay = delay.unwrap_or(messages.settings.delay_seconds);
        let held = Held {
            sent,
            visible_at: Instant::now() + Duration::from_secs(delay.into()),
            receive_count: 0,
            first_received_ms: None,
            receipt: None,
        };
        messages.hold(held);
        drop(messages);
        self.arrived.notify_waiters();
    }

    /// Takes messages moved from a queue that redrives here, visible at once and with their receive counts.
    fn accept(&self, moved: Vec<Held>) {
        let mut messages = lock(&self.messages);
        for mut held in moved {
            held.visible_at = Instant::now();
            held.receipt = None;
            messages.hold(held);
        }
        drop(messages);
        self.arrived.notify_waiters();
    }

    /// ReceiveMessage: up to `ask.max` visible messages, each hidden for the visibility timeout with a new receipt
    /// handle. With nothing visible it waits up to `ask.wait` and answers as soon as a message becomes visible
    /// (Developer Guide, "Amazon SQS short and long polling": long polling returns once a message is available).
    /// Messages received `maxReceiveCount` times already go to `dead_letter` instead (the redrive policy).
    pub(crate) async fn receive(&self, ask: Ask, dead_letter: Option<&Queue>) -> Vec<Delivery> {
        let deadline = Instant::now() + ask.wait;
        loop {
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let now = Instant::now();
            let taken = self.take(ask, dead_letter.is_some(), now);
            if let Some(dead_letter) = dead_letter
                && !taken.moved.is_empty()
            {
                dead_letter.accept(taken.moved);
            }
            if !taken.deliveries.is_empty() || now >= deadline {
                return taken.deliveries;
            }
            let wake = taken.next_visible.map_or(deadline, |at| at.min(deadline));
            tokio::select! {
                () = &mut arrived => {}
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    fn take(&self, ask: Ask, redrives: bool, now: Instant) -> Taken {
        let mut messages = lock(&self.messages);
        let visibility = Duration::from_secs(ask.visibility.unwrap_or(messages.settings.visibility_timeout).into());
        let retention = Duration::from_secs(messages.settings.retention_seconds.into());
        let max_receives = messages.settings.redrive.as_ref().filter(|_| redrives).map(|r| r.max_receive_count);
        let (mut deliveries, mut moved, mut hidden) = (Vec::new(), Vec::new(), Vec::new());
        while deliveries.len() < ask.max {
            let Some(&(at, seq)) = messages.by_visibility.first().filter(|(at, _)| *at <= now) else { break };
            messages.by_visibility.remove(&(at, seq));
            let Some(mut held) = messages.held.remove(&seq) else { continue };
            if held.sent.enqueued + retention <= now {
                continue;
            }
            if max_receives.is_some_and(|max| held.receive_count >= max) {
                moved.push(held);
                continue;
            }
            held.receive_count += 1;
            let first_received_ms = *held.first_received_ms.get_or_insert_with(|| epoch_millis(SystemTime::now()));
            let receipt = self.receipt(seq, held.receive_count);
            held.receipt = Some((receipt.clone(), now));
            held.visible_at = now + visibility;
            let sent = Arc::clone(&held.sent);
            deliveries.push(Delivery { sent, receipt, receive_count: held.receive_count, first_received_ms });
            hidden.push((seq, held));
        }
        for (seq, held) in hidden {
            messages.by_visibility.insert((held.visible_at, seq));
            messages.held.insert(seq, held);
        }
        let next_visible = messages.by_visibility.first().map(|(at, _)| *at);
        Taken { deliveries, moved, next_visible }
    }

    /// A receipt handle: the queue, the message and which receive, with random bytes, encoded.
    fn receipt(&self, seq: u64, receive: u32) -> String {
        let random = uuid::Uuid::new_v4().simple();
        let sep = RECEIPT_SEPARATOR;
        let plain = format!("{}{sep}{seq}{sep}{receive}{sep}{random}", self.name);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(plain)
    }

    /// The message a receipt handle of this queue names; ReceiptHandleIsInvalid for anything else.
    fn message_of(&self, receipt: &str) -> Result<u64, SqsError> {
        let invalid = || SqsError::receipt_handle_is_invalid(receipt);
        let plain = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(receipt).map_err(|_| invalid())?;
        let plain = String::from_utf8(plain).map_err(|_| invalid())?;
        let parts: Vec<&str> = plain.split(RECEIPT_SEPARATOR).collect();
        match parts.as_slice() {
            [queue, seq, _, _] if *queue == self.name => seq.parse().map_err(|_| invalid()),
            _ => Err(invalid()),
        }
    }

    /// DeleteMessage: removes the message whatever its visibility. A receipt of a message already gone is no error;
    /// nor is one from an older receive (DeleteMessage: without the most recent receipt handle "the request will
    /// still succeed, but the message might not be deleted"; here, as in moto, it is).
    pub(crate) fn delete(&self, receipt: &str) -> Result<(), SqsError> {
        let seq = self.message_of(receipt)?;
        let mut messages = lock(&self.messages);
        if let Some(held) = messages.held.remove(&seq) {
            messages.by_visibility.remove(&(held.visible_at, seq));
        }
        Ok(())
    }

    /// ChangeMessageVisibility: hides an in-flight message for `seconds` from now (0 makes it visible at once).
    pub(crate) fn change_visibility(&self, receipt: &str, seconds: u32) -> Result<(), SqsError> {
        let seq = self.message_of(receipt)?;
        let now = Instant::now();
        let mut messages = lock(&self.messages);
        let invalid = |why: &str| {
            SqsError::invalid_parameter_value(format!(
                "Value {receipt} for parameter ReceiptHandle is invalid. Reason: {why}"
            ))
        };
        let held = messages
            .held
            .get_mut(&seq)
            .ok_or_else(|| invalid("Message does not exist or is not available for visibility timeout change."))?;
        let received_at = match &held.receipt {
            Some((latest, at)) if latest == receipt => *at,
            _ => return Err(invalid("The receipt handle has expired.")),
        };
        if held.visible_at <= now {
            return Err(SqsError::message_not_inflight());
        }
        let until = now + Duration::from_secs(seconds.into());
        if until > received_at + MAX_VISIBILITY {
            return Err(SqsError::invalid_parameter_value(format!(
                "Value {seconds} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]"
            )));
        }
        let before = std::mem::replace(&mut held.visible_at, until);
        messages.by_visibility.remove(&(before, seq));
        messages.by_visibility.insert((until, seq));
        drop(messages);
        if seconds == 0 {
            self.arrived.notify_waiters();
        }
        Ok(())
    }

    /// ApproximateNumberOfMessages (visible), …NotVisible (received and hidden) and …Delayed (sent with a delay not
    /// yet over).
    pub(crate) fn counts(&self) -> Counts {
        let now = Instant::now();
        let messages = lock(&self.messages);
        let retention = Duration::from_secs(messages.settings.retention_seconds.into());
        let mut counts = Counts::default();
        for held in messages.held.values().filter(|held| held.sent.enqueued + retention > now) {
            match (held.visible_at <= now, held.receive_count) {
                (true, _) => counts.visible += 1,
                (false, 0) => counts.delayed += 1,
                (false, _) => counts.in_flight += 1,
            }
        }
        counts
    }
}

impl Messages {
    fn hold(&mut self, held: Held) {
        let seq = self.next;
        self.next += 1;
        self.by_visibility.insert((held.visible_at, seq));
        self.held.insert(seq, held);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn queue(settings: Settings) -> Queue {
        Queue::new("q".into(), "http://x/1/q".into(), "arn:aws:sqs:us-east-1:1:q".into(), settings)
    }

    fn ask(max: usize, visibility: u32) -> Ask {
        Ask { max, visibility: Some(visibility), wait: Duration::ZERO }
    }

    #[tokio::test]
    async fn a_receive_hides_the_message_and_a_later_one_gets_a_new_receipt() {
        let queue = queue(Settings::default());
        queue.send(Arc::new(Sent::new("m".into(), MessageAttributes::new())), None);
        let first = queue.receive(ask(10, 0), None).await;
        let second = queue.receive(ask(10, 30), None).await;
        assert_eq!((first[0].receive_count, second[0].receive_count), (1, 2));
        assert_ne!(first[0].receipt, second[0].receipt);
        assert!(queue.receive(ask(10, 30), None).await.is_empty(), "hidden");
        assert_eq!(queue.counts(), Counts { visible: 0, in_flight: 1, delayed: 0 });
        assert!(queue.change_visibility(&first[0].receipt, 0).is_err(), "an older receipt has expired");
        queue.delete(&second[0].receipt).unwrap();
        assert_eq!(queue.counts(), Counts::default());
        assert!(queue.delete("not-a-receipt").is_err());
    }

    #[tokio::test]
    async fn past_its_max_receive_count_a_message_moves_to_the_dead_letter_queue() {
        let attributes = BTreeMap::from([(
            "RedrivePolicy".to_owned(),
            r#"{"deadLetterTargetArn": "arn:aws:sqs:us-east-1:1:dlq", "maxReceiveCount": 2}"#.to_owned(),
        )]);
        let queue = queue(Settings::default().with(&attributes).unwrap());
        let dead = Queue::new("dlq".into(), "u".into(), "arn:aws:sqs:us-east-1:1:dlq".into(), Settings::default());
        queue.send(Arc::new(Sent::new("m".into(), MessageAttributes::new())), None);
        for _ in 0..2 {
            assert_eq!(queue.receive(ask(1, 0), Some(&dead)).await.len(), 1);
        }
        assert!(queue.receive(ask(1, 0), Some(&dead)).await.is_empty(), "the third receive moves it");
        assert_eq!(dead.counts().visible, 1);
        assert_eq!(dead.receive(ask(1, 30), None).await[0].receive_count, 3, "its count goes on");
    }
}
