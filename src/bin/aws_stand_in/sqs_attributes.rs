//! SQS attributes: a queue's settings as CreateQueue and SetQueueAttributes take them and GetQueueAttributes tells
//! them, and message attributes with the MD5 digest SQS computes over them.

use std::collections::BTreeMap;

use base64::Engine;
use md5::{Digest, Md5};
use serde_json::{Map, Value};

use crate::errors::SqsError;

/// Queue attributes taken and told back as given, which change nothing here.
const KEPT_AS_GIVEN: [&str; 5] =
    ["Policy", "RedriveAllowPolicy", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "SqsManagedSseEnabled"];
/// The attributes of FIFO queues, which the stand-in does not serve.
const FIFO_ONLY: [&str; 4] = ["FifoQueue", "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit"];

/// Where a queue's messages go once received too often (its RedrivePolicy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Redrive {
    pub target_arn: String,
    pub max_receive_count: u32,
}

/// A queue's settings; the defaults are SQS's (CreateQueue, "Attributes").
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    pub visibility_timeout: u32,
    pub delay_seconds: u32,
    pub retention_seconds: u32,
    pub maximum_message_size: u32,
    pub receive_wait_seconds: u32,
    pub redrive: Option<Redrive>,
    kept: BTreeMap<String, String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            visibility_timeout: 30,
            delay_seconds: 0,
            retention_seconds: 345_600,
            maximum_message_size: 1_048_576,
            receive_wait_seconds: 0,
            redrive: None,
            kept: BTreeMap::new(),
        }
    }
}

/// A number attribute in the range CreateQueue documents for it.
fn ranged(name: &str, value: &str, low: u32, high: u32) -> Result<u32, SqsError> {
    let number: u32 = value.trim().parse().map_err(|_| SqsError::invalid_attribute_value(name, "not a number"))?;
    if !(low..=high).contains(&number) {
        return Err(SqsError::invalid_attribute_value(name, &format!("must be between {low} and {high}")));
    }
    Ok(number)
}

/// A RedrivePolicy: `{"deadLetterTargetArn": "…", "maxReceiveCount": n}`, n from 1 to 1,000 (as a number or a
/// string, both of which SQS takes); an empty string removes it.
fn redrive(value: &str) -> Result<Option<Redrive>, SqsError> {
    if value.trim().is_empty() {
        return Ok(None);
    }
    let invalid = |why: &str| {
        SqsError::invalid_parameter_value(format!(
            "Value {value} for parameter RedrivePolicy is invalid. Reason: {why}"
        ))
    };
    let policy: Value = serde_json::from_str(value).map_err(|_| invalid("Redrive policy is not a valid JSON map."))?;
    let target_arn = policy["deadLetterTargetArn"]
        .as_str()
        .ok_or_else(|| invalid("Redrive policy does not contain mandatory attribute: deadLetterTargetArn."))?;
    let count = &policy["maxReceiveCount"];
    let count = count.as_u64().or_else(|| count.as_str().and_then(|s| s.parse().ok()));
    let max_receive_count = count
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| (1..=1000).contains(n))
        .ok_or_else(|| invalid("Invalid value for maxReceiveCount: must be an integer from 1 to 1000."))?;
    Ok(Some(Redrive { target_arn: target_arn.to_owned(), max_receive_count }))
}

impl Settings {
    /// These settings with `attributes` applied; an unknown name or a value out of range changes nothing.
    pub(crate) fn with(&self, attributes: &BTreeMap<String, String>) -> Result<Settings, SqsError> {
        let mut settings = self.clone();
        for (name, value) in attributes {
            match name.as_str() {
                "VisibilityTimeout" => settings.visibility_timeout = ranged(name, value, 0, 43_200)?,
                "DelaySeconds" => settings.delay_seconds = ranged(name, value, 0, 900)?,
                "MessageRetentionPeriod" => settings.retention_seconds = ranged(name, value, 60, 1_209_600)?,
                "MaximumMessageSize" => settings.maximum_message_size = ranged(name, value, 1024, 1_048_576)?,
                "ReceiveMessageWaitTimeSeconds" => settings.receive_wait_seconds = ranged(name, value, 0, 20)?,
                "RedrivePolicy" => settings.redrive = redrive(value)?,
                fifo if FIFO_ONLY.contains(&fifo) => return Err(SqsError::unsupported("A FIFO queue")),
                kept if KEPT_AS_GIVEN.contains(&kept) => {
                    settings.kept.insert(name.clone(), value.clone());
                }
                _ => return Err(SqsError::invalid_attribute_name(name)),
            }
        }
        Ok(settings)
    }

