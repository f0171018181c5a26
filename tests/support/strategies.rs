//! proptest strategies for request bodies: arbitrary JSON, and objects shaped like requests whose fields
//! are sometimes valid and sometimes anything at all.

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Any JSON value, a few levels deep.
pub(crate) fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "\\PC{0,24}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map("[a-zA-Z]{1,8}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn uuid_v4() -> impl Strategy<Value = Value> {
    any::<[u8; 16]>().prop_map(|bytes| json!(uuid::Builder::from_random_bytes(bytes).into_uuid()))
}

fn chat_message() -> impl Strategy<Value = Value> {
    let role = prop_oneof![Just(json!("user")), Just(json!("system")), Just(json!("assistant")), json_value()];
    let content = prop_oneof!["\\PC{0,24}".prop_map(Value::from), json_value()];
    (role, content).prop_map(|(role, content)| json!({ "role": role, "content": content }))
}

/// A value for a request field: usually of the right kind (valid or near the limits), else anything.
fn field_value(field: &'static str) -> BoxedStrategy<Value> {
    let right_kind = match field {
        "requestId" => uuid_v4().boxed(),
        "prompt" => "\\PC{0,40}".prop_map(Value::from).boxed(),
        "messages" => vec(chat_message(), 0..3).prop_map(Value::Array).boxed(),
        "maxTokens" => (0u64..3000).prop_map(Value::from).boxed(),
        "temperature" | "topP" => (-1.0f64..3.0).prop_map(Value::from).boxed(),
        _ => prop_oneof![Just(json!("small")), Just(json!("large"))].boxed(),
    };
    prop_oneof![3 => right_kind, 1 => json_value()].boxed()
}

/// JSON objects with any subset of the request's fields, now and then with an unknown one (any name, empty
/// and control characters included).
pub(crate) fn request_like() -> impl Strategy<Value = Value> {
    let fields = ["requestId", "prompt", "messages", "maxTokens", "temperature", "topP", "route"]
        .map(|field| proptest::option::of(field_value(field)).prop_map(move |value| (field, value)));
    let unknown =
        proptest::option::weighted(0.1, (prop_oneof!["[a-z]{1,8}", "\\PC{0,8}", "[\\x00-\\x1f\"]{0,3}"], json_value()));
    (fields, unknown).prop_map(|(fields, unknown)| {
        let mut object: Map<String, Value> =
            fields.into_iter().filter_map(|(field, value)| Some((field.to_owned(), value?))).collect();
        if let Some((name, value)) = unknown {
            object.insert(name, value);
        }
        Value::Object(object)
    })
}

/// Request bodies: shaped like requests most of the time, else arbitrary bytes.
pub(crate) fn body_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![3 => request_like().prop_map(|v| v.to_string().into_bytes()), 1 => vec(any::<u8>(), 0..256)]
}
