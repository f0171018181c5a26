//! The pipeline's vocabulary, used by every layer and importing none: the two model tiers, the two priority
//! lanes of a tier, and a value kept once per tier or per lane.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One of the two model tiers, each with its own queue, workers and scaling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Small,
    Large,
}

impl Tier {
    pub const ALL: [Tier; 2] = [Tier::Small, Tier::Large];

    /// The tier that is not this one.
    pub(crate) fn other(self) -> Tier {
        match self {
            Tier::Small => Tier::Large,
            Tier::Large => Tier::Small,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Tier::Small => "small",
            Tier::Large => "large",
        }
    }

    pub fn parse(value: &str) -> Option<Tier> {
        match value {
            "small" => Some(Tier::Small),
            "large" => Some(Tier::Large),
            _ => None,
        }
    }

    /// The visibility timeout of the tier's queues (the AWS sample's, template.yaml's: 300 s and 600 s, longer on
    /// the large tier, whose generations are slower). Workers ask for a shorter lease on each receive.
    pub(crate) fn queue_visibility_timeout(self) -> Duration {
        Duration::from_secs(match self {
            Tier::Small => 300,
            Tier::Large => 600,
        })
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A value kept once per tier (queues, engine URLs, worker pools).
#[derive(Debug, Clone)]
pub struct PerTier<T> {
    pub small: T,
    pub large: T,
}

impl<T> PerTier<T> {
    pub fn get(&self, tier: Tier) -> &T {
        match tier {
            Tier::Small => &self.small,
            Tier::Large => &self.large,
        }
    }

    pub(crate) fn get_mut(&mut self, tier: Tier) -> &mut T {
        match tier {
            Tier::Small => &mut self.small,
            Tier::Large => &mut self.large,
        }
    }
}

/// A request's lane within its tier: high overtakes normal (which keeps a share), and both overtake batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    High,
    #[default]
    Normal,
    /// Work that may wait for interactive requests: the Batch API's lines, or any request sent with it.
    Batch,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::High, Priority::Normal, Priority::Batch];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Priority::High => "high",
            Priority::Normal => "normal",
            Priority::Batch => "batch",
        }
    }

    pub fn parse(value: &str) -> Option<Priority> {
        match value {
            "high" => Some(Priority::High),
            "normal" => Some(Priority::Normal),
            "batch" => Some(Priority::Batch),
            _ => None,
        }
    }

    pub(crate) fn is_normal(&self) -> bool {
        *self == Priority::Normal
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A value kept once per lane (a tier's three queues).
#[derive(Debug, Clone, Default)]
pub struct Lanes<T> {
    pub high: T,
    pub normal: T,
    pub batch: T,
}

impl<T> Lanes<T> {
    pub fn get(&self, lane: Priority) -> &T {
        match lane {
            Priority::High => &self.high,
            Priority::Normal => &self.normal,
            Priority::Batch => &self.batch,
        }
    }

    pub(crate) fn get_mut(&mut self, lane: Priority) -> &mut T {
        match lane {
            Priority::High => &mut self.high,
            Priority::Normal => &mut self.normal,
            Priority::Batch => &mut self.batch,
        }
    }

    /// Builds every lane from one function of the lane.
    pub fn from_fn(mut make: impl FnMut(Priority) -> T) -> Self {
        Lanes { high: make(Priority::High), normal: make(Priority::Normal), batch: make(Priority::Batch) }
    }

    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> Lanes<U> {
        Lanes { high: f(self.high), normal: f(self.normal), batch: f(self.batch) }
    }

    /// Every lane's value, high first.
    pub fn all(&self) -> [&T; 3] {
        [&self.high, &self.normal, &self.batch]
    }
}
