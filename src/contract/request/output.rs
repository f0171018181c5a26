//! What the answer must be: a response format (text, any JSON object, or JSON valid against a schema), stop
//! sequences, and the function tools the model may call. Each is checked at the edge (a schema compiles, nothing it
//! names is ever fetched, sizes bounded) and an answer is held to its format once generated.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::refusal::{RequestError, clip, kind, shorten};

/// Most stop sequences a request names, as OpenAI bounds them.
pub(crate) const MAX_STOP_SEQUENCES: usize = 4;
/// Most function tools a request offers, as OpenAI documents.
pub(crate) const MAX_TOOLS: usize = 128;
/// Largest response format and largest tool list, each as JSON: the engine compiles them into a grammar per request.
pub(crate) const MAX_SCHEMA_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Output {
    /// OpenAI's `response_format` as sent, checked; absent for plain text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Function tools in OpenAI's chat shape (`{type: "function", function: {name, description, parameters}}`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
}

/// Takes the output fields out of a request body, each checked; `chat` says whether the input is messages.
pub(super) fn take_output(object: &mut Map<String, Value>, chat: bool) -> Result<Output, RequestError> {
    let response_format = object.remove("responseFormat").map(check_format).transpose()?.flatten();
    let stop = match object.remove("stop") {
        None => Vec::new(),
        Some(Value::String(one)) if !one.is_empty() => vec![one],
        Some(Value::Array(list))
            if (1..=MAX_STOP_SEQUENCES).contains(&list.len())
                && list.iter().all(|s| s.as_str().is_some_and(|s| !s.is_empty())) =>
        {
            list.into_iter().filter_map(|s| s.as_str().map(str::to_owned)).collect()
        }
        Some(other) => {
            let why =
                format!("a non-empty string or a list of 1 to {MAX_STOP_SEQUENCES} of them, got {}", clip(&other));
            return Err(RequestError::invalid("stop", why));
        }
    };
    let tools = match object.remove("tools") {
        None => Vec::new(),
        Some(tools) => check_tools(tools)?,
    };
    let tool_choice = object.remove("toolChoice").map(|choice| check_tool_choice(choice, &tools)).transpose()?;
    let parallel_tool_calls = match object.remove("parallelToolCalls") {
        None => None,
        Some(Value::Bool(parallel)) if !tools.is_empty() => Some(parallel),
        Some(Value::Bool(_)) => return Err(RequestError::invalid("parallelToolCalls", "needs tools")),
        Some(other) => {
            return Err(RequestError::invalid(
                "parallelToolCalls",
                format!("must be true or false, got {}", kind(&other)),
            ));
        }
    };
    if !chat && !tools.is_empty() {
        return Err(RequestError::invalid("tools", "need messages (a chat): a plain prompt cannot call a tool"));
    }
    Ok(Output { response_format, stop, tools, tool_choice, parallel_tool_calls })
}

