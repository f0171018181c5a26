//! Which tier a Batch API line's `model` runs on (`MODEL_TIERS`, e.g. `mistral-7b=small,llama-2-70b=large`), and
//! GET /v1/models listing those models. The tier names themselves are models too: `small` and `large`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::router::AppState;
use crate::vocabulary::Tier;

/// Model names and the tier each runs on, as configured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelTiers(Vec<(String, Tier)>);

impl ModelTiers {
    /// Parses `name=tier[,name=tier…]`; empty means only the tier names.
    pub fn parse(text: &str) -> Result<Self, String> {
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
    pub fn tier_of(&self, model: &str) -> Option<Tier> {
        let named = self.0.iter().find(|(name, _)| name == model).map(|(_, tier)| *tier);
        named.or_else(|| Tier::parse(model))
    }

    /// Every model a client may name: the configured ones, then the tier names.
    fn names(&self) -> Vec<(String, Tier)> {
        let mut names = self.0.clone();
        names.extend([Tier::Small, Tier::Large].map(|tier| (tier.as_str().to_owned(), tier)));
        names
    }
}

/// GET /v1/models: the models lines may name, in OpenAI's list shape.
pub async fn list(State(state): State<Arc<AppState>>) -> Json<Value> {
    let data: Vec<Value> = state
        .openai
        .models
        .names()
        .into_iter()
        .map(|(name, tier)| json!({ "id": name, "object": "model", "created": 0, "owned_by": format!("gpuinfer-{tier}") }))
        .collect();
    Json(json!({ "object": "list", "data": data }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
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
