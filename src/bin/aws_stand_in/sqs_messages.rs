//! SQS's message operations: SendMessage(Batch), ReceiveMessage, DeleteMessage(Batch) and ChangeMessageVisibility,
//! each checked and answered as the SQS API reference documents, batch entries failing one by one.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::errors::SqsError;
use crate::sqs::{Sqs, integer, string, strings};
use crate::sqs_attributes::{Settings, attributes_md5, chosen, message_attributes};
use crate::sqs_queue::{Ask, Delivery, Sent};

/// Most entries in one batch call.
const MAX_BATCH_ENTRIES: usize = 10;
/// Most bytes of message bodies and attributes in one SendMessageBatch (1 MiB, as one message's largest size).
const MAX_BATCH_BYTES: usize = 1_048_576;
/// The SenderId attribute of every message (the caller's IAM identity on SQS; no IAM here).
const SENDER_ID: &str = "AIDAEXAMPLESENDERID";

impl Sqs {
    pub(crate) fn send_message(&self, input: &Value) -> Result<Value, SqsError> {
        let queue = self.queue(input)?;
        let (sent, delay) = message(input, &queue.settings())?;
        let mut output = Map::new();
        describe_sent(&mut output, &sent);
        queue.send(Arc::new(sent), delay);
        Ok(Value::Object(output))
    }

    /// SendMessageBatch: the call fails as a whole for a bad batch (empty, over 10 entries, ids repeated or not
    /// valid, over 1 MiB in all); otherwise each entry succeeds or fails on its own ("Successful", "Failed").
    pub(crate) fn send_message_batch(&self, input: &Value) -> Result<Value, SqsError> {
        let queue = self.queue(input)?;
        let entries = batch(input, "SendMessageBatchRequestEntry")?;
        let size: usize = entries.iter().map(|entry| entry["MessageBody"].as_str().map_or(0, str::len)).sum();
        if size > MAX_BATCH_BYTES {
            return Err(SqsError::batch_request_too_long(MAX_BATCH_BYTES));
        }
        let settings = queue.settings();
        let (mut successful, mut failed) = (Vec::new(), Vec::new());
        for entry in entries {
            let id = entry["Id"].as_str().unwrap_or_default();
            match message(entry, &settings) {
                Ok((sent, delay)) => {
                    let mut output = Map::new();
                    output.insert("Id".into(), Value::String(id.to_owned()));
                    describe_sent(&mut output, &sent);
                    queue.send(Arc::new(sent), delay);
                    successful.push(Value::Object(output));
                }
                Err(error) => failed.push(failure(id, &error)),
            }
        }
        Ok(json!({ "Successful": successful, "Failed": failed }))
    }

    /// ReceiveMessage: MaxNumberOfMessages 1 to 10 (default 1), VisibilityTimeout 0 to 43,200 s, WaitTimeSeconds 0
    /// to 20 s (default the queue's ReceiveMessageWaitTimeSeconds), as the API reference bounds them.
    pub(crate) async fn receive_message(&self, input: &Value) -> Result<Value, SqsError> {
        let queue = self.queue(input)?;
        let settings = queue.settings();
        let max = integer(input, "MaxNumberOfMessages", 1, 10, "Must be between 1 and 10, if provided.")?;
        let visibility = integer(input, "VisibilityTimeout", 0, 43_200, "Must be between 0 and 43200, if provided.")?;
        let wait = integer(input, "WaitTimeSeconds", 0, 20, "Must be >= 0 and <= 20, if provided.")?;
        let ask = Ask {
            max: max.map_or(1, |n| n as usize),
            visibility: visibility.map(|seconds| seconds as u32),
            wait: Duration::from_secs(wait.map_or(settings.receive_wait_seconds.into(), |s| s as u64)),
        };
        // The older AttributeNames and the newer MessageSystemAttributeNames name the same attributes.
        let mut system = strings(input, "AttributeNames")?;
        system.extend(strings(input, "MessageSystemAttributeNames")?);
        let attribute_names = strings(input, "MessageAttributeNames")?;
        let dead_letter = settings.redrive.as_ref().and_then(|redrive| self.by_arn(&redrive.target_arn));
        let deliveries = queue.receive(ask, dead_letter.as_deref()).await;
        if deliveries.is_empty() {
            return Ok(json!({}));
        }
        let messages: Vec<Value> = deliveries.iter().map(|d| received(d, &system, &attribute_names)).collect();
        Ok(json!({ "Messages": messages }))
    }

    pub(crate) fn delete_message(&self, input: &Value) -> Result<Value, SqsError> {
        let queue = self.queue(input)?;
        queue.delete(string(input, "ReceiptHandle")?)?;
        Ok(json!({}))
    }

    /// DeleteMessageBatch: a bad batch fails the call; each entry's receipt handle is then deleted on its own.
    pub(crate) fn delete_message_batch(&self, input: &Value) -> Result<Value, SqsError> {
        let queue = self.queue(input)?;
        let entries = batch(input, "DeleteMessageBatchRequestEntry")?;
        let (mut successful, mut failed) = (Vec::new(), Vec::new());
        for entry in entries {
            let id = entry["Id"].as_str().unwrap_or_default();
            match string(entry, "ReceiptHandle").and_then(|receipt| queue.delete(receipt)) {
                Ok(()) => successful.push(json!({ "Id": id })),
                Err(error) => failed.push(failure(id, &error)),
            }
        }
        Ok(json!({ "Successful": successful, "Failed": failed }))
    }

