//! A batch's input file, line by line: the checks each line passes (all lines, or the batch fails, as OpenAI
//! validates) and the pipeline request a line becomes.

use chrono::{DateTime, Utc};
use std::io::ErrorKind;

use futures_util::{Stream, TryStreamExt, stream};
use serde_json::{Map, Value, json};
use tokio::io::AsyncBufReadExt;
use tokio_util::io::StreamReader;

use super::error::OpenAiError;
use super::response_input::{self, Create};
use super::settings::ModelTiers;
use crate::contract::batch_line::BatchLine;
use crate::contract::request::{InferenceRequest, Intake, MAX_REQUEST_BYTES, Origin, RequestError};
use crate::contract::tier::Priority;
use crate::ports::ByteChunks;

/// The endpoints a batch may run, as OpenAI names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    ChatCompletions,
    Completions,
    Responses,
}

impl Endpoint {
    pub(crate) fn parse(text: &str) -> Option<Endpoint> {
        match text {
            "/v1/chat/completions" => Some(Endpoint::ChatCompletions),
            "/v1/completions" => Some(Endpoint::Completions),
            "/v1/responses" => Some(Endpoint::Responses),
            _ => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "/v1/chat/completions",
            Endpoint::Completions => "/v1/completions",
            Endpoint::Responses => "/v1/responses",
        }
    }

    /// The body field that carries the input on this endpoint.
    fn input_field(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "messages",
            Endpoint::Completions => "prompt",
            Endpoint::Responses => "input",
        }
    }
}

/// The body fields a line may carry besides its input and those of `RENAMED`; any other is refused by name.
const BODY_FIELDS: [&str; 6] = ["model", "max_tokens", "max_completion_tokens", "n", "stream", "store"];

/// The request fields a line's body carries under OpenAI's names, and the pipeline's name of each.
const RENAMED: [(&str, &str); 15] = [
    ("temperature", "temperature"),
    ("top_p", "topP"),
    ("seed", "seed"),
    ("presence_penalty", "presencePenalty"),
    ("frequency_penalty", "frequencyPenalty"),
    ("logit_bias", "logitBias"),
    ("logprobs", "logprobs"),
    ("top_logprobs", "topLogprobs"),
    ("response_format", "responseFormat"),
    ("stop", "stop"),
    ("tools", "tools"),
    ("tool_choice", "toolChoice"),
    ("parallel_tool_calls", "parallelToolCalls"),
    ("user", "user"),
    ("metadata", "metadata"),
];

/// The most alternatives a /v1/completions line's `logprobs` asks for, as OpenAI bounds it there.
const MAX_COMPLETION_LOGPROBS: u64 = 5;

/// A line that fails its checks: OpenAI's batch error entry.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct LineError {
    pub code: &'static str,
    pub message: String,
    pub(crate) param: Option<String>,
    /// The line's number in the file, from 1 (blank lines counted, as an editor counts them).
    pub line: u64,
}

/// One non-blank line of the file: its number in the file and its text.
pub(crate) type NumberedLine = (u64, String);

/// Where a read of a file's lines stands: the byte offset of the next line, how many lines (blank ones too) come
/// before it, and how many of those are not blank (the next line's index in the batch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Position {
    pub(crate) offset: u64,
    pub(crate) number: u64,
    pub(crate) index: u32,
}

/// The non-blank lines of a stored file, in order.
pub(crate) fn lines(
    chunks: ByteChunks<'static>,
) -> impl Stream<Item = Result<NumberedLine, std::io::Error>> + Send + Unpin {
    lines_from(chunks, Position::default()).map_ok(|(line, _)| line)
}

/// The non-blank lines of the file read from `at` on (`chunks` start at its offset), each with the position after
/// it.
pub(crate) fn lines_from(
    chunks: ByteChunks<'static>,
    at: Position,
) -> impl Stream<Item = Result<(NumberedLine, Position), std::io::Error>> + Send + Unpin {
    let state = (StreamReader::new(chunks), at);
    Box::pin(stream::unfold(state, |(mut reader, mut at)| async move {
        loop {
            let mut bytes = Vec::new();
            let read = match reader.read_until(b'\n', &mut bytes).await {
                Ok(0) => return None,
                Ok(read) => read,
                Err(error) => return Some((Err(error), (reader, at))),
            };
            at.offset += read as u64;
            at.number += 1;
            let text = match String::from_utf8(bytes) {
                Ok(text) => text,
                Err(error) => return Some((Err(std::io::Error::new(ErrorKind::InvalidData, error)), (reader, at))),
            };
            let text = text.strip_suffix('\n').map_or(text.as_str(), |t| t.strip_suffix('\r').unwrap_or(t));
            if text.trim().is_empty() {
                continue;
            }
            let line = (at.number, text.to_owned());
            at.index += 1;
            return Some((Ok((line, at)), (reader, at)));
        }
    }))
}

