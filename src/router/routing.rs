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
    /// A tier switched off (its most tasks 0, so it never starts one): a request naming it is refused, and the
    /// thresholds and the classifier route to the other.
    pub off: Option<Tier>,
}

impl RoutingConfig {
    /// Why a request that names `tier` (its `route`, or a model of that tier) is refused, when that tier is off.
    pub(crate) fn refuses(&self, tier: Tier) -> Option<String> {
        (self.off == Some(tier)).then(|| {
            format!(
                "the {tier} tier is switched off on this deployment (it starts no task); send the request to the {}",
                tier.other()
            )
        })
    }
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
            off: None,
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
    /// The rules chose a tier that is switched off: the other took the request.
    TierOff,
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
            Reason::TierOff => "tier_off",
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
    if request.sampling.max_tokens > config.max_tokens_threshold {
        return Heuristic::Decided(Tier::Large, Reason::MaxTokens);
    }
    if chars > config.ambiguous_min_chars {
        return Heuristic::Ambiguous;
    }
    Heuristic::Decided(Tier::Small, Reason::Short)
}

/// Chooses the tier: the heuristics, then the classifier (bounded by its timeout) for the
/// ambiguous zone; any classifier failure or absence falls back to small. A tier switched off is never chosen by
/// the rules (a request naming it is refused before it is routed: `RoutingConfig::refuses`).
pub async fn route(
    request: &InferenceRequest,
    config: &RoutingConfig,
    classifier: Option<&dyn Classifier>,
) -> (Tier, Reason) {
    match chosen(request, config, classifier).await {
        (tier, reason) if config.off == Some(tier) && reason != Reason::Override => (tier.other(), Reason::TierOff),
        chosen => chosen,
    }
}