/// A `responseFormat`: `{type: "text"}` (None), `{type: "json_object"}`, or `{type: "json_schema", json_schema:
/// {name, schema, strict?, description?}}` whose schema compiles.
fn check_format(format: Value) -> Result<Option<Value>, RequestError> {
    let invalid = |path: &str, why: String| RequestError::invalid(format!("responseFormat{path}"), why);
    if format.to_string().len() > MAX_SCHEMA_BYTES {
        return Err(invalid("", format!("larger than {} KiB as JSON", MAX_SCHEMA_BYTES / 1024)));
    }
    let Value::Object(fields) = &format else {
        return Err(invalid(
            "",
            format!("must be an object such as {{\"type\": \"json_object\"}}, got {}", kind(&format)),
        ));
    };
    let allowed: &[&str] = match fields.get("type").and_then(Value::as_str) {
        Some("text") => &["type"],
        Some("json_object") => &["type"],
        Some("json_schema") => &["type", "json_schema"],
        _ => return Err(invalid(".type", "must be \"text\", \"json_object\" or \"json_schema\"".into())),
    };
    if let Some(other) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(invalid(&format!(".{}", shorten(other, 40)), "unknown field".into()));
    }
    match fields["type"].as_str() {
        Some("text") => return Ok(None),
        Some("json_object") => return Ok(Some(format)),
        _ => {}
    }
    let Some(Value::Object(spec)) = fields.get("json_schema") else {
        return Err(invalid(".json_schema", "required: {name, schema, strict?, description?}".into()));
    };
    if let Some(other) = spec.keys().find(|k| !["name", "schema", "strict", "description"].contains(&k.as_str())) {
        return Err(invalid(&format!(".json_schema.{}", shorten(other, 40)), "unknown field".into()));
    }
    if !spec.get("name").and_then(Value::as_str).is_some_and(is_name) {
        return Err(invalid(".json_schema.name", "required: 1 to 64 letters, digits, _ or -".into()));
    }
    if spec.get("strict").is_some_and(|strict| !strict.is_boolean()) {
        return Err(invalid(".json_schema.strict", "must be true or false".into()));
    }
    if spec.get("description").is_some_and(|d| !d.is_string()) {
        return Err(invalid(".json_schema.description", "must be a string".into()));
    }
    let schema = spec.get("schema").ok_or_else(|| invalid(".json_schema.schema", "required: a JSON Schema".into()))?;
    compile(schema).map_err(|why| invalid(".json_schema.schema", why))?;
    Ok(Some(format))
}

/// Function tools: a list of at most 128 `{type: "function", function: {name, description?, parameters?,
/// strict?}}` with distinct names and parameters that compile as a schema.
fn check_tools(tools: Value) -> Result<Vec<Value>, RequestError> {
    if tools.to_string().len() > MAX_SCHEMA_BYTES {
        return Err(RequestError::invalid("tools", format!("larger than {} KiB as JSON", MAX_SCHEMA_BYTES / 1024)));
    }
    let Value::Array(list) = tools else {
        return Err(RequestError::invalid("tools", "must be a list of function tools"));
    };
    if list.len() > MAX_TOOLS {
        return Err(RequestError::invalid("tools", format!("at most {MAX_TOOLS} tools, got {}", list.len())));
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, tool) in list.iter().enumerate() {
        let invalid = |path: &str, why: &str| RequestError::invalid(format!("tools[{i}]{path}"), why);
        match tool["type"].as_str() {
            Some("function") => {}
            Some(other) => {
                let why = format!("{:?} tools are not served: gpuinfer runs function tools only", shorten(other, 40));
                return Err(invalid(".type", &why));
            }
            None => return Err(invalid(".type", "required: \"function\"")),
        }
        if let Some(other) =
            tool.as_object().and_then(|t| t.keys().find(|k| !["type", "function"].contains(&k.as_str())))
        {
            return Err(invalid(&format!(".{}", shorten(other, 40)), "unknown field (a tool has type, function)"));
        }
        let function = &tool["function"];
        let Some(fields) = function.as_object() else {
            return Err(invalid(".function", "required: {name, description?, parameters?, strict?}"));
        };
        let allowed = ["name", "description", "parameters", "strict"];
        if let Some(other) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(invalid(&format!(".function.{}", shorten(other, 40)), "unknown field"));
        }
        let name = function["name"].as_str().filter(|name| is_name(name));
        let Some(name) = name else {
            return Err(invalid(".function.name", "required: 1 to 64 letters, digits, _ or -"));
        };
        if !names.insert(name) {
            return Err(invalid(".function.name", "another tool has this name"));
        }
        if let Some(parameters) = fields.get("parameters") {
            compile(parameters).map_err(|why| invalid(".function.parameters", &why))?;
        }
    }
    Ok(list)
}

/// `toolChoice`: "none", "auto", "required", or `{type: "function", function: {name}}` naming one of `tools`.
fn check_tool_choice(choice: Value, tools: &[Value]) -> Result<Value, RequestError> {
    let invalid = |why: &str| RequestError::invalid("toolChoice", why);
    match &choice {
        Value::String(mode) if mode == "none" => return Ok(choice),
        _ if tools.is_empty() => return Err(invalid("needs tools")),
        Value::String(mode) if mode == "auto" || mode == "required" => return Ok(choice),
        _ => {}
    }
    let name = choice["function"]["name"].as_str().filter(|_| choice["type"] == "function");
    match name {
        Some(name) if tools.iter().any(|tool| tool["function"]["name"] == name) => Ok(choice),
        Some(_) => Err(invalid("names a function that is not among the tools")),
        None => {
            Err(invalid("\"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": …}}"))
        }
    }
}

