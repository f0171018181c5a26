//! OpenAI-compatible engine client (vLLM, llama.cpp, SGLang…): completions, chat completions, health, load, slots.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::contract::engine_load::EngineLoad;
use crate::contract::outcome::{Generation, Usage};
use crate::contract::request::{InferenceRequest, Input};
use crate::engine::load;
use crate::ports::{Completion, Engine, EngineError};

/// Longest wait for one /health answer when probing between requests.
pub(crate) const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// Whole-request timeout unless configured: a 2,048-token generation on a large model takes minutes.
pub(crate) const DEFAULT_REQUEST_TIMEOUT_SECONDS: u64 = 900;
/// Where an engine listens unless told (vLLM's and llama.cpp's default port on this host).
pub(crate) const DEFAULT_ENGINE_URL: &str = "http://127.0.0.1:8000";

/// How the client reaches one engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Base URL such as `http://127.0.0.1:8000` (a trailing `/v1` is accepted too).
    pub base_url: String,
    /// Model name sent with each request; asked of `/v1/models` when absent.
    pub model: Option<String>,
    /// Whole-request timeout: long generations on a large model take minutes.
    pub request_timeout: Duration,
}

#[derive(Debug)]
pub struct EngineClient {
    http: reqwest::Client,
    base: String,
    configured_model: Option<String>,
    discovered_model: OnceCell<String>,
}

impl EngineClient {
    pub fn new(config: &EngineConfig) -> Result<Self, EngineError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .timeout(config.request_timeout)
            .pool_max_idle_per_host(256)
            .no_proxy()
            .build()
            .map_err(|e| EngineError::Permanent(format!("cannot build HTTP client: {e}")))?;
        Ok(EngineClient {
            http,
            base: base_url(&config.base_url),
            configured_model: config.model.clone(),
            discovered_model: OnceCell::new(),
        })
    }

    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// The configured model, or the first one the engine lists under /v1/models.
    pub async fn model(&self) -> Result<&str, EngineError> {
        if let Some(model) = &self.configured_model {
            return Ok(model);
        }
        self.discovered_model
            .get_or_try_init(|| async {
                let models: Value = self.call(self.http.get(format!("{}/v1/models", self.base))).await?;
                models["data"][0]["id"]
                    .as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| EngineError::Retryable("engine lists no model under /v1/models".into()))
            })
            .await
            .map(String::as_str)
    }

    /// GETs /health: Ok on a 2xx answer within `timeout`, else why not.
    pub(crate) async fn health(&self, timeout: Duration) -> Result<(), EngineError> {
        let response =
            self.http.get(format!("{}/health", self.base)).timeout(timeout).send().await.map_err(transport_error)?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(EngineError::Unavailable(format!("/health answered HTTP {}", status.as_u16())))
        }
    }

    async fn call<T: for<'de> Deserialize<'de>>(&self, request: reqwest::RequestBuilder) -> Result<T, EngineError> {
        let response = request.send().await.map_err(transport_error)?;
        let status = response.status();
        let body = response.bytes().await.map_err(transport_error)?;
        if !status.is_success() {
            let detail = error_detail(&body);
            let message = format!("HTTP {}: {detail}", status.as_u16());
            return Err(if status.as_u16() == 429 || status.as_u16() == 408 || status.is_server_error() {
                EngineError::Retryable(message)
            } else {
                EngineError::Permanent(message)
            });
        }
        serde_json::from_slice(&body)
            .map_err(|e| EngineError::Retryable(format!("engine sent an unreadable answer ({e})")))
    }
}

#[async_trait]
impl Engine for EngineClient {
    async fn generate(&self, request: &InferenceRequest) -> Result<Completion, EngineError> {
        let model = self.model().await?;
        let body = engine_body(model, request);
        let path = if matches!(request.input, Input::Prompt(_)) { "completions" } else { "chat/completions" };
        let answer: OpenAiAnswer = self.call(self.http.post(format!("{}/v1/{path}", self.base)).json(&body)).await?;
        answer.into_completion()
    }

    async fn healthy(&self) -> bool {
        self.health(HEALTH_TIMEOUT).await.is_ok()
    }

    /// Reads GET /metrics (vLLM's, llama.cpp's with `--metrics`, the engine simulator's).
    async fn load(&self) -> Option<EngineLoad> {
        let response = self.http.get(format!("{}/metrics", self.base)).timeout(HEALTH_TIMEOUT).send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        load::parse(&response.text().await.ok()?)
    }

