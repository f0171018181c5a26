//! Bedrock classifier: asks a small model through the Converse API whether a request needs the large tier, and says
//! what to do when Bedrock refuses (typed by the fix: grant, inference profile, model access).

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_bedrockruntime::Client;
use aws_sdk_bedrockruntime::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_bedrockruntime::types::{
    ContentBlock, ConversationRole, ConverseOutput, InferenceConfiguration, Message, SystemContentBlock,
};

use crate::contract::tier::Tier;
use crate::infra::error_chain::describe;
use crate::ports::classifier::{FailureReports, INSTRUCTION, parse_answer};
use crate::ports::{Classifier, ClassifyError};

pub(crate) const DEFAULT_MODEL_ID: &str = "amazon.nova-micro-v1:0";

/// Amazon Nova Micro's system-defined cross-Region inference profile for calls from `region` (Bedrock User Guide,
/// "Supported Regions and models for inference profiles"); None where the guide lists none.
pub(crate) fn nova_micro_profile(region: &str) -> Option<&'static str> {
    match region {
        "us-east-1" | "us-east-2" | "us-west-2" => Some("us.amazon.nova-micro-v1:0"),
        "eu-central-1" | "eu-north-1" | "eu-south-1" | "eu-south-2" | "eu-west-1" | "eu-west-3" => {
            Some("eu.amazon.nova-micro-v1:0")
        }
        "ap-northeast-1" | "ap-northeast-2" | "ap-south-1" | "ap-southeast-1" | "ap-southeast-2" => {
            Some("apac.amazon.nova-micro-v1:0")
        }
        _ => None,
    }
}

/// Why a Converse call did not classify, by what the operator must do about it. Each message ends with the fix.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConverseFailure {
    /// IAM denied bedrock:InvokeModel to the caller.
    #[error(
        "Bedrock denied bedrock:InvokeModel on {model_id} to this role ({message}); grant bedrock:InvokeModel on {grant}"
    )]
    NotAuthorized { model_id: String, message: String, grant: String },
    /// The account may not use the model (AccessDeniedException without an IAM denial).
    #[error(
        "this account has no access to {model_id} in {region} ({message}); enable model access for it in the Bedrock \
         console of {region} (Model access)"
    )]
    NoModelAccess { model_id: String, region: String, message: String },
    /// The model is served in this Region through an inference profile only.
    #[error(
        "{model_id} is not served on demand in {region} ({message}); set BedrockModelId (BEDROCK_MODEL_ID) to an \
         inference profile id such as {profile} (an empty BedrockModelId picks the stack Region's Nova Micro profile)"
    )]
    NeedsInferenceProfile { model_id: String, region: String, message: String, profile: String },
    /// Bedrock knows no such model or profile here, or the account has not enabled it.
    #[error(
        "Bedrock found no {model_id} in {region} ({message}); enable model access in the Bedrock console, or set \
         BedrockModelId (BEDROCK_MODEL_ID) to a model or inference profile id Bedrock serves in {region}"
    )]
    NotFound { model_id: String, region: String, message: String },
    /// Another refusal of the request.
    #[error(
        "Bedrock refused to run {model_id} in {region} ({code}: {message}); set BedrockModelId (BEDROCK_MODEL_ID) \
         to a text model or inference profile id that Bedrock serves in {region}, such as {profile}"
    )]
    Refused { model_id: String, region: String, code: String, message: String, profile: String },
    /// Throttling, a busy or failing service, or no answer at all: nothing to change if it passes.
    #[error(
        "Converse with {model_id} failed ({detail}); if this persists, check the router reaches Bedrock in {region} \
         and the account's Bedrock quotas"
    )]
    Unavailable { model_id: String, region: String, detail: String },
    /// The model answered, but neither word.
    #[error(
        "{model_id} answered {chars} characters that are neither small nor large; set BedrockModelId \
         (BEDROCK_MODEL_ID) to a model that follows the instruction"
    )]
    Unreadable { model_id: String, chars: usize },
}