/// OpenAI's rule for function and schema names.
fn is_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A retriever that fetches nothing: a schema's `$ref` to a URL or a file fails to compile instead.
struct NoFetch;

impl jsonschema::Retrieve for NoFetch {
    fn retrieve(&self, uri: &jsonschema::Uri<String>) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Err(format!("gpuinfer never fetches a schema: inline {uri} under $defs instead").into())
    }
}

/// Schemas compiled in this process, by their JSON text: requests that share one (a batch's lines) compile it once.
static COMPILED: LazyLock<Mutex<HashMap<String, Arc<jsonschema::Validator>>>> = LazyLock::new(Mutex::default);
/// Most compiled schemas kept; past it the cache starts again.
const MAX_COMPILED: usize = 64;

/// The schema compiled, with every reference resolved within it; else why it does not compile, with where.
fn compile(schema: &Value) -> Result<Arc<jsonschema::Validator>, String> {
    if !schema.is_object() && !schema.is_boolean() {
        return Err(format!("must be a JSON Schema (an object), got {}", kind(schema)));
    }
    let text = schema.to_string();
    let compiled = || COMPILED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(validator) = compiled().get(&text) {
        return Ok(Arc::clone(validator));
    }
    let validator = jsonschema::options().with_retriever(NoFetch).build(schema).map_err(|error| {
        let at = error.schema_path().to_string();
        let at = if at.is_empty() { error.instance_path().to_string() } else { at };
        let place = if at.is_empty() { String::new() } else { format!(" (at {at})") };
        format!("not a valid JSON Schema{place}: {}", shorten(&error.to_string(), 300))
    })?;
    let validator = Arc::new(validator);
    let mut cache = compiled();
    if cache.len() >= MAX_COMPILED {
        cache.clear();
    }
    cache.insert(text, Arc::clone(&validator));
    Ok(validator)
}

impl Output {
    /// Whether `text`, the engine's answer, is what the response format asked for; else why not. An answer that
    /// called tools is not held to it (the caller does not ask).
    pub fn check_answer(&self, text: &str) -> Result<(), String> {
        let Some(format) = &self.response_format else { return Ok(()) };
        let value: Value = serde_json::from_str(text.trim())
            .map_err(|e| format!("the answer is not JSON ({e}) though the response format asks for it"))?;
        if format["type"] == "json_object" {
            return if value.is_object() { Ok(()) } else { Err("the answer is JSON but not an object".into()) };
        }
        let validator = compile(&format["json_schema"]["schema"])?;
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .take(3)
            .map(|e| format!("{} (at {})", shorten(&e.to_string(), 200), e.instance_path()))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!("the answer does not match its schema: {}", errors.join("; ")))
        }
    }

    /// The fields an OpenAI-compatible engine takes for this output, in its names; `chat` says which endpoint.
    pub fn engine_fields(&self, chat: bool) -> Map<String, Value> {
        let mut fields = Map::new();
        if let Some(format) = &self.response_format {
            fields.insert("response_format".into(), format.clone());
            if !chat {
                // llama.cpp's /v1/completions reads its own field, not response_format (vLLM reads the latter).
                let schema = format["json_schema"].get("schema").cloned().unwrap_or_else(|| json!({"type": "object"}));
                fields.insert("json_schema".into(), schema);
            }
        }
        if !self.stop.is_empty() {
            fields.insert("stop".into(), json!(self.stop));
        }
        if !self.tools.is_empty() {
            fields.insert("tools".into(), json!(self.tools));
        }
        for (name, value) in [
            ("tool_choice", self.tool_choice.clone()),
            ("parallel_tool_calls", self.parallel_tool_calls.map(Value::Bool)),
        ] {
            if let Some(value) = value {
                fields.insert(name.into(), value);
            }
        }
        fields
    }
}