    pub(crate) fn change_message_visibility(&self, input: &Value) -> Result<Value, SqsError> {
        let queue = self.queue(input)?;
        let receipt = string(input, "ReceiptHandle")?;
        let seconds = integer(input, "VisibilityTimeout", 0, 43_200, "Must be between 0 and 43200.")?
            .ok_or_else(|| SqsError::missing_parameter("VisibilityTimeout"))?;
        queue.change_visibility(receipt, seconds as u32)?;
        Ok(json!({}))
    }
}

/// A batch's entries once the batch itself is valid: 1 to 10 entries whose ids are distinct, each of 1 to 80
/// alphanumeric characters, hyphens and underscores.
fn batch<'a>(input: &'a Value, entry: &str) -> Result<&'a [Value], SqsError> {
    let entries = input["Entries"].as_array().map(Vec::as_slice).unwrap_or_default();
    if entries.is_empty() {
        return Err(SqsError::empty_batch_request(entry));
    }
    if entries.len() > MAX_BATCH_ENTRIES {
        return Err(SqsError::too_many_entries(entries.len()));
    }
    let mut seen = HashSet::new();
    for entry in entries {
        let id = string(entry, "Id")?;
        let valid = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if id.is_empty() || id.len() > 80 || !id.chars().all(valid) {
            return Err(SqsError::invalid_batch_entry_id());
        }
        if !seen.insert(id) {
            return Err(SqsError::ids_not_distinct(id));
        }
    }
    Ok(entries)
}

/// A batch entry's failure, as `Failed` lists it.
fn failure(id: &str, error: &SqsError) -> Value {
    json!({ "Id": id, "SenderFault": true, "Code": error.code, "Message": error.message })
}

/// A message to send, from SendMessage's input or a batch entry, and its delay; checked as SendMessage documents:
/// a body of allowed characters, at most the queue's MaximumMessageSize with its attributes, a delay of 0 to 900 s.
fn message(input: &Value, settings: &Settings) -> Result<(Sent, Option<u32>), SqsError> {
    let body = string(input, "MessageBody")?;
    if body.is_empty() {
        return Err(SqsError::missing_parameter("MessageBody"));
    }
    // Allowed: #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF (SendMessage, MessageBody).
    let allowed = |c: char| matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && c != '\u{FFFE}' && c != '\u{FFFF}');
    if let Some(bad) = body.chars().find(|c| !allowed(*c)) {
        return Err(SqsError::invalid_message_contents(format!(
            "Invalid binary character '#x{:X}' was found in the message body, the set of allowed characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF",
            u32::from(bad)
        )));
    }
    let attributes = message_attributes(input.get("MessageAttributes"))?;
    let size = body.len() + attributes.iter().map(|(name, a)| a.size(name)).sum::<usize>();
    let max = settings.maximum_message_size as usize;
    if size > max {
        return Err(SqsError::invalid_parameter_value(format!(
            "One or more parameters are invalid. Reason: Message must be shorter than {max} bytes."
        )));
    }
    let delay = integer(input, "DelaySeconds", 0, 900, "DelaySeconds must be >= 0 and <= 900.")?;
    Ok((Sent::new(body.to_owned(), attributes), delay.map(|seconds| seconds as u32)))
}

/// What SendMessage answers about a message: its id and digests.
fn describe_sent(output: &mut Map<String, Value>, sent: &Sent) {
    output.insert("MessageId".into(), Value::String(sent.id.clone()));
    output.insert("MD5OfMessageBody".into(), Value::String(sent.body_md5.clone()));
    if let Some(md5) = &sent.attributes_md5 {
        output.insert("MD5OfMessageAttributes".into(), Value::String(md5.clone()));
    }
}

/// A received message as ReceiveMessage lists it, with the system attributes and message attributes asked for.
fn received(delivery: &Delivery, system: &[String], attribute_names: &[String]) -> Value {
    let sent = &delivery.sent;
    let mut message = Map::new();
    message.insert("MessageId".into(), Value::String(sent.id.clone()));
    message.insert("ReceiptHandle".into(), Value::String(delivery.receipt.clone()));
    message.insert("MD5OfBody".into(), Value::String(sent.body_md5.clone()));
    message.insert("Body".into(), Value::String(sent.body.clone()));
    let all = system.iter().any(|name| name == "All");
    let wanted = |name: &str| all || system.iter().any(|asked| asked == name);
    let mut attributes = Map::new();
    // ApproximateReceiveCount: "the number of times a message has been received across all queues but not deleted".
    let values = [
        ("SenderId", SENDER_ID.to_owned()),
        ("SentTimestamp", sent.sent_ms.to_string()),
        ("ApproximateReceiveCount", delivery.receive_count.to_string()),
        ("ApproximateFirstReceiveTimestamp", delivery.first_received_ms.to_string()),
    ];
    for (name, value) in values.into_iter().filter(|(name, _)| wanted(name)) {
        attributes.insert(name.into(), Value::String(value));
    }
    if !attributes.is_empty() {
        message.insert("Attributes".into(), Value::Object(attributes));
    }
    let chosen = chosen(&sent.attributes, attribute_names);
    if let Some(md5) = attributes_md5(&chosen) {
        let values: Map<String, Value> = chosen.iter().map(|(name, a)| (name.clone(), a.json())).collect();
        message.insert("MessageAttributes".into(), Value::Object(values));
        message.insert("MD5OfMessageAttributes".into(), Value::String(md5));
    }
    Value::Object(message)
}
