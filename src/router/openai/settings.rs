//! How the OpenAI-compatible API is set up: which tier a Batch API line's or a response's `model` runs on
//! (`MODEL_TIERS`, e.g. `mistral-7b=small,llama-2-70b=large`), how long a call may wait for its result (a response
//! created without `background`, `POST /infer?wait`), large downloads, the API keys.

use std::time::Duration;

use crate::contract::tier::Tier;
use crate::router::api_keys::KeySource;

/// Lambda answers with at most 6 MB (its invocation payload limit), and a file goes back base64-encoded (4 bytes for
/// every 3): downloads larger than 4 MiB (5.6 MB encoded) are redirected to S3.
pub const LAMBDA_DOWNLOAD_LIMIT: u64 = 4 * 1024 * 1024;

/// The longest a call waits for its result unless configured: under the 30 s API Gateway gives a request.
pub(crate) const DEFAULT_RESULT_WAIT_SECONDS: u64 = 25;

/// How the OpenAI-compatible API is set up.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Which tier a line's `model` runs on.
    pub(crate) models: ModelTiers,
    /// File downloads larger than this are answered with a redirect to a presigned URL (Lambda's response limit);
    /// None streams every download.
    pub(crate) redirect_downloads_over: Option<u64>,
    /// The API keys requests must carry, when any are set: fixed ones (every route but GET /healthz), or a key
    /// store's (the /v1 routes).
    pub api_keys: Option<KeySource>,
    /// The longest a call waits for its result: POST /v1/responses without `background` (then it answers the
    /// response as it stands), POST /infer?wait=N (N at most this; then it answers 202).
    pub(crate) result_wait: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            models: ModelTiers::default(),
            redirect_downloads_over: None,
            api_keys: None,
            result_wait: Duration::from_secs(DEFAULT_RESULT_WAIT_SECONDS),
        }
    }
}

/// Model names and the tier each runs on, as configured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ModelTiers(Vec<(String, Tier)>);

impl ModelTiers {
    /// Parses `name=tier[,name=tier…]`; empty means only the tier names.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut pairs = Vec::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, tier) =
                entry.rsplit_once('=').ok_or_else(|| format!("{entry:?}: write model=tier, e.g. mistral-7b=small"))?;
            let tier = Tier::parse(tier.trim())
                .ok_or_else(|| format!("{entry:?}: the tier is \"small\" or \"large\", got {:?}", tier.trim()))?;
            pairs.push((name.trim().to_owned(), tier));
        }
        Ok(ModelTiers(pairs))
    }

    /// The tier `model` runs on, when the map (or a tier's own name) says.
    pub(crate) fn tier_of(&self, model: &str) -> Option<Tier> {
        let named = self.0.iter().find(|(name, _)| name == model).map(|(_, tier)| *tier);
        named.or_else(|| Tier::parse(model))
    }

    /// Every model a client may name: the configured ones, then the tier names.
    pub(super) fn names(&self) -> Vec<(String, Tier)> {
        let mut names = self.0.clone();
        names.extend([Tier::Small, Tier::Large].map(|tier| (tier.as_str().to_owned(), tier)));
        names
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Unit tests of `router/openai/settings.rs`.

    use super::*;

    #[test]
    fn models_map_to_tiers_and_tier_names_are_models() {
        let tiers = ModelTiers::parse("mistral-7b=small, llama-2-70b=large").unwrap_or_default();
        assert_eq!(tiers.tier_of("llama-2-70b"), Some(Tier::Large));
        assert_eq!(tiers.tier_of("small"), Some(Tier::Small));
        assert_eq!(tiers.tier_of("gpt-4o"), None);
        assert!(ModelTiers::parse("mistral").is_err());
        assert!(ModelTiers::parse("mistral=medium").is_err());
    }
}