async fn chosen(
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
mod tests {
    //! Routing: every branch of the heuristics at the AWS sample's threshold edges, and the classifier's fallbacks.

    use std::time::Duration;

    use async_trait::async_trait;
    use serde_json::json;
    use tokio::time::Instant;

    use crate::contract::request::{InferenceRequest, Intake};
    use crate::contract::tier::Tier;
    use crate::ports::classifier::parse_answer;
    use crate::ports::{Classifier, ClassifyError};
    use crate::router::routing::{Heuristic, Reason, RoutingConfig, heuristic, route};

    fn request(chars: usize, max_tokens: u32, route: Option<&str>) -> InferenceRequest {
        let mut body = json!({"prompt": "x".repeat(chars), "maxTokens": max_tokens});
        if let Some(route) = route {
            body["route"] = json!(route);
        }
        InferenceRequest::parse(body.to_string().as_bytes(), Intake::Api(chrono::Utc::now())).unwrap()
    }

    #[test]
    fn heuristics_follow_the_sample_table_at_every_edge() {
        let config = RoutingConfig::default();
        let cases = [
            (request(5000, 2048, Some("small")), Heuristic::Decided(Tier::Small, Reason::Override)),
            (request(10, 10, Some("large")), Heuristic::Decided(Tier::Large, Reason::Override)),
            (request(2001, 10, None), Heuristic::Decided(Tier::Large, Reason::PromptLength)),
            (request(2000, 10, None), Heuristic::Ambiguous),
            (request(10, 1025, None), Heuristic::Decided(Tier::Large, Reason::MaxTokens)),
            (request(10, 1024, None), Heuristic::Decided(Tier::Small, Reason::Short)),
            (request(501, 1024, None), Heuristic::Ambiguous),
            (request(500, 1024, None), Heuristic::Decided(Tier::Small, Reason::Short)),
            (request(1, 1, None), Heuristic::Decided(Tier::Small, Reason::Short)),
        ];
        for (request, expected) in cases {
            let got = heuristic(&request, &config);
            assert_eq!(got, expected, "chars {} maxTokens {}", request.input.char_count(), request.sampling.max_tokens);
        }
    }

    #[test]
    fn thresholds_are_configurable() {
        let config = RoutingConfig {
            prompt_length_threshold: 100,
            max_tokens_threshold: 64,
            ambiguous_min_chars: 50,
            ..Default::default()
        };
        assert_eq!(heuristic(&request(101, 1, None), &config), Heuristic::Decided(Tier::Large, Reason::PromptLength));
        assert_eq!(heuristic(&request(10, 65, None), &config), Heuristic::Decided(Tier::Large, Reason::MaxTokens));
        assert_eq!(heuristic(&request(51, 1, None), &config), Heuristic::Ambiguous);
    }

    #[test]
    fn chat_length_counts_every_message() {
        let body = json!({"messages": [{"role": "user", "content": "y".repeat(1500)}, {"role": "user", "content": "z".repeat(600)}]});
        let request = InferenceRequest::parse(body.to_string().as_bytes(), Intake::Api(chrono::Utc::now())).unwrap();
        assert_eq!(
            heuristic(&request, &RoutingConfig::default()),
            Heuristic::Decided(Tier::Large, Reason::PromptLength)
        );
    }

    struct Fixed(Result<Tier, &'static str>, Duration);

    #[async_trait]
    impl Classifier for Fixed {
        async fn classify(&self, _text: &str) -> Result<Tier, ClassifyError> {
            tokio::time::sleep(self.1).await;
            self.0.map_err(|e| ClassifyError(e.into()))
        }
    }

    /// In paused time: the 30 s classifier and the 200 s budget cost no real time, and the clock is exact.
    #[tokio::test(start_paused = true)]
    async fn ambiguous_requests_ask_the_classifier_and_fall_back_to_small() {
        let config = RoutingConfig { classifier_timeout: Duration::from_millis(200), ..Default::default() };
        let ambiguous = request(800, 100, None);
        let large = Fixed(Ok(Tier::Large), Duration::ZERO);
        assert_eq!(route(&ambiguous, &config, Some(&large)).await, (Tier::Large, Reason::Classifier));
        let failing = Fixed(Err("boom"), Duration::ZERO);
        assert_eq!(route(&ambiguous, &config, Some(&failing)).await, (Tier::Small, Reason::ClassifierFallback));
        assert_eq!(route(&ambiguous, &config, None).await, (Tier::Small, Reason::ClassifierFallback));

        let slow = Fixed(Ok(Tier::Large), Duration::from_secs(30));
        let started = Instant::now();
        assert_eq!(route(&ambiguous, &config, Some(&slow)).await, (Tier::Small, Reason::ClassifierFallback));
        assert_eq!(started.elapsed(), Duration::from_millis(200), "the timeout bounds the wait, exactly");
    }

    #[tokio::test(start_paused = true)]
    async fn decided_requests_never_reach_the_classifier() {
        let config = RoutingConfig::default();
        let never = Fixed(Err("must not be called"), Duration::from_secs(30));
        let started = Instant::now();
        assert_eq!(route(&request(10, 10, None), &config, Some(&never)).await, (Tier::Small, Reason::Short));
        assert_eq!(started.elapsed(), Duration::ZERO, "no time spent: the classifier was not asked");
    }

    #[test]
    fn classifier_answers_are_read_leniently_and_garbage_is_refused() {
        assert_eq!(parse_answer("large"), Some(Tier::Large));
        assert_eq!(parse_answer(" Small."), Some(Tier::Small));
        assert_eq!(parse_answer("LARGE\n"), Some(Tier::Large));
        assert_eq!(parse_answer("medium"), None);
        assert_eq!(parse_answer(""), None);
        assert_eq!(parse_answer("I think large"), None);
    }

    #[tokio::test]
    async fn the_rules_route_around_a_tier_switched_off_and_a_request_naming_it_is_refused_first() {
        let config = RoutingConfig { off: Some(Tier::Large), ..RoutingConfig::default() };
        assert_eq!(route(&request(2001, 256, None), &config, None).await, (Tier::Small, Reason::TierOff));
        assert_eq!(route(&request(10, 2048, None), &config, None).await, (Tier::Small, Reason::TierOff));
        assert_eq!(route(&request(10, 256, None), &config, None).await, (Tier::Small, Reason::Short));
        assert!(config.refuses(Tier::Large).is_some_and(|why| why.contains("large tier is switched off")));
        assert_eq!(config.refuses(Tier::Small), None);
        assert_eq!(RoutingConfig::default().refuses(Tier::Large), None);
    }
}
