//! SQS over awsJson1_0, the protocol the AWS SDK for Rust speaks (`POST /`, `X-Amz-Target: AmazonSQS.<Operation>`,
//! a JSON body): the queue registry, the dispatch of each operation and the queue-level operations (CreateQueue,
//! GetQueueUrl, GetQueueAttributes, SetQueueAttributes). The message-level ones are in sqs_messages.rs.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::errors::SqsError;
use crate::lock;
use crate::sqs_attributes::Settings;
use crate::sqs_queue::Queue;

/// The account every queue belongs to (moto's default account, so URLs look alike on both).
const ACCOUNT: &str = "123456789012";
const REGION: &str = "us-east-1";
/// Attributes GetQueueAttributes tells that are no setting: the queue's identity, times and counts.
const TOLD_ONLY: [&str; 6] = [
    "QueueArn",
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
];

#[derive(Debug)]
pub(crate) struct Sqs {
    /// The stand-in's base URL: queue URLs are `{base}/{account}/{name}`.
    base: String,
    queues: Mutex<HashMap<String, Arc<Queue>>>,
}

impl Sqs {
    pub(crate) fn new(base: String) -> Self {
        Sqs { base, queues: Mutex::new(HashMap::new()) }
    }

    /// Answers one call: `target` is the X-Amz-Target header, `body` the JSON input.
    pub(crate) async fn handle(&self, target: &str, body: &[u8]) -> Response {
        let answered = match serde_json::from_slice::<Value>(body) {
            Ok(input) if input.is_object() => self.operation(target, &input).await,
            Ok(_) => Err(SqsError::malformed("not a JSON object")),
            Err(_) if body.is_empty() => self.operation(target, &Value::Object(Map::new())).await,
            Err(e) => Err(SqsError::malformed(e)),
        };
        match answered {
            Ok(output) => {
                let mut response = (StatusCode::OK, output.to_string()).into_response();
                let content_type = HeaderValue::from_static("application/x-amz-json-1.0");
                response.headers_mut().insert(header::CONTENT_TYPE, content_type);
                response
            }
            Err(error) => error.into_response(),
        }
    }

    async fn operation(&self, target: &str, input: &Value) -> Result<Value, SqsError> {
        match target.strip_prefix("AmazonSQS.").unwrap_or(target) {
            "CreateQueue" => self.create_queue(input),
            "GetQueueUrl" => self.get_queue_url(input),
            "GetQueueAttributes" => self.get_queue_attributes(input),
            "SetQueueAttributes" => self.set_queue_attributes(input),
            "SendMessage" => self.send_message(input),
            "SendMessageBatch" => self.send_message_batch(input),
            "ReceiveMessage" => self.receive_message(input).await,
            "DeleteMessage" => self.delete_message(input),
            "DeleteMessageBatch" => self.delete_message_batch(input),
            "ChangeMessageVisibility" => self.change_message_visibility(input),
            other => Err(SqsError::unsupported(other)),
        }
    }

    /// The queue a call's QueueUrl names (by its last path segment, the queue's name).
    pub(crate) fn queue(&self, input: &Value) -> Result<Arc<Queue>, SqsError> {
        let url = string(input, "QueueUrl")?;
        let name = url.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
        lock(&self.queues).get(name).cloned().ok_or_else(SqsError::queue_does_not_exist)
    }

    /// The queue an ARN names, if it exists.
    pub(crate) fn by_arn(&self, arn: &str) -> Option<Arc<Queue>> {
        let name = arn.rsplit(':').next().unwrap_or_default();
        lock(&self.queues).get(name).filter(|queue| queue.arn == arn).cloned()
    }

    /// A redrive policy must name a queue that exists (SetQueueAttributes: "Dead letter target does not exist").
    fn check_target(&self, settings: &Settings) -> Result<(), SqsError> {
        match &settings.redrive {
            Some(redrive) if self.by_arn(&redrive.target_arn).is_none() => {
                Err(SqsError::invalid_parameter_value(format!(
                    "Value {} for parameter RedrivePolicy is invalid. Reason: Dead letter target does not exist.",
                    redrive.target_arn
                )))
            }
            _ => Ok(()),
        }
    }

    /// CreateQueue: a new queue with `Attributes`; for a name already taken, its URL if every attribute given has
    /// the queue's value, else QueueAlreadyExists (CreateQueue: "If you provide the name of an existing queue along
    /// with the exact names and values of all the queue's attributes, CreateQueue returns the queue URL").
    fn create_queue(&self, input: &Value) -> Result<Value, SqsError> {
        let name = string(input, "QueueName")?;
        // Queue names: 1 to 80 alphanumeric characters, hyphens and underscores (CreateQueue, "QueueName").
        let valid = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if name.is_empty() || name.len() > 80 || !name.chars().all(valid) {
            return Err(SqsError::invalid_parameter_value(
                "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length",
            ));
        }
        let attributes = string_map(input, "Attributes")?;
        if let Some(existing) = lock(&self.queues).get(name) {
            return match existing.settings().differing(&attributes)? {
                Some(attribute) => Err(SqsError::queue_already_exists(attribute)),
                None => Ok(json!({ "QueueUrl": existing.url })),
            };
        }
        let settings = Settings::default().with(&attributes)?;
        self.check_target(&settings)?;
        let url = format!("{}/{ACCOUNT}/{name}", self.base);
        let arn = format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{name}");
        let queue = Arc::new(Queue::new(name.to_owned(), url, arn, settings));
        let queue = Arc::clone(lock(&self.queues).entry(name.to_owned()).or_insert(queue));
        Ok(json!({ "QueueUrl": queue.url }))
    }

