//! POST /v1/responses's body: the fields gpuinfer runs, each checked (any other refused by name, in OpenAI's error
//! shape), and the pipeline request and the record it becomes. A response is a chat: `instructions` first as a
//! system message, then the conversation it continues (`previous_response_id`), then `input` (a string, or items:
//! messages whose content is a string or text parts, function calls and their outputs).

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use super::error::OpenAiError;
use super::objects::metadata;
use super::response_record::{AnswerShape, Asked, ResponseRecord};
use super::response_shape::{InputItem, chat_tool, chat_tool_choice, input_items, response_format};
use super::settings::ModelTiers;
use crate::contract::openai_response::response_id;
use crate::contract::request::{InferenceRequest, Intake, Origin, RequestError};

/// The fields a create may carry; any other is refused by name.
const FIELDS: [&str; 19] = [
    "model",
    "input",
    "instructions",
    "max_output_tokens",
    "temperature",
    "top_p",
    "top_logprobs",
    "include",
    "truncation",
    "text",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "previous_response_id",
    "metadata",
    "store",
    "background",
    "service_tier",
    "stream",
];

/// A create's body, checked, before the conversation it continues is known.
#[derive(Debug)]
pub(crate) struct Ask {
    /// The response it continues, whose turns the handler reads (`previous_response_id`).
    pub(crate) previous_response_id: Option<String>,
    model: String,
    asked: Asked,
    shape: AnswerShape,
    metadata: Map<String, Value>,
    /// The pipeline request's fields other than its messages.
    fields: Map<String, Value>,
    service_tier: &'static str,
    background: bool,
}

/// A checked create: the request it runs as, and the record kept for the Response object.
#[derive(Debug)]
pub(crate) struct Create {
    pub(crate) request: InferenceRequest,
    pub(crate) record: ResponseRecord,
}

/// Checks a create's body.
pub(crate) fn read(body: &[u8], models: &ModelTiers) -> Result<Ask, OpenAiError> {
    let Ok(Value::Object(ask)) = crate::contract::request::parse_json(body) else {
        return Err(OpenAiError::invalid("body: a JSON object with model and input"));
    };
    read_fields(ask, models)
}

/// Checks a create's body already parsed (a Batch line's).
pub(crate) fn read_fields(mut ask: Map<String, Value>, models: &ModelTiers) -> Result<Ask, OpenAiError> {
    // As in OpenAI's API, null is "not given"; so are no tools and no streaming.
    let (no_tools, no_stream) = (json!([]), json!(false));
    let absent = |name: &str, value: &Value| {
        value.is_null() || (name, value) == ("tools", &no_tools) || (name, value) == ("stream", &no_stream)
    };
    ask.retain(|name, value| !absent(name, value));
    if let Some(other) = ask.keys().find(|name| !FIELDS.contains(&name.as_str())) {
        let supported = FIELDS.join(", ");
        return Err(OpenAiError::invalid_param(
            other,
            format!("{other}: not supported by gpuinfer (supported: {supported})"),
        ));
    }
    if ask.contains_key("stream") {
        return Err(OpenAiError::invalid_param(
            "stream",
            "stream: gpuinfer does not stream; poll the response instead",
        ));
    }
    if ask.remove("store").is_some_and(|store| store != json!(true)) {
        let why = "store: must be true: a background response must be stored, and gpuinfer keeps every response \
                   (one not waited for is polled)";
        return Err(OpenAiError::invalid_param("store", why));
    }
    let background = match ask.remove("background") {
        None => false,
        Some(Value::Bool(background)) => background,
        Some(_) => return Err(OpenAiError::invalid_param("background", "background: must be true or false")),
    };
    let model = match ask.remove("model") {
        Some(Value::String(model)) if !model.is_empty() => model,
        _ => {
            return Err(OpenAiError::invalid_param(
                "model",
                "model: required, a model name (GET /v1/models lists them)",
            ));
        }
    };
    let instructions = match ask.remove("instructions") {
        None => None,
        Some(Value::String(text)) => Some(text),
        Some(_) => return Err(OpenAiError::invalid_param("instructions", "instructions: must be a string")),
    };
    let previous_response_id = match ask.remove("previous_response_id") {
        None => None,
        Some(Value::String(id)) => Some(id),
        Some(_) => {
            let why = "previous_response_id: the id of an earlier response (resp_…)";
            return Err(OpenAiError::invalid_param("previous_response_id", why));
        }
    };
    let input = input_items(ask.remove("input"))?;
    let metadata = metadata(ask.remove("metadata"))?.unwrap_or_default();
    let (service_tier, priority) = lane(ask.remove("service_tier"))?;
    let (mut fields, shape) = answer_fields(&mut ask)?;
    fields.insert("priority".into(), json!(priority));
    check_include_and_truncation(&mut ask)?;
    if let Some(top) = ask.remove("top_logprobs") {
        fields.insert("logprobs".into(), json!(true));
        fields.insert("topLogprobs".into(), top);
    }
    for (theirs, ours) in [("max_output_tokens", "maxTokens"), ("temperature", "temperature"), ("top_p", "topP")] {
        if let Some(value) = ask.remove(theirs) {
            fields.insert(ours.into(), value);
        }
    }
    if let Some(tier) = models.tier_of(&model) {
        fields.insert("route".into(), json!(tier));
    }
    let asked = Asked { instructions, input, previous_response_id: previous_response_id.clone(), context: vec![] };
    Ok(Ask { previous_response_id, model, asked, shape, metadata, fields, service_tier, background })
}