    /// Whether `name` is one of SQS's queue attributes that are settings (told where set).
    pub(crate) fn is_attribute(name: &str) -> bool {
        let settings = ["VisibilityTimeout", "DelaySeconds", "MessageRetentionPeriod", "MaximumMessageSize"];
        let more = ["ReceiveMessageWaitTimeSeconds", "RedrivePolicy"];
        [&settings[..], &more, &KEPT_AS_GIVEN, &FIFO_ONLY].iter().any(|names| names.contains(&name))
    }

    /// The value GetQueueAttributes tells for a setting, None for a name that is no setting (or one not set).
    pub(crate) fn told(&self, name: &str) -> Option<String> {
        Some(match name {
            "VisibilityTimeout" => self.visibility_timeout.to_string(),
            "DelaySeconds" => self.delay_seconds.to_string(),
            "MessageRetentionPeriod" => self.retention_seconds.to_string(),
            "MaximumMessageSize" => self.maximum_message_size.to_string(),
            "ReceiveMessageWaitTimeSeconds" => self.receive_wait_seconds.to_string(),
            "RedrivePolicy" => {
                let redrive = self.redrive.as_ref()?;
                serde_json::json!({ "deadLetterTargetArn": redrive.target_arn, "maxReceiveCount": redrive.max_receive_count })
                    .to_string()
            }
            kept => self.kept.get(kept)?.clone(),
        })
    }

    /// The names of every setting GetQueueAttributes tells for "All".
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        let fixed = ["VisibilityTimeout", "DelaySeconds", "MessageRetentionPeriod", "MaximumMessageSize"];
        let more = ["ReceiveMessageWaitTimeSeconds"].into_iter().chain(self.redrive.as_ref().map(|_| "RedrivePolicy"));
        fixed.into_iter().chain(more).chain(self.kept.keys().map(String::as_str))
    }

    /// The first attribute in `attributes` whose value differs from this queue's (CreateQueue on an existing name).
    pub(crate) fn differing<'a>(&self, attributes: &'a BTreeMap<String, String>) -> Result<Option<&'a str>, SqsError> {
        let wanted = Settings::default().with(attributes)?;
        Ok(attributes.keys().map(String::as_str).find(|name| wanted.told(name) != self.told(name)))
    }
}

/// A message attribute: its data type (`String`, `Number`, `Binary`, each with an optional `.label`) and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MessageAttribute {
    pub data_type: String,
    /// The string value, or the binary one as raw bytes.
    pub value: Vec<u8>,
}

impl MessageAttribute {
    fn is_binary(&self) -> bool {
        self.data_type.starts_with("Binary")
    }

    /// Its bytes as SendMessage counts them toward the message size: name, type and value.
    pub(crate) fn size(&self, name: &str) -> usize {
        name.len() + self.data_type.len() + self.value.len()
    }

    pub(crate) fn json(&self) -> Value {
        let mut object = Map::new();
        object.insert("DataType".into(), Value::String(self.data_type.clone()));
        if self.is_binary() {
            let encoded = base64::engine::general_purpose::STANDARD.encode(&self.value);
            object.insert("BinaryValue".into(), Value::String(encoded));
        } else {
            object.insert("StringValue".into(), Value::String(String::from_utf8_lossy(&self.value).into_owned()));
        }
        Value::Object(object)
    }
}

pub(crate) type MessageAttributes = BTreeMap<String, MessageAttribute>;

/// A SendMessage's `MessageAttributes`: at most 10, each with a type of String, Number or Binary and its value.
pub(crate) fn message_attributes(given: Option<&Value>) -> Result<MessageAttributes, SqsError> {
    let Some(given) = given.filter(|v| !v.is_null()) else { return Ok(MessageAttributes::new()) };
    let given = given.as_object().ok_or_else(|| SqsError::malformed("MessageAttributes is not a map"))?;
    if given.len() > 10 {
        return Err(SqsError::invalid_parameter_value(format!(
            "Number of message attributes [{}] exceeds the allowed maximum [10].",
            given.len()
        )));
    }
    let mut attributes = MessageAttributes::new();
    for (name, value) in given {
        let data_type = value["DataType"].as_str().unwrap_or_default();
        let invalid = |why: &str| SqsError::invalid_parameter_value(format!("The message attribute '{name}' {why}"));
        let value = match data_type.split('.').next() {
            Some("String" | "Number") => value["StringValue"].as_str().map(|s| s.as_bytes().to_vec()),
            Some("Binary") => value["BinaryValue"]
                .as_str()
                .map(|s| {
                    base64::engine::general_purpose::STANDARD
                        .decode(s)
                        .map_err(|_| invalid("has an invalid binary value."))
                })
                .transpose()?,
            _ => {
                return Err(invalid(
                    "has an invalid message attribute type, the set of supported type prefixes is Binary, Number, and String.",
                ));
            }
        };
        let value = value
            .filter(|v| !v.is_empty())
            .ok_or_else(|| invalid("must contain a non-empty value of message attribute type"))?;
        attributes.insert(name.clone(), MessageAttribute { data_type: data_type.to_owned(), value });
    }
    Ok(attributes)
}

