//! The engine simulator: an OpenAI-compatible, GPU-like engine on a loopback port (slots with
//! continuous batching, per-token time rising with the batch, failures, hangs, malformed answers) for tests,
//! fault injection and benchmarks. Runs inside a process, or as its own through `src/bin/engine-simulator.rs`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

/// One scripted answer, used before the random behaviour applies.
#[derive(Debug, Clone)]
pub enum Reply {
    Ok,
    Status(u16),
    /// A 200 whose body is not JSON.
    Garbage,
    /// No answer for `Behavior::hang` (without holding a slot): the client's timeout decides.
    Hang,
}

#[derive(Debug, Clone)]
pub struct Behavior {
    /// Time one request takes once it holds a slot.
    pub latency: Duration,
    /// Requests served at once; more wait for a slot, as in an engine's scheduler.
    pub slots: usize,
    pub faults: Faults,
    pub completion_tokens: u64,
    /// What /health answers at start (see `set_healthy`).
    pub healthy: bool,
    /// Decode time per generated token with one request running (zero: only `latency` counts).
    pub token_time: Duration,
    /// How much slower each token gets with every slot busy (0.3 = 30 % slower at full batch).
    pub batch_slowdown: f64,
    /// Prefill time per prompt token.
    pub prefill_per_token: Duration,
    /// As the local llama.cpp engine does: a request whose client hung up still runs to its end in its slot, /metrics
    /// names the gauges as llama.cpp does and /props reports the slots. Otherwise, as vLLM does, it is dropped at once.
    pub keeps_abandoned: bool,
}

/// The share of requests that fail, hang or come back garbled, drawn at random.
#[derive(Debug, Clone)]
pub struct Faults {
    /// Share of requests answered with `fail_status` (0.0–1.0).
    pub fail_rate: f64,
    pub fail_status: u16,
    /// Share of requests that hang (see `Reply::Hang`).
    pub hang_rate: f64,
    /// How long a hanging request stays unanswered.
    pub hang: Duration,
    /// Share of requests answered with a 200 that is not JSON.
    pub garbage_rate: f64,
}

impl Faults {
    /// Failure, hang, garbage or success, drawn by the rates.
    fn draw(&self) -> Reply {
        let draw = fastrand::f64();
        if draw < self.fail_rate {
            Reply::Status(self.fail_status)
        } else if draw < self.fail_rate + self.hang_rate {
            Reply::Hang
        } else if draw < self.fail_rate + self.hang_rate + self.garbage_rate {
            Reply::Garbage
        } else {
            Reply::Ok
        }
    }
}

impl Default for Faults {
    fn default() -> Self {
        Faults { fail_rate: 0.0, fail_status: 503, hang_rate: 0.0, hang: Duration::from_secs(60), garbage_rate: 0.0 }
    }
}

impl Behavior {
    /// Time a request takes in a slot, with `running` requests (itself included) sharing the batch.
    fn service_time(&self, prompt_tokens: u64, completion_tokens: u64, running: usize) -> Duration {
        let crowding = 1.0 + self.batch_slowdown * (running.saturating_sub(1) as f64 / self.slots.max(1) as f64);
        let decode = self.token_time.mul_f64(completion_tokens as f64 * crowding);
        self.latency + self.prefill_per_token * u32::try_from(prompt_tokens).unwrap_or(u32::MAX) + decode
    }
}

impl Default for Behavior {
    fn default() -> Self {
        Behavior {
            latency: Duration::from_millis(5),
            slots: 64,
            faults: Faults::default(),
            completion_tokens: 8,
            healthy: true,
            token_time: Duration::ZERO,
            batch_slowdown: 0.0,
            prefill_per_token: Duration::ZERO,
            keeps_abandoned: false,
        }
    }
}

/// What the simulator answered, counted since it started.
#[derive(Debug, Default)]
struct Counts {
    calls: AtomicU64,
    /// Requests whose client went away before the answer (the HTTP request was dropped).
    aborted: AtomicU64,
    /// Answers that were not a generation: error statuses, hangs, bodies that are not JSON.
    failed: AtomicU64,
    hung: AtomicU64,
    garbled: AtomicU64,
}

#[derive(Debug)]
struct SimulatorState {
    behavior: Mutex<Behavior>,
    script: Mutex<VecDeque<Reply>>,
    slots: Semaphore,
    healthy: AtomicBool,
    in_flight: AtomicUsize,
    waiting: AtomicUsize,
    max_in_flight: AtomicUsize,
    counts: Counts,
    prompts: Mutex<Vec<String>>,
    /// The body of the last generation request, as sent (what a test reads of the engine's side of a request).
    last_request: Mutex<Value>,
}