impl Ask {
    /// The request and record of this create, accepted at `now`, continuing `context` (the earlier turns, in order).
    pub(crate) fn create(self, context: Vec<InputItem>, now: DateTime<Utc>) -> Result<Create, OpenAiError> {
        let Ask { model, mut asked, shape, metadata, mut fields, service_tier, background, .. } = self;
        asked.context = context;
        let system = asked.instructions.iter().map(|text| json!({ "role": "system", "content": text }));
        let turns = asked.context.iter().chain(&asked.input).map(InputItem::chat_message);
        fields.insert("messages".into(), system.chain(turns).collect());
        // Sent without a requestId: the router makes one (`RequestId::router_made`), which the response id maps.
        let mut request = InferenceRequest::from_value(Value::Object(fields), Intake::Api(now)).map_err(refusal)?;
        request.origin = Origin::Response;
        let record = ResponseRecord {
            id: response_id(request.request_id),
            created_at: now.timestamp(),
            model,
            asked,
            metadata,
            limits: (&request.sampling).into(),
            shape,
            service_tier: service_tier.into(),
            background,
            // The caller's project, which the handler gives it.
            owner: None,
        };
        Ok(Create { request, record })
    }
}

/// `text`, `tools`, `tool_choice` and `parallel_tool_calls`: the pipeline request's fields for them (chat's
/// shapes, as `responseFormat`, `tools`, …), and the shape the Response object echoes.
fn answer_fields(ask: &mut Map<String, Value>) -> Result<(Map<String, Value>, AnswerShape), OpenAiError> {
    let mut fields = Map::new();
    let mut shape = AnswerShape::default();
    if let Some(text) = ask.remove("text") {
        if let Some(format) = response_format(&text)? {
            fields.insert("responseFormat".into(), format);
        }
        shape.text = text;
    }
    if let Some(tools) = ask.remove("tools") {
        let Value::Array(list) = &tools else {
            return Err(OpenAiError::invalid_param("tools", "tools: a list of function tools"));
        };
        let chat: Result<Vec<Value>, _> =
            list.iter().enumerate().map(|(i, tool)| chat_tool(tool, &format!("tools[{i}]"))).collect();
        fields.insert("tools".into(), Value::Array(chat?));
        shape.tools = list.clone();
        shape.tool_choice = json!("auto");
    }
    if let Some(choice) = ask.remove("tool_choice") {
        fields.insert("toolChoice".into(), chat_tool_choice(&choice));
        shape.tool_choice = choice;
    }
    if let Some(parallel) = ask.remove("parallel_tool_calls") {
        shape.parallel_tool_calls = parallel.as_bool().unwrap_or_default();
        fields.insert("parallelToolCalls".into(), parallel);
    }
    Ok((fields, shape))
}

/// `include` may ask for the output text's log probabilities only (the one extra gpuinfer has; they come with
/// `top_logprobs`); `truncation` may only be `disabled`, as gpuinfer never drops input to fit the context.
fn check_include_and_truncation(ask: &mut Map<String, Value>) -> Result<(), OpenAiError> {
    if let Some(include) = ask.remove("include") {
        let known = |item: &Value| item == "message.output_text.logprobs";
        if !include.as_array().is_some_and(|items| items.iter().all(known)) {
            let why = "include: only [\"message.output_text.logprobs\"] (with top_logprobs): gpuinfer keeps no other \
                       extra (no reasoning, search or files)";
            return Err(OpenAiError::invalid_param("include", why));
        }
    }
    match ask.remove("truncation") {
        None => Ok(()),
        Some(truncation) if truncation == "disabled" => Ok(()),
        Some(_) => Err(OpenAiError::invalid_param(
            "truncation",
            "truncation: \"disabled\" only: gpuinfer never drops input; the engine refuses a prompt over its context",
        )),
    }
}