/// What the output needs of a line again: its `custom_id` and the model it named.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LineLabel {
    pub(crate) custom_id: String,
    pub model: String,
}

/// A checked line: its label and the request it runs as.
#[derive(Debug)]
pub(crate) struct CheckedLine {
    pub(crate) label: LineLabel,
    pub(crate) request: InferenceRequest,
}

/// The line's label alone, for a file already checked.
pub(crate) fn label(text: &str) -> LineLabel {
    let value: Value = serde_json::from_str(text).unwrap_or_default();
    LineLabel {
        custom_id: value["custom_id"].as_str().unwrap_or_default().to_owned(),
        model: value["body"]["model"].as_str().unwrap_or_default().to_owned(),
    }
}

/// Checks line `number` (`text`), the `index`-th request of batch `batch_id`, and makes its request: deadline the
/// batch's expiry, id derived from batch, index and the batch's `key`, routed by `models` where its model is mapped.
pub(crate) fn check(
    (number, text): &NumberedLine,
    endpoint: Endpoint,
    models: &ModelTiers,
    (line, key): (BatchLine, Option<&[u8]>),
    expires_at: DateTime<Utc>,
) -> Result<CheckedLine, LineError> {
    let fail = |param: &str, message: String| LineError {
        code: "invalid_request",
        message,
        param: (!param.is_empty()).then(|| param.to_owned()),
        line: *number,
    };
    let Ok(Value::Object(mut object)) = serde_json::from_str::<Value>(text) else {
        return Err(fail("", "not a JSON object".into()));
    };
    let custom_id = match object.remove("custom_id") {
        Some(Value::String(id)) if !id.is_empty() => id,
        _ => return Err(fail("custom_id", "custom_id: required, a non-empty string".into())),
    };
    match object.remove("method") {
        Some(Value::String(method)) if method == "POST" => {}
        _ => return Err(fail("method", "method: must be \"POST\"".into())),
    }
    match object.remove("url") {
        Some(Value::String(url)) if url == endpoint.as_str() => {}
        _ => return Err(fail("url", format!("url: must be the batch's endpoint, {:?}", endpoint.as_str()))),
    }
    let Some(Value::Object(body)) = object.remove("body") else {
        return Err(fail("body", "body: required, a JSON object (the request to the endpoint)".into()));
    };
    if let Some(other) = object.keys().next() {
        return Err(fail(other, format!("{other}: unknown field (a line has custom_id, method, url, body)")));
    }
    let made = match endpoint {
        Endpoint::Responses => response_request(body, models),
        _ => request_of(body, endpoint, models),
    };
    let (model, mut request) = made.map_err(|(param, message)| fail(&param, message))?;
    request.request_id = line.request_id(key);
    request.priority = Priority::Batch;
    request.deadline = Some(expires_at);
    request.origin = Origin::BatchLine(line);
    if request.to_queue_body().len() > MAX_REQUEST_BYTES {
        return Err(fail("body", format!("body: larger than a queue message ({MAX_REQUEST_BYTES} bytes) once queued")));
    }
    Ok(CheckedLine { label: LineLabel { custom_id, model }, request })
}

