//! A flag value for one tier or for every tier (`small=10`, `10`), and the per-tier default it renders in help.

use std::fmt::Display;
use std::str::FromStr;

use crate::contract::tier::{PerTier, Tier};

/// A flag value for one tier (`small=10`) or for every tier (`10`); given repeated or comma-separated,
/// the last one that names a tier wins.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TierSetting<T> {
    tier: Option<Tier>,
    value: T,
}

impl<T: FromStr> FromStr for TierSetting<T>
where
    T::Err: Display,
{
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (tier, value) = match text.split_once('=') {
            Some((tier, value)) => {
                let tier = Tier::parse(tier.trim()).ok_or_else(|| format!("unknown tier `{tier}` (small or large)"))?;
                (Some(tier), value.trim())
            }
            None => (None, text.trim()),
        };
        let value = value.parse().map_err(|e| format!("`{value}`: {e}"))?;
        Ok(TierSetting { tier, value })
    }
}

impl<T: Copy> TierSetting<T> {
    /// The value `settings` give `tier`, or `default` when none names it.
    pub(crate) fn pick(settings: &[TierSetting<T>], tier: Tier, default: T) -> T {
        settings.iter().rev().find(|s| s.tier.is_none_or(|t| t == tier)).map_or(default, |s| s.value)
    }
}

impl<T: Display> TierSetting<T> {
    /// `values` as the flags take them, for the help to state a per-tier default: `small=10,large=4`.
    pub(crate) fn per_tier(values: &PerTier<T>) -> String {
        Tier::ALL.map(|tier| format!("{tier}={}", values.get(tier))).join(",")
    }
}