impl ConverseFailure {
    /// The failure's kind in one word, for the log and for reporting each new kind at once.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            ConverseFailure::NotAuthorized { .. } => "access-denied",
            ConverseFailure::NoModelAccess { .. } => "no-model-access",
            ConverseFailure::NeedsInferenceProfile { .. } => "needs-inference-profile",
            ConverseFailure::NotFound { .. } => "not-found",
            ConverseFailure::Refused { .. } => "refused",
            ConverseFailure::Unavailable { .. } => "unavailable",
            ConverseFailure::Unreadable { .. } => "unreadable",
        }
    }

    /// Reads a failed Converse call by its error code and message (Bedrock User Guide, "Troubleshooting Amazon
    /// Bedrock API Error Codes").
    fn from_sdk<E, R>(error: &SdkError<E, R>, model_id: &str, region: &str) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug + 'static,
    {
        let model_id = model_id.to_owned();
        let region = region.to_owned();
        let message = error.message().unwrap_or_default().to_owned();
        let Some(code) = error.code() else {
            return ConverseFailure::Unavailable { model_id, region, detail: describe(error) };
        };
        match code {
            "AccessDeniedException" if message.contains("not authorized to perform") => {
                let grant = invoke_grant(&model_id, &region);
                ConverseFailure::NotAuthorized { model_id, message, grant }
            }
            "AccessDeniedException" => ConverseFailure::NoModelAccess { model_id, region, message },
            "ValidationException" if needs_inference_profile(&message) => {
                let profile = suggested_profile(&model_id, &region);
                ConverseFailure::NeedsInferenceProfile { model_id, region, message, profile }
            }
            "ResourceNotFoundException" => ConverseFailure::NotFound { model_id, region, message },
            "ThrottlingException"
            | "ServiceUnavailableException"
            | "InternalServerException"
            | "ModelNotReadyException"
            | "ModelTimeoutException"
            | "ModelErrorException"
            | "ServiceQuotaExceededException" => {
                ConverseFailure::Unavailable { model_id, region, detail: format!("{code}: {message}") }
            }
            code => {
                let profile = suggested_profile(&model_id, &region);
                ConverseFailure::Refused { model_id, region, code: code.to_owned(), message, profile }
            }
        }
    }
}

/// Bedrock's ValidationException for a model that must be called through an inference profile ("Invocation of model
/// ID … with on-demand throughput isn't supported. Retry your request with the ID or ARN of an inference profile …").
fn needs_inference_profile(message: &str) -> bool {
    let message = message.to_lowercase();
    message.contains("on-demand throughput") || message.contains("inference profile")
}

/// The model a system-defined inference profile id routes to: `us.amazon.nova-micro-v1:0` → `amazon.nova-micro-v1:0`;
/// None for a model id (two dot-separated parts), as the template's BedrockModelIsProfile condition reads it.
fn profile_model(id: &str) -> Option<&str> {
    let (_geography, model) = id.split_once('.')?;
    (model.contains('.') && !id.starts_with("arn:")).then_some(model)
}

/// The profile id to suggest for `model_id` in `region`: Nova Micro's profile there, else the model under the
/// Region's geography prefix.
fn suggested_profile(model_id: &str, region: &str) -> String {
    let model = profile_model(model_id).unwrap_or(model_id);
    match nova_micro_profile(region) {
        Some(profile) if model == DEFAULT_MODEL_ID => profile.to_owned(),
        Some(profile) => format!("{}.{model}", profile.split('.').next().unwrap_or("us")),
        None => format!("one `aws bedrock list-inference-profiles --region {region}` lists (e.g. us.{model})"),
    }
}

/// What bedrock:InvokeModel must allow for `model_id` called from `region` (Bedrock User Guide, "Prerequisites for
/// inference profiles"): an inference profile, and its foundation model in every Region it routes to; a model id, that
/// model in `region`.
fn invoke_grant(model_id: &str, region: &str) -> String {
    let partition = match region {
        r if r.starts_with("cn-") => "aws-cn",
        r if r.starts_with("us-gov-") => "aws-us-gov",
        _ => "aws",
    };
    match profile_model(model_id) {
        Some(model) => format!(
            "arn:{partition}:bedrock:{region}:ACCOUNT_ID:inference-profile/{model_id} and \
             arn:{partition}:bedrock:*::foundation-model/{model} (the stack's RouterRole grants both for its \
             BedrockModelId)"
        ),
        None => format!("arn:{partition}:bedrock:{region}::foundation-model/{model_id}"),
    }
}

#[derive(Debug, Clone)]
pub struct BedrockClassifier {
    client: Client,
    model_id: String,
    region: String,
    reports: Arc<FailureReports>,
}