/// The pipeline request an OpenAI request body asks for, and its model; else the parameter at fault and why.
fn request_of(
    mut body: Map<String, Value>,
    endpoint: Endpoint,
    models: &ModelTiers,
) -> Result<(String, InferenceRequest), (String, String)> {
    let param = |name: &str| format!("body.{name}");
    let input_field = endpoint.input_field();
    // As in OpenAI's API, null is "not given".
    body.retain(|_, value| !value.is_null());
    let known =
        |k: &str| k == input_field || BODY_FIELDS.contains(&k) || RENAMED.iter().any(|(theirs, _)| *theirs == k);
    if let Some(other) = body.keys().find(|k| !known(k)) {
        let renamed = RENAMED.iter().map(|(theirs, _)| *theirs);
        let supported = [input_field].into_iter().chain(BODY_FIELDS).chain(renamed).collect::<Vec<_>>().join(", ");
        return Err((param(other), format!("body.{other}: not supported by gpuinfer (supported: {supported})")));
    }
    if body.remove("store").is_some_and(|store| !store.is_boolean()) {
        return Err((param("store"), "body.store: true or false (every result is stored either way)".into()));
    }
    if endpoint == Endpoint::Completions
        && let Some(logprobs) = body.remove("logprobs")
    {
        // /v1/completions counts alternatives in `logprobs` itself (0 to 5).
        let Some(n) = logprobs.as_u64().filter(|n| *n <= MAX_COMPLETION_LOGPROBS) else {
            let why = format!("body.logprobs: an integer from 0 to {MAX_COMPLETION_LOGPROBS} on /v1/completions");
            return Err((param("logprobs"), why));
        };
        body.insert("logprobs".into(), json!(true));
        body.insert("top_logprobs".into(), json!(n));
    }
    let model = match body.remove("model") {
        Some(Value::String(model)) if !model.is_empty() => model,
        _ => return Err((param("model"), "body.model: required, a model name (GET /v1/models lists them)".into())),
    };
    if body.remove("n").is_some_and(|n| n != json!(1)) {
        return Err((param("n"), "body.n: only 1 completion per request".into()));
    }
    if body.remove("stream").is_some_and(|s| s != json!(false)) {
        return Err((param("stream"), "body.stream: a batch does not stream".into()));
    }
    let mut request = Map::new();
    let Some(input) = body.remove(input_field) else {
        return Err((param(input_field), format!("body.{input_field}: required on {}", endpoint.as_str())));
    };
    request.insert(input_field.into(), input);
    let max_tokens = match (body.remove("max_tokens"), body.remove("max_completion_tokens")) {
        (Some(_), Some(_)) => {
            return Err((param("max_tokens"), "body.max_tokens: give max_tokens or max_completion_tokens".into()));
        }
        (one, other) => one.or(other),
    };
    if let Some(max_tokens) = max_tokens {
        request.insert("maxTokens".into(), max_tokens);
    }
    for (theirs, ours) in RENAMED {
        if let Some(value) = body.remove(theirs) {
            request.insert(ours.into(), value);
        }
    }
    if let Some(tier) = models.tier_of(&model) {
        request.insert("route".into(), json!(tier));
    }
    let parsed = InferenceRequest::from_value(Value::Object(request), Intake::Api(Utc::now()));
    parsed.map(|request| (model, request)).map_err(|error| match error {
        RequestError::Invalid { field, problem } => {
            let name = openai_name(&field);
            (param(&name), format!("body.{name}: {problem}"))
        }
        other => (param(input_field), other.to_string()),
    })
}

/// The pipeline request a Responses body asks for (checked as POST /v1/responses checks it), and its model; else the
/// parameter at fault and why. A line stands alone: it continues no earlier response.
fn response_request(
    body: Map<String, Value>,
    models: &ModelTiers,
) -> Result<(String, InferenceRequest), (String, String)> {
    let refused = |error: OpenAiError| {
        let param = format!("body.{}", error.param.as_deref().unwrap_or("input"));
        (param, format!("body.{}", error.message))
    };
    let ask = response_input::read_fields(body, models).map_err(refused)?;
    if ask.previous_response_id.is_some() {
        let why = "body.previous_response_id: a batch line stands alone; give the earlier turns in its input";
        return Err(("body.previous_response_id".into(), why.into()));
    }
    let Create { request, record } = ask.create(Vec::new(), Utc::now()).map_err(refused)?;
    Ok((record.model, request))
}