    /// Reads GET /props, where llama.cpp's server reports its slots (`total_slots`); vLLM has no such page.
    async fn slots(&self) -> Option<u64> {
        let response = self.http.get(format!("{}/props", self.base)).timeout(HEALTH_TIMEOUT).send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let props: Value = response.json().await.ok()?;
        props["total_slots"].as_u64().filter(|&slots| slots > 0)
    }
}

/// The body of the engine request that runs `request` on `model`, in the OpenAI names of its endpoint.
fn engine_body(model: &str, request: &InferenceRequest) -> Value {
    let sampling = &request.sampling;
    let chat = matches!(request.input, Input::Messages(_));
    let mut body = match &request.input {
        Input::Prompt(prompt) => json!({ "prompt": prompt }),
        Input::Messages(messages) => json!({ "messages": messages }),
    };
    let logprobs = match (sampling.logprobs, chat) {
        (false, _) => None,
        (true, true) => Some(json!(true)),
        // /v1/completions takes the number of alternatives in `logprobs` itself.
        (true, false) => Some(json!(sampling.top_logprobs.unwrap_or(0))),
    };
    let top_logprobs = sampling.top_logprobs.filter(|_| chat && sampling.logprobs).map(|n| json!(n));
    let fields = [
        ("model", Some(json!(model))),
        ("max_tokens", Some(json!(sampling.max_tokens))),
        ("temperature", Some(json!(sampling.temperature))),
        ("top_p", Some(json!(sampling.top_p))),
        ("seed", sampling.seed.map(|seed| json!(seed))),
        ("presence_penalty", sampling.presence_penalty.map(|p| json!(p))),
        ("frequency_penalty", sampling.frequency_penalty.map(|p| json!(p))),
        ("logit_bias", sampling.logit_bias.clone().map(Value::Object)),
        ("logprobs", logprobs),
        ("top_logprobs", top_logprobs),
    ];
    if let Value::Object(body) = &mut body {
        body.extend(fields.into_iter().filter_map(|(name, value)| Some((name.to_owned(), value?))));
        body.extend(request.output.engine_fields(chat));
    }
    body
}

#[derive(Deserialize)]
struct OpenAiAnswer {
    model: Option<String>,
    choices: Vec<OpenAiChoice>,
    usage: Option<OpenAiUsage>,
}

#[derive(Deserialize)]
struct OpenAiChoice {
    text: Option<String>,
    message: Option<OpenAiMessage>,
    finish_reason: Option<String>,
    logprobs: Option<Value>,
}

#[derive(Deserialize)]
struct OpenAiMessage {
    content: Option<String>,
    tool_calls: Option<Value>,
}

#[derive(Deserialize)]
struct OpenAiUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: Option<u64>,
}

impl OpenAiAnswer {
    fn into_completion(self) -> Result<Completion, EngineError> {
        let choice = self
            .choices
            .into_iter()
            .next()
            .ok_or_else(|| EngineError::Retryable("engine answered with no choices".into()))?;
        let (content, tool_calls) = choice.message.map_or((None, None), |m| (m.content, m.tool_calls));
        let text = choice.text.or(content).unwrap_or_default();
        let tool_calls = tool_calls.filter(|calls| calls.as_array().is_some_and(|list| !list.is_empty()));
        let usage = self.usage.map_or_else(Usage::default, |u| Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.total_tokens.unwrap_or(u.prompt_tokens + u.completion_tokens),
        });
        Ok(Completion {
            generation: Generation {
                text,
                usage,
                finish_reason: choice.finish_reason.unwrap_or_else(|| "unknown".into()),
                tool_calls,
                logprobs: choice.logprobs.filter(|l| !l.is_null()),
            },
            model: self.model,
        })
    }
}

/// Normalizes a user-given base URL: no trailing slash, no trailing `/v1`.
pub fn base_url(url: &str) -> String {
    let trimmed = url.trim().trim_end_matches('/');
    trimmed.strip_suffix("/v1").unwrap_or(trimmed).to_owned()
}

fn transport_error(e: reqwest::Error) -> EngineError {
    if e.is_connect() {
        EngineError::Unavailable(format!("cannot connect ({e})"))
    } else if e.is_timeout() {
        EngineError::Retryable(format!("timed out ({e})"))
    } else {
        EngineError::Retryable(e.to_string())
    }
}

/// The engine's own error message when it sent one (OpenAI `{"error":{"message"}}`), else the body.
fn error_detail(body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        v["error"]["message"]
            .as_str()
            .or_else(|| v["message"].as_str())
            .or_else(|| v["error"].as_str())
            .map(str::to_owned)
    });
    let text = message.unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    text.chars().take(300).collect()
}