/// A running engine simulator; stops when dropped.
#[derive(Debug)]
pub struct EngineSimulator {
    pub url: String,
    state: Arc<SimulatorState>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for EngineSimulator {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl EngineSimulator {
    /// Starts on a free loopback port; panics if none can be bound (a test or benchmark cannot go on without it).
    #[allow(clippy::expect_used)]
    pub async fn start(behavior: Behavior) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind engine simulator");
        Self::serve(listener, behavior)
    }

    /// Serves on `listener` until dropped.
    pub fn serve(listener: tokio::net::TcpListener, behavior: Behavior) -> Self {
        let state = Arc::new(SimulatorState {
            slots: Semaphore::new(behavior.slots),
            healthy: AtomicBool::new(behavior.healthy),
            behavior: Mutex::new(behavior),
            script: Mutex::new(VecDeque::new()),
            in_flight: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            counts: Counts::default(),
            prompts: Mutex::new(Vec::new()),
            last_request: Mutex::new(Value::Null),
        });
        let app = Router::new()
            .route("/health", get(health))
            .route("/v1/models", get(models))
            .route("/v1/completions", post(complete))
            .route("/v1/chat/completions", post(complete))
            .route("/simulator/stats", get(stats))
            .route("/metrics", get(metrics))
            .route("/props", get(props))
            .with_state(Arc::clone(&state));
        let url = listener.local_addr().map_or_else(|e| format!("http://unknown ({e})"), |a| format!("http://{a}"));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        EngineSimulator { url, state, server }
    }

    /// Answers the next requests in this order before the random behaviour applies.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        lock(&self.state.script).extend(replies);
    }

    pub fn set_healthy(&self, healthy: bool) {
        self.state.healthy.store(healthy, Ordering::SeqCst);
    }

    pub fn set_latency(&self, latency: Duration) {
        lock(&self.state.behavior).latency = latency;
    }

    pub fn calls(&self) -> u64 {
        self.state.counts.calls.load(Ordering::SeqCst)
    }

    pub fn aborted(&self) -> u64 {
        self.state.counts.aborted.load(Ordering::SeqCst)
    }

    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }

    /// Requests waiting for a generation slot now.
    pub fn waiting(&self) -> usize {
        self.state.waiting.load(Ordering::SeqCst)
    }

    /// The prompts (or last chat message) received, in order.
    pub fn prompts(&self) -> Vec<String> {
        lock(&self.state.prompts).clone()
    }
}

async fn health(State(state): State<Arc<SimulatorState>>) -> StatusCode {
    if state.healthy.load(Ordering::SeqCst) { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }
}

/// Prometheus-style gauges, as engines expose them: requests running in a slot and waiting for one.
async fn metrics(State(state): State<Arc<SimulatorState>>) -> String {
    let (running, waiting) = (state.in_flight.load(Ordering::SeqCst), state.waiting.load(Ordering::SeqCst));
    if lock(&state.behavior).keeps_abandoned {
        return format!("llamacpp:requests_processing {running}\nllamacpp:requests_deferred {waiting}\n");
    }
    let total = state.counts.calls.load(Ordering::SeqCst);
    format!("engine_requests_running {running}\nengine_requests_waiting {waiting}\nengine_requests_total {total}\n")
}

/// As llama.cpp's server (`keeps_abandoned`), its slots under `total_slots`; otherwise, as vLLM, no such page.
async fn props(State(state): State<Arc<SimulatorState>>) -> Response {
    let behavior = lock(&state.behavior);
    if behavior.keeps_abandoned {
        Json(json!({ "total_slots": behavior.slots })).into_response()
    } else {
        StatusCode::NOT_FOUND.into_response()
    }
}

/// What the simulator has seen, for tests that run it as a separate process.
async fn stats(State(state): State<Arc<SimulatorState>>) -> Json<Value> {
    Json(json!({
        "calls": state.counts.calls.load(Ordering::SeqCst),
        "aborted": state.counts.aborted.load(Ordering::SeqCst),
        "inFlight": state.in_flight.load(Ordering::SeqCst),
        "maxInFlight": state.max_in_flight.load(Ordering::SeqCst),
        "failed": state.counts.failed.load(Ordering::SeqCst),
        "hung": state.counts.hung.load(Ordering::SeqCst),
        "garbled": state.counts.garbled.load(Ordering::SeqCst),
        "lastRequest": lock(&state.last_request).clone(),
    }))
}

async fn models() -> Json<Value> {
    Json(json!({ "object": "list", "data": [{ "id": "simulator-model", "object": "model" }] }))
}

/// One unit of a gauge while held: a request dropped by its client while waiting for a slot is not counted on.
struct Gauge<'a>(&'a AtomicUsize);

impl<'a> Gauge<'a> {
    fn raise(gauge: &'a AtomicUsize) -> Self {
        gauge.fetch_add(1, Ordering::SeqCst);
        Gauge(gauge)
    }
}

