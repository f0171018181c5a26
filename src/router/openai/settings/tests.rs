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