/// `service_tier` as the Response object names it, and the lane it picks.
fn lane(service_tier: Option<Value>) -> Result<(&'static str, &'static str), OpenAiError> {
    match service_tier.as_ref().map(Value::as_str) {
        None | Some(Some("auto" | "default")) => Ok(("default", "normal")),
        Some(Some("priority")) => Ok(("priority", "high")),
        Some(Some("flex")) => Ok(("flex", "batch")),
        Some(_) => Err(OpenAiError::invalid_param(
            "service_tier",
            "service_tier: \"auto\", \"default\", \"priority\" (the high lane) or \"flex\" (the batch lane)",
        )),
    }
}

/// A refusal of the pipeline's checks, named by the create's own fields.
fn refusal(error: RequestError) -> OpenAiError {
    match error {
        RequestError::Invalid { field, problem } => {
            let head = field.split(['.', '[']).next().unwrap_or_default();
            let name = match head {
                "maxTokens" => "max_output_tokens".to_owned(),
                "topP" => "top_p".to_owned(),
                "topLogprobs" => "top_logprobs".to_owned(),
                "temperature" => "temperature".to_owned(),
                // `text.format` is chat's `json_schema` object, flattened.
                "responseFormat" => {
                    format!("text.format{}", field["responseFormat".len()..].replacen(".json_schema", "", 1))
                }
                "toolChoice" => "tool_choice".to_owned(),
                "parallelToolCalls" => "parallel_tool_calls".to_owned(),
                // A chat tool's path (`tools[0].function.name`) is the Responses tool's without `function`.
                "tools" => field.replacen(".function", "", 1),
                _ => "input".to_owned(),
            };
            OpenAiError::invalid_param(&name, format!("{name}: {problem}"))
        }
        other => OpenAiError::too_large(other.to_string()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! A create's body: what it runs as, and each refusal naming its parameter.

    use super::*;
    use crate::contract::request::Input;
    use crate::contract::tier::{Priority, Tier};

    fn read_body(body: Value) -> Result<Create, OpenAiError> {
        read(body.to_string().as_bytes(), &ModelTiers::parse("big-model=large").unwrap())?.create(vec![], Utc::now())
    }

    fn param(body: Value) -> Option<String> {
        read_body(body).unwrap_err().param
    }

    #[test]
    fn instructions_come_first_and_a_string_input_is_the_users_message() {
        let create = read_body(json!({"model": "big-model", "input": "Hi", "instructions": "Be brief.",
            "max_output_tokens": 12, "temperature": 0, "metadata": {"k": "v"}, "background": true, "store": true}))
        .unwrap();
        let Input::Messages(messages) = &create.request.input else { panic!("a chat") };
        let roles: Vec<(&str, &str)> = messages.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect();
        assert_eq!(roles, [("system", "Be brief."), ("user", "Hi")]);
        let request = &create.request;
        assert_eq!(
            (request.sampling.max_tokens, request.sampling.temperature, request.route),
            (12, 0.0, Some(Tier::Large))
        );
        let record = &create.record;
        assert_eq!(record.id, response_id(request.request_id));
        assert!(request.request_id.is_router_made());
        assert_eq!(
            (record.model.as_str(), record.background, record.limits.max_output_tokens),
            ("big-model", true, 12)
        );
        assert_eq!(record.asked.input, [InputItem::Message { role: "user".into(), text: "Hi".into() }]);
        assert_eq!(record.metadata["k"], "v");
    }

    #[test]
    fn messages_take_text_parts_and_developer_runs_as_system() {
        let input = json!([
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Rules."}]},
            {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
        ]);
        let create = read_body(json!({"model": "gemma", "input": input, "service_tier": "priority"})).unwrap();
        let Input::Messages(messages) = &create.request.input else { panic!("a chat") };
        let roles: Vec<(&str, &str)> = messages.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect();
        assert_eq!(roles, [("system", "Rules."), ("user", "a\nb")]);
        assert!(
            matches!(&create.record.asked.input[0], InputItem::Message { role, .. } if role == "developer"),
            "listed as sent"
        );
        assert_eq!((create.request.route, create.request.priority), (None, Priority::High));
        assert!(!create.record.background, "OpenAI's default");
    }

    #[test]
    fn what_gpuinfer_does_not_run_is_refused_by_name() {
        let base = || json!({"model": "small", "input": "Hi"});
        let with = |name: &str, value: Value| {
            let mut body = base();
            body[name] = value;
            body
        };
        let cases = [
            (with("tools", json!([{"type": "web_search"}])), "tools[0].type"),
            (with("reasoning", json!({"effort": "low"})), "reasoning"),
            (with("previous_response_id", json!(7)), "previous_response_id"),
            (with("include", json!(["reasoning.encrypted_content"])), "include"),
            (with("truncation", json!("auto")), "truncation"),
            (with("top_logprobs", json!(21)), "top_logprobs"),
            (with("text", json!({"format": {"type": "xml"}})), "text.format.type"),
            (
                with("text", json!({"format": {"type": "json_schema", "name": "x", "schema": {"type": 1}}})),
                "text.format.schema",
            ),
            (with("text", json!({"format": {"type": "json_schema", "schema": {}}})), "text.format.name"),
            (with("tools", json!([{"type": "function", "name": "a b"}])), "tools[0].name"),
            (with("tools", json!([{"type": "file_search"}])), "tools[0].type"),
            (with("tool_choice", json!("required")), "tool_choice"),
            (with("input", json!([{"type": "function_call", "call_id": "c"}])), "input[0]"),
            (with("stream", json!(true)), "stream"),
            (with("store", json!(false)), "store"),
            (with("max_output_tokens", json!(99_999)), "max_output_tokens"),
            (with("top_p", json!(0)), "top_p"),
            (with("metadata", json!({"k": 1})), "metadata"),
            (with("input", json!([{"role": "user", "content": [{"type": "input_image"}]}])), "input[0].content[0]"),
            (with("input", json!([{"role": "tool", "content": "x"}])), "input[0].role"),
            (with("input", json!([{"type": "item_reference", "id": "x"}])), "input[0].type"),
            (with("input", json!("")), "input"),
            (json!({"input": "Hi"}), "model"),
        ];
        for (body, expected) in cases {
            assert_eq!(param(body.clone()).as_deref(), Some(expected), "{body}");
        }
    }

    #[test]
    fn formats_tools_and_function_items_run_in_chats_shape_and_are_kept_as_sent() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        let format = json!({"type": "json_schema", "name": "count", "schema": schema, "strict": true});
        let tool = json!({"type": "function", "name": "add", "description": null, "parameters": {"type": "object"}, "strict": true});
        let input = json!([
            {"role": "user", "content": "1+1?"},
            {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "2"},
        ]);
        let create = read_body(json!({"model": "m", "input": input, "text": {"format": format}, "tools": [tool],
            "tool_choice": {"type": "function", "name": "add"}, "parallel_tool_calls": false}))
        .unwrap();
        let output = &create.request.output;
        assert_eq!(
            output.response_format,
            Some(json!({"type": "json_schema", "json_schema": {"name": "count", "schema": schema, "strict": true}}))
        );
        assert_eq!(
            output.tools,
            [
                json!({"type": "function", "function": {"name": "add", "parameters": {"type": "object"}, "strict": true}})
            ]
        );
        assert_eq!(output.tool_choice, Some(json!({"type": "function", "function": {"name": "add"}})));
        let Input::Messages(messages) = &create.request.input else { panic!("a chat") };
        let roles: Vec<&str> = messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "tool"]);
        assert_eq!(create.record.shape.text["format"], format, "echoed as sent");
        assert_eq!(create.record.shape.tools, [tool]);
        assert_eq!(create.request.origin, Origin::Response);
    }

    #[test]
    fn a_continued_response_reads_its_context_before_its_input_and_keeps_it() {
        let ask = read(
            json!({"model": "m", "input": "And doubled?", "instructions": "Be brief.", "previous_response_id": "resp_1"})
                .to_string()
                .as_bytes(),
            &ModelTiers::default(),
        )
        .unwrap();
        assert_eq!(ask.previous_response_id.as_deref(), Some("resp_1"));
        let context = vec![
            InputItem::Message { role: "user".into(), text: "2+2?".into() },
            InputItem::Message { role: "assistant".into(), text: "4".into() },
        ];
        let create = ask.create(context.clone(), Utc::now()).unwrap();
        let Input::Messages(messages) = &create.request.input else { panic!("a chat") };
        let said: Vec<&str> = messages.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(said, ["Be brief.", "2+2?", "4", "And doubled?"]);
        assert_eq!(create.record.asked.context, context);
        assert_eq!(create.record.asked.previous_response_id.as_deref(), Some("resp_1"));
    }

    #[test]
    fn null_no_tools_and_no_streaming_are_not_given() {
        let body = json!({"model": "small", "input": "Hi", "tools": [], "stream": false, "reasoning": null});
        assert!(read_body(body).is_ok());
    }
}
