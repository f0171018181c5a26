//! Classifier that asks a model behind any OpenAI-compatible endpoint whether a request needs the small or large tier.

use async_trait::async_trait;
use uuid::Uuid;

use crate::contract::labels::Labels;
use crate::contract::request::{ChatMessage, InferenceRequest, Input, Origin, Output, Sampling};
use crate::contract::request_id::RequestId;
use crate::contract::tier::{Priority, Tier};
use crate::ports::classifier::{FailureReports, INSTRUCTION, parse_answer};
use crate::ports::{Classifier, ClassifyError, Engine};

pub(crate) struct OpenAiClassifier {
    engine: Box<dyn Engine>,
    /// Where the engine is (its base URL), as a failure report names it.
    endpoint: String,
    reports: FailureReports,
}

impl OpenAiClassifier {
    /// Asks `engine`, found at `endpoint`.
    pub(crate) fn new(engine: impl Engine + 'static, endpoint: String) -> Self {
        OpenAiClassifier { engine: Box::new(engine), endpoint, reports: FailureReports::default() }
    }
}

#[async_trait]
impl Classifier for OpenAiClassifier {
    async fn classify(&self, text: &str) -> Result<Tier, ClassifyError> {
        let question = InferenceRequest {
            request_id: RequestId::from(Uuid::nil()),
            input: Input::Messages(vec![ChatMessage::text("system", INSTRUCTION), ChatMessage::text("user", text)]),
            sampling: Sampling::plain(3, 0.0),
            output: Output::default(),
            labels: Labels::default(),
            route: None,
            priority: Priority::Normal,
            deadline: None,
            callback_url: None,
            origin: Origin::Plain,
        };
        let answer = match self.engine.generate(&question).await {
            Ok(answer) => answer,
            Err(error) => {
                let failure = format!("{error}; check that CLASSIFIER_URL serves CLASSIFIER_MODEL");
                self.reports.report("openai", &self.endpoint, "engine", &failure);
                return Err(ClassifyError(failure));
            }
        };
        let text = answer.generation.text;
        parse_answer(&text).ok_or_else(|| {
            let failure = format!(
                "answer of {} characters is neither small nor large; set CLASSIFIER_MODEL to a model that follows the \
                 instruction",
                text.chars().count()
            );
            self.reports.report("openai", answer.model.as_deref().unwrap_or(&self.endpoint), "unreadable", &failure);
            ClassifyError(failure)
        })
    }
}
