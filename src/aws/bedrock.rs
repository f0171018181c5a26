//! Bedrock classifier: asks a small model through the Converse API whether a request needs the large tier.

use async_trait::async_trait;
use aws_sdk_bedrockruntime::Client;
use aws_sdk_bedrockruntime::types::{
    ContentBlock, ConversationRole, ConverseOutput, InferenceConfiguration, Message, SystemContentBlock,
};

use crate::classifier::{INSTRUCTION, parse_answer};
use crate::error_chain::describe;
use crate::ports::{Classifier, ClassifyError};
use crate::vocabulary::Tier;

pub(crate) const DEFAULT_MODEL_ID: &str = "amazon.nova-micro-v1:0";

#[derive(Debug, Clone)]
pub struct BedrockClassifier {
    client: Client,
    model_id: String,
}

impl BedrockClassifier {
    pub fn new(client: Client, model_id: String) -> Self {
        BedrockClassifier { client, model_id }
    }
}

#[async_trait]
impl Classifier for BedrockClassifier {
    async fn classify(&self, text: &str) -> Result<Tier, ClassifyError> {
        let question = Message::builder()
            .role(ConversationRole::User)
            .content(ContentBlock::Text(text.to_owned()))
            .build()
            .map_err(|e| ClassifyError(e.to_string()))?;
        let output = self
            .client
            .converse()
            .model_id(&self.model_id)
            .system(SystemContentBlock::Text(INSTRUCTION.to_owned()))
            .messages(question)
            .inference_config(InferenceConfiguration::builder().max_tokens(3).temperature(0.0).build())
            .send()
            .await
            .map_err(|e| ClassifyError(format!("Converse: {}", describe(&e))))?;
        let answer = match output.output {
            Some(ConverseOutput::Message(message)) => message
                .content
                .into_iter()
                .find_map(|block| if let ContentBlock::Text(text) = block { Some(text) } else { None })
                .unwrap_or_default(),
            _ => String::new(),
        };
        parse_answer(&answer)
            .ok_or_else(|| ClassifyError(format!("answer of {} characters is neither small nor large", answer.len())))
    }
}