/// A refused field of the pipeline's request (`responseFormat.json_schema.name`) under OpenAI's name for it
/// (`response_format.json_schema.name`).
fn openai_name(field: &str) -> String {
    let head_end = field.find(['.', '[']).unwrap_or(field.len());
    let (head, rest) = field.split_at(head_end);
    let head = match head {
        "maxTokens" => "max_tokens",
        ours => RENAMED.iter().find(|(_, name)| *name == ours).map_or(ours, |(theirs, _)| theirs),
    };
    format!("{head}{rest}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Input lines: what passes, what each refusal names.

    use super::*;
    use crate::contract::request::Input;
    use crate::contract::tier::Tier;

    /// A batch's secret for its lines' ids.
    const KEY: &[u8] = b"the batch's secret";

    fn checked(text: &str, endpoint: Endpoint) -> Result<CheckedLine, LineError> {
        let models = ModelTiers::parse("big-model=large").unwrap();
        let line = BatchLine { id: "batch_x".into(), line: 3 };
        check(&(4, text.to_owned()), endpoint, &models, (line, Some(KEY)), Utc::now() + chrono::Duration::hours(24))
    }

    #[test]
    fn a_chat_line_becomes_a_request_under_the_lines_own_id() {
        let text = r#"{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"big-model","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":12,"temperature":0}}"#;
        let line = checked(text, Endpoint::ChatCompletions).unwrap();
        assert_eq!(line.label, LineLabel { custom_id: "a".into(), model: "big-model".into() });
        let request = line.request;
        assert_eq!(request.request_id, BatchLine { id: "batch_x".into(), line: 3 }.request_id(Some(KEY)));
        assert_eq!(
            (request.sampling.max_tokens, request.sampling.temperature, request.route),
            (12, 0.0, Some(Tier::Large))
        );
        assert!(matches!(request.input, Input::Messages(_)));
        assert!(request.deadline.is_some());
    }

    #[test]
    fn a_line_takes_openais_names_for_what_the_engines_honour() {
        let body = json!({"model": "m", "messages": [{"role": "developer", "content": [{"type": "text", "text": "x"}]}],
            "response_format": {"type": "json_object"}, "seed": 1, "stop": "END", "presence_penalty": 0.5,
            "frequency_penalty": 0.5, "logprobs": true, "top_logprobs": 2, "user": "u", "metadata": {"k": "v"},
            "store": false, "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto",
            "parallel_tool_calls": true, "n": 1, "temperature": null});
        let text = json!({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": body}).to_string();
        let request = checked(&text, Endpoint::ChatCompletions).unwrap().request;
        assert_eq!((request.sampling.seed, request.sampling.top_logprobs), (Some(1), Some(2)));
        assert_eq!(request.output.response_format, Some(json!({"type": "json_object"})));
        assert_eq!((request.output.stop.len(), request.output.tools.len()), (1, 1));
        assert_eq!(request.labels.metadata.unwrap()["k"], "v");
        let completion = r#"{"custom_id":"a","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":"x","logprobs":3,"stop":["a"]}}"#;
        let sampling = checked(completion, Endpoint::Completions).unwrap().request.sampling;
        assert_eq!((sampling.logprobs, sampling.top_logprobs), (true, Some(3)), "/v1/completions counts in logprobs");
    }

    #[test]
    fn a_refused_control_is_named_as_openai_names_it() {
        let body = |extra: Value| {
            let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
            body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            json!({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": body}).to_string()
        };
        let schema = json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 3}}});
        for (extra, param) in [
            (json!({"response_format": schema}), "body.response_format.json_schema.schema"),
            (json!({"top_logprobs": 2}), "body.top_logprobs"),
            (json!({"presence_penalty": 9}), "body.presence_penalty"),
            (json!({"tool_choice": "required"}), "body.tool_choice"),
            (json!({"store": "yes"}), "body.store"),
            (json!({"modalities": ["audio"]}), "body.modalities"),
        ] {
            let error = checked(&body(extra.clone()), Endpoint::ChatCompletions).unwrap_err();
            assert_eq!(error.param.as_deref(), Some(param), "{extra}: {}", error.message);
            assert!(error.message.starts_with(param), "{}", error.message);
        }
        let completion = r#"{"custom_id":"a","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":"x","logprobs":6}}"#;
        assert_eq!(checked(completion, Endpoint::Completions).unwrap_err().param.as_deref(), Some("body.logprobs"));
    }

    #[test]
    fn an_unmapped_model_is_left_to_the_heuristics() {
        let text =
            r#"{"custom_id":"a","method":"POST","url":"/v1/completions","body":{"model":"gemma","prompt":"Once"}}"#;
        assert_eq!(checked(text, Endpoint::Completions).unwrap().request.route, None);
    }

    #[test]
    fn each_refusal_names_the_parameter_and_line() {
        let cases = [
            (r#"{"custom_id":"a","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":"x"}}"#, "url"),
            (r#"{"method":"POST","url":"/v1/chat/completions","body":{}}"#, "custom_id"),
            (r#"{"custom_id":"a","method":"GET","url":"/v1/chat/completions","body":{}}"#, "method"),
            (r#"{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[]}}"#, "body.model"),
            (
                r#"{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"x"}],"audio":{}}}"#,
                "body.audio",
            ),
            (
                r#"{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":99999}}"#,
                "body.max_tokens",
            ),
            (
                r#"{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","prompt":"x"}}"#,
                "body.prompt",
            ),
        ];
        for (text, param) in cases {
            let error = checked(text, Endpoint::ChatCompletions).unwrap_err();
            assert_eq!(error.param.as_deref(), Some(param), "{text}: {}", error.message);
            assert_eq!(error.line, 4);
        }
    }
}
