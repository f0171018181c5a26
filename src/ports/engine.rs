//! The engine port: an OpenAI-compatible inference engine, its completions and its failures.

use async_trait::async_trait;

use crate::contract::engine_load::EngineLoad;
use crate::contract::outcome::Generation;
use crate::contract::request::InferenceRequest;

/// Engine failures, typed by what the worker must do about them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The engine cannot be reached at all (process gone, GPU lost): retry elsewhere.
    #[error("engine unavailable: {0}")]
    Unavailable(String),
    /// 5xx, 429, timeout, unreadable answer: back off and retry.
    #[error("engine failed transiently: {0}")]
    Retryable(String),
    /// 4xx such as a prompt longer than the context: retrying cannot help.
    #[error("engine rejected the request: {0}")]
    Permanent(String),
}

/// A generation together with the model that produced it.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub generation: Generation,
    pub model: Option<String>,
}

/// An OpenAI-compatible inference engine (vLLM, llama.cpp, SGLang, …).
#[async_trait]
pub trait Engine: Send + Sync {
    async fn generate(&self, request: &InferenceRequest) -> Result<Completion, EngineError>;
    async fn healthy(&self) -> bool;
    /// Requests running and queued inside the engine, from its own gauges; None when it exposes none.
    async fn load(&self) -> Option<EngineLoad> {
        None
    }
    /// The generation slots the engine says it has; None when it does not say.
    async fn slots(&self) -> Option<u64> {
        None
    }
}