    fn get_queue_url(&self, input: &Value) -> Result<Value, SqsError> {
        let name = string(input, "QueueName")?;
        let queue = lock(&self.queues).get(name).cloned().ok_or_else(SqsError::queue_does_not_exist)?;
        Ok(json!({ "QueueUrl": queue.url }))
    }

    /// GetQueueAttributes: the attributes named in `AttributeNames` ("All" for every one); none named, none told.
    fn get_queue_attributes(&self, input: &Value) -> Result<Value, SqsError> {
        let queue = self.queue(input)?;
        let asked = strings(input, "AttributeNames")?;
        let settings = queue.settings();
        let names: Vec<String> = if asked.iter().any(|name| name == "All") {
            TOLD_ONLY.iter().copied().chain(settings.names()).map(str::to_owned).collect()
        } else {
            asked
        };
        let counts = names.iter().any(|n| n.starts_with("Approximate")).then(|| queue.counts());
        let seconds = |at: SystemTime| at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
        let mut told = Map::new();
        for name in names {
            let value = match (name.as_str(), counts) {
                ("QueueArn", _) => Some(queue.arn.clone()),
                ("ApproximateNumberOfMessages", Some(counts)) => Some(counts.visible.to_string()),
                ("ApproximateNumberOfMessagesNotVisible", Some(counts)) => Some(counts.in_flight.to_string()),
                ("ApproximateNumberOfMessagesDelayed", Some(counts)) => Some(counts.delayed.to_string()),
                ("CreatedTimestamp", _) => Some(seconds(queue.created).to_string()),
                ("LastModifiedTimestamp", _) => Some(seconds(queue.last_modified()).to_string()),
                (other, _) if Settings::is_attribute(other) => settings.told(other),
                (other, _) => return Err(SqsError::invalid_attribute_name(other)),
            };
            if let Some(value) = value {
                told.insert(name, Value::String(value));
            }
        }
        Ok(if told.is_empty() { json!({}) } else { json!({ "Attributes": told }) })
    }

    fn set_queue_attributes(&self, input: &Value) -> Result<Value, SqsError> {
        let queue = self.queue(input)?;
        let attributes = string_map(input, "Attributes")?;
        self.check_target(&queue.settings().with(&attributes)?)?;
        queue.set(&attributes)?;
        Ok(json!({}))
    }
}

/// A required string member of a call's input; MissingParameter when it is absent.
pub(crate) fn string<'a>(input: &'a Value, name: &str) -> Result<&'a str, SqsError> {
    match &input[name] {
        Value::String(value) => Ok(value),
        Value::Null => Err(SqsError::missing_parameter(name)),
        _ => Err(SqsError::malformed(format!("{name} is not a string"))),
    }
}

/// An optional integer member within `low..=high`; InvalidParameterValue, with `why`, outside it.
pub(crate) fn integer(input: &Value, name: &str, low: i64, high: i64, why: &str) -> Result<Option<i64>, SqsError> {
    let value = match &input[name] {
        Value::Null => return Ok(None),
        value => value.as_i64().ok_or_else(|| SqsError::malformed(format!("{name} is not an integer")))?,
    };
    if !(low..=high).contains(&value) {
        return Err(SqsError::invalid_parameter_value(format!(
            "Value {value} for parameter {name} is invalid. Reason: {why}"
        )));
    }
    Ok(Some(value))
}

/// An optional list of strings.
pub(crate) fn strings(input: &Value, name: &str) -> Result<Vec<String>, SqsError> {
    match &input[name] {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| SqsError::malformed(format!("{name} holds a non-string")))
            })
            .collect(),
        _ => Err(SqsError::malformed(format!("{name} is not a list"))),
    }
}

/// An optional map of strings to strings (queue attributes).
fn string_map(input: &Value, name: &str) -> Result<BTreeMap<String, String>, SqsError> {
    match &input[name] {
        Value::Null => Ok(BTreeMap::new()),
        Value::Object(map) => map
            .iter()
            .map(|(key, value)| match value {
                Value::String(value) => Ok((key.clone(), value.clone())),
                _ => Err(SqsError::malformed(format!("{name}.{key} is not a string"))),
            })
            .collect(),
        _ => Err(SqsError::malformed(format!("{name} is not a map"))),
    }
}
