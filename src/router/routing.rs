//! Tier classification: the pure routing heuristics and the call into a `Classifier` for the ambiguous zone.

use std::time::Duration;

use crate::contract::request::InferenceRequest;
use crate::contract::tier::Tier;
use crate::ports::Classifier;

/// Thresholds of the routing heuristics (the AWS sample's defaults).
#[derive(Debug, Clone)]
pub struct RoutingConfig {
    /// Prompts longer than this many characters go to the large tier.
    pub prompt_length_threshold: usize,
    /// Requests asking for more than this many tokens go to the large tier.
    pub max_tokens_threshold: u32,
    /// Prompts longer than this (and not past the thresholds) are asked of the classifier.
    pub ambiguous_min_chars: usize,
    /// How long the classifier may take before the request falls back to small.
    pub classifier_timeout: Duration,
}

/// The AWS sample's thresholds, used unless configured.
pub(crate) const DEFAULT_PROMPT_LENGTH_THRESHOLD: usize = 2000;
pub(crate) const DEFAULT_MAX_TOKENS_THRESHOLD: u32 = 1024;
pub(crate) const DEFAULT_AMBIGUOUS_MIN_CHARS: usize = 500;
/// The classifier's budget unless configured, in milliseconds.
pub(crate) const DEFAULT_CLASSIFIER_TIMEOUT_MS: u64 = 1500;

impl Default for RoutingConfig {
    fn default() -> Self {
        RoutingConfig {
            prompt_length_threshold: DEFAULT_PROMPT_LENGTH_THRESHOLD,
            max_tokens_threshold: DEFAULT_MAX_TOKENS_THRESHOLD,
            ambiguous_min_chars: DEFAULT_AMBIGUOUS_MIN_CHARS,
            classifier_timeout: Duration::from_millis(DEFAULT_CLASSIFIER_TIMEOUT_MS),
        }
    }
}

/// Why a request went to its tier; logged and counted per tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Override,
    PromptLength,
    MaxTokens,
    Classifier,
    ClassifierFallback,
    Short,
}

impl Reason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reason::Override => "override",
            Reason::PromptLength => "prompt_length",
            Reason::MaxTokens => "max_tokens",
            Reason::Classifier => "classifier",
            Reason::ClassifierFallback => "classifier_fallback",
            Reason::Short => "short",
        }
    }
}

/// What the heuristics alone can say about a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Heuristic {
    Decided(Tier, Reason),
    Ambiguous,
}

/// The AWS sample's rules in order: override → prompt length → maxTokens → ambiguous zone → small.
pub(crate) fn heuristic(request: &InferenceRequest, config: &RoutingConfig) -> Heuristic {
    if let Some(tier) = request.route {
        return Heuristic::Decided(tier, Reason::Override);
    }
    let chars = request.input.char_count();
    if chars > config.prompt_length_threshold {
        return Heuristic::Decided(Tier::Large, Reason::PromptLength);
    }
    if request.max_tokens > config.max_tokens_threshold {
        return Heuristic::Decided(Tier::Large, Reason::MaxTokens);
    }
    if chars > config.ambiguous_min_chars {
        return Heuristic::Ambiguous;
    }
    Heuristic::Decided(Tier::Small, Reason::Short)
}

/// Chooses the tier: the heuristics, then the classifier (bounded by its timeout) for the
/// ambiguous zone; any classifier failure or absence falls back to small.
pub async fn route(
    request: &InferenceRequest,
    config: &RoutingConfig,
    classifier: Option<&dyn Classifier>,
) -> (Tier, Reason) {
    if let Heuristic::Decided(tier, reason) = heuristic(request, config) {
        return (tier, reason);
    }
    let Some(classifier) = classifier else {
        return (Tier::Small, Reason::ClassifierFallback);
    };
    let text = request.input.text();
    match tokio::time::timeout(config.classifier_timeout, classifier.classify(&text)).await {
        Ok(Ok(tier)) => (tier, Reason::Classifier),
        Ok(Err(error)) => {
            tracing::warn!(request_id = %request.request_id, %error, "classifier failed; routing to small");
            (Tier::Small, Reason::ClassifierFallback)
        }
        Err(_) => {
            tracing::warn!(request_id = %request.request_id, timeout_ms = config.classifier_timeout.as_millis() as u64, "classifier timed out; routing to small");
            (Tier::Small, Reason::ClassifierFallback)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