/// MD5OfMessageAttributes as SQS computes it (Developer Guide, "Calculating the MD5 message digest for message
/// attributes"): over the attributes sorted by name, each as its name, its data type (both length-prefixed), a
/// transport byte (1 for String and Number, 2 for Binary) and its length-prefixed value; lengths are 4-byte big-endian.
pub(crate) fn attributes_md5(attributes: &MessageAttributes) -> Option<String> {
    if attributes.is_empty() {
        return None;
    }
    let mut bytes = Vec::new();
    let field = |bytes: &mut Vec<u8>, value: &[u8]| {
        bytes.extend_from_slice(&u32::try_from(value.len()).unwrap_or(u32::MAX).to_be_bytes());
        bytes.extend_from_slice(value);
    };
    for (name, attribute) in attributes {
        field(&mut bytes, name.as_bytes());
        field(&mut bytes, attribute.data_type.as_bytes());
        bytes.push(if attribute.is_binary() { 2 } else { 1 });
        field(&mut bytes, &attribute.value);
    }
    Some(hex::encode(Md5::digest(&bytes)))
}

/// The attributes a receive asked for by `names`: "All" or ".*" for every one, "prefix.*" for those it starts.
pub(crate) fn chosen(attributes: &MessageAttributes, names: &[String]) -> MessageAttributes {
    let wanted = |name: &str| {
        names.iter().any(|asked| {
            if asked == "All" || asked == ".*" {
                return true;
            }
            match asked.strip_suffix(".*") {
                Some(prefix) => name.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('.')),
                None => asked == name,
            }
        })
    };
    attributes
        .iter()
        .filter(|(name, _)| wanted(name))
        .map(|(name, attribute)| (name.clone(), attribute.clone()))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_redrive_policy_takes_its_count_as_a_number_or_a_string() {
        let set = |policy: &str| Settings::default().with(&BTreeMap::from([("RedrivePolicy".into(), policy.into())]));
        let policy = set(r#"{"deadLetterTargetArn": "arn:aws:sqs:us-east-1:1:dlq", "maxReceiveCount": "3"}"#).unwrap();
        assert_eq!(policy.redrive.unwrap().max_receive_count, 3);
        assert!(set(r#"{"deadLetterTargetArn": "a", "maxReceiveCount": 0}"#).is_err());
        assert!(set("not json").is_err());
    }

    #[test]
    fn the_attributes_digest_is_the_one_sqs_documents() {
        // The digest of one String attribute, computed by the documented encoding by hand:
        // 00000004 "name" 00000006 "String" 01 00000005 "value".
        let attributes = MessageAttributes::from([(
            "name".to_owned(),
            MessageAttribute { data_type: "String".into(), value: b"value".to_vec() },
        )]);
        let mut bytes = vec![0, 0, 0, 4];
        bytes.extend_from_slice(b"name");
        bytes.extend_from_slice(&[0, 0, 0, 6]);
        bytes.extend_from_slice(b"String");
        bytes.extend_from_slice(&[1, 0, 0, 0, 5]);
        bytes.extend_from_slice(b"value");
        assert_eq!(attributes_md5(&attributes), Some(hex::encode(Md5::digest(&bytes))));
    }

    #[test]
    fn a_receive_chooses_attributes_by_name_prefix_or_all() {
        let attribute = MessageAttribute { data_type: "String".into(), value: b"v".to_vec() };
        let attributes: MessageAttributes =
            ["Error.Reason", "Error", "Other"].iter().map(|n| ((*n).to_owned(), attribute.clone())).collect();
        let names = |asked: &[&str]| {
            let asked: Vec<String> = asked.iter().map(|s| (*s).to_owned()).collect();
            chosen(&attributes, &asked).into_keys().collect::<Vec<_>>()
        };
        assert_eq!(names(&["All"]).len(), 3);
        assert_eq!(names(&["Error.*"]), ["Error.Reason"]);
        assert_eq!(names(&["Other"]), ["Other"]);
    }
}