impl BedrockClassifier {
    /// `model_id` None: Nova Micro through the inference profile of the client's Region, or the model itself where
    /// no profile serves that Region (then a Region Bedrock does not serve it in is reported with the fix).
    pub fn new(client: Client, model_id: Option<String>) -> Self {
        let region = client.config().region().map(|r| r.to_string()).unwrap_or_else(|| "this Region".into());
        let model_id = model_id.unwrap_or_else(|| nova_micro_profile(&region).unwrap_or(DEFAULT_MODEL_ID).to_owned());
        BedrockClassifier { client, model_id, region, reports: Arc::default() }
    }

    async fn ask(&self, text: &str) -> Result<Tier, ConverseFailure> {
        let unavailable = |detail: String| ConverseFailure::Unavailable {
            model_id: self.model_id.clone(),
            region: self.region.clone(),
            detail,
        };
        let question = Message::builder()
            .role(ConversationRole::User)
            .content(ContentBlock::Text(text.to_owned()))
            .build()
            .map_err(|e| unavailable(e.to_string()))?;
        let output = self
            .client
            .converse()
            .model_id(&self.model_id)
            .system(SystemContentBlock::Text(INSTRUCTION.to_owned()))
            .messages(question)
            .inference_config(InferenceConfiguration::builder().max_tokens(3).temperature(0.0).build())
            .send()
            .await
            .map_err(|e| ConverseFailure::from_sdk(&e, &self.model_id, &self.region))?;
        let answer = match output.output {
            Some(ConverseOutput::Message(message)) => message
                .content
                .into_iter()
                .find_map(|block| if let ContentBlock::Text(text) = block { Some(text) } else { None })
                .unwrap_or_default(),
            _ => String::new(),
        };
        parse_answer(&answer).ok_or_else(|| ConverseFailure::Unreadable {
            model_id: self.model_id.clone(),
            chars: answer.chars().count(),
        })
    }
}

#[async_trait]
impl Classifier for BedrockClassifier {
    /// Any failure falls back to small upstream; it is reported at ERROR with its fix (first, then once per
    /// interval or on a new kind of failure) and returned with the fix to the per-request log.
    async fn classify(&self, text: &str) -> Result<Tier, ClassifyError> {
        let failure = match self.ask(text).await {
            Ok(tier) => return Ok(tier),
            Err(failure) => failure,
        };
        self.reports.report("Bedrock", &self.model_id, failure.kind(), &failure);
        Err(ClassifyError(failure.to_string()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! Unit tests of `aws/bedrock.rs`.

    use super::*;

    #[test]
    fn a_profile_id_names_its_model_and_a_model_id_none() {
        assert_eq!(profile_model("us.amazon.nova-micro-v1:0"), Some("amazon.nova-micro-v1:0"));
        assert_eq!(profile_model("apac.amazon.nova-micro-v1:0"), Some("amazon.nova-micro-v1:0"));
        assert_eq!(profile_model("amazon.nova-micro-v1:0"), None);
        assert_eq!(profile_model("arn:aws:bedrock:us-east-1:1:inference-profile/us.a.b"), None);
    }

    #[test]
    fn grants_and_suggestions_name_the_profile_of_the_region() {
        assert_eq!(suggested_profile("amazon.nova-micro-v1:0", "us-west-2"), "us.amazon.nova-micro-v1:0");
        assert_eq!(suggested_profile("amazon.nova-lite-v1:0", "eu-west-1"), "eu.amazon.nova-lite-v1:0");
        assert!(suggested_profile("amazon.nova-micro-v1:0", "sa-east-1").contains("list-inference-profiles"));
        let grant = invoke_grant("us.amazon.nova-micro-v1:0", "us-west-2");
        assert!(grant.contains("arn:aws:bedrock:us-west-2:ACCOUNT_ID:inference-profile/us.amazon.nova-micro-v1:0"));
        assert!(grant.contains("arn:aws:bedrock:*::foundation-model/amazon.nova-micro-v1:0"));
        assert_eq!(
            invoke_grant("amazon.nova-micro-v1:0", "us-gov-west-1"),
            "arn:aws-us-gov:bedrock:us-gov-west-1::foundation-model/amazon.nova-micro-v1:0"
        );
    }
}
