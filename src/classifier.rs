//! Classifier that asks a model behind any OpenAI-compatible endpoint whether a request needs the small or large tier.

use async_trait::async_trait;
use uuid::Uuid;

use crate::engine::EngineClient;
use crate::ports::{Classifier, ClassifyError, Engine};
use crate::request::{ChatMessage, InferenceRequest, Input};
use crate::request_id::RequestId;
use crate::vocabulary::{Priority, Tier};

pub(crate) const INSTRUCTION: &str = "You route requests between a small fast language model and a large capable one. \
Reply with exactly one word: \"small\" if the small model can answer the request well (simple questions, \
short factual answers, light rewriting), or \"large\" if it needs deep reasoning, long analysis, code or \
expert knowledge.";

/// Reads the tier from a model's one-word answer; anything else is a failure (→ small upstream).
pub(crate) fn parse_answer(answer: &str) -> Option<Tier> {
    let word: String = answer.trim().chars().take_while(|c| c.is_alphabetic()).collect::<String>().to_lowercase();
    Tier::parse(&word)
}

#[derive(Debug)]
pub(crate) struct OpenAiClassifier {
    engine: EngineClient,
}

impl OpenAiClassifier {
    pub fn new(engine: EngineClient) -> Self {
        OpenAiClassifier { engine }
    }
}

#[async_trait]
impl Classifier for OpenAiClassifier {
    async fn classify(&self, text: &str) -> Result<Tier, ClassifyError> {
        let question = InferenceRequest {
            request_id: RequestId::from(Uuid::nil()),
            input: Input::Messages(vec![
                ChatMessage { role: "system".into(), content: INSTRUCTION.into() },
                ChatMessage { role: "user".into(), content: text.into() },
            ]),
            max_tokens: 3,
            temperature: 0.0,
            top_p: 1.0,
            route: None,
            priority: Priority::Normal,
            deadline: None,
            callback_url: None,
            batch: None,
        };
        let answer = self.engine.generate(&question).await.map_err(|e| ClassifyError(e.to_string()))?;
        let text = answer.generation.text;
        parse_answer(&text).ok_or_else(|| {
            ClassifyError(format!("answer is neither small nor large: {:?}", text.chars().take(40).collect::<String>()))
        })
    }
}