impl Drop for Gauge<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts a request as aborted when its handler is dropped (the server drops it when the client disconnects)
/// before `answered`.
struct AbortWatch<'a> {
    state: &'a SimulatorState,
    answered: bool,
}

impl Drop for AbortWatch<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.state.counts.aborted.fetch_add(1, Ordering::SeqCst);
            self.state.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

async fn complete(State(state): State<Arc<SimulatorState>>, Json(body): Json<Value>) -> Response {
    state.counts.calls.fetch_add(1, Ordering::SeqCst);
    let prompt = body["prompt"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| {
            body["messages"].as_array().and_then(|m| m.last()).and_then(|m| m["content"].as_str()).map(str::to_owned)
        })
        .unwrap_or_default();
    lock(&state.prompts).push(prompt.clone());
    *lock(&state.last_request) = body.clone();
    let behavior = lock(&state.behavior).clone();
    let scripted = lock(&state.script).pop_front();
    let reply = scripted.unwrap_or_else(|| behavior.faults.draw());
    if let Reply::Hang = reply {
        state.counts.hung.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(behavior.faults.hang).await;
        return StatusCode::GATEWAY_TIMEOUT.into_response();
    }
    if behavior.keeps_abandoned {
        // A task of its own: dropping the handler (the client hung up) does not stop it.
        let generation = tokio::spawn(async move { generate(&state, &behavior, reply, &body, &prompt).await });
        return generation.await.unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
    }
    generate(&state, &behavior, reply, &body, &prompt).await
}

/// Waits for a slot, generates for the request's time in it, and answers as `reply` says.
async fn generate(state: &SimulatorState, behavior: &Behavior, reply: Reply, body: &Value, prompt: &str) -> Response {
    let slot = {
        let _waiting = Gauge::raise(&state.waiting);
        state.slots.acquire().await
    };
    let Ok(_slot) = slot else { return StatusCode::SERVICE_UNAVAILABLE.into_response() };
    let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    state.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let mut watch = AbortWatch { state, answered: false };
    let max_tokens = body["max_tokens"].as_u64().unwrap_or(16);
    let completion_tokens = behavior.completion_tokens.min(max_tokens);
    let prompt_tokens = prompt.split_whitespace().count() as u64;
    tokio::time::sleep(behavior.service_time(prompt_tokens, completion_tokens, now)).await;
    watch.answered = true;
    state.in_flight.fetch_sub(1, Ordering::SeqCst);
    match reply {
        Reply::Status(code) => {
            state.counts.failed.fetch_add(1, Ordering::SeqCst);
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (status, Json(json!({ "error": { "message": format!("simulated failure {code}"), "code": code } })))
                .into_response()
        }
        Reply::Garbage => {
            state.counts.garbled.fetch_add(1, Ordering::SeqCst);
            (StatusCode::OK, "{not json").into_response()
        }
        Reply::Hang => unreachable!("answered above"),
        Reply::Ok => {
            // Asked for JSON, an empty object: valid JSON, which a schema may still refuse.
            let text = match body["response_format"]["type"].as_str() {
                Some("json_object" | "json_schema") => "{}".to_owned(),
                _ => format!("echo: {}", prompt.chars().take(24).collect::<String>()),
            };
            // As an engine does: "length" when the answer was cut at max_tokens, else "stop".
            let finish_reason = if behavior.completion_tokens >= max_tokens { "length" } else { "stop" };
            let choice = if let Some(name) = required_tool(body) {
                let call = json!({ "id": "call_simulator", "type": "function",
                                   "function": { "name": name, "arguments": "{}" } });
                json!({ "index": 0, "message": { "role": "assistant", "content": null, "tool_calls": [call] },
                        "finish_reason": "tool_calls" })
            } else if body.get("messages").is_some() {
                json!({ "index": 0, "message": { "role": "assistant", "content": text }, "finish_reason": finish_reason })
            } else {
                json!({ "index": 0, "text": text, "finish_reason": finish_reason })
            };
            Json(json!({
                "id": "cmpl-simulator",
                "model": body["model"],
                "choices": [choice],
                "usage": { "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                           "total_tokens": prompt_tokens + completion_tokens },
            }))
            .into_response()
        }
    }
}

/// The function a request obliges the model to call, as an engine honours `tool_choice`: the one it names, or the
/// first tool when it says "required". The simulator calls it with no arguments.
fn required_tool(body: &Value) -> Option<&str> {
    match &body["tool_choice"] {
        Value::String(mode) if mode == "required" => body["tools"][0]["function"]["name"].as_str(),
        named => named["function"]["name"].as_str(),
    }
}

/// The guarded value, also after a panic elsewhere poisoned the lock (the simulator's state stays usable).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
