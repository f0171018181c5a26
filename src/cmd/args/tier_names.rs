//! Tiers and priorities as the command line names them (`--tier`, `--route`, `--priority`): clap's `ValueEnum` for
//! the contract's `Tier` and `Priority`, so that their flags parse the names and list them in `--help`.

use clap::ValueEnum;
use clap::builder::PossibleValue;

use crate::contract::tier::{Priority, Tier};

impl ValueEnum for Tier {
    fn value_variants<'a>() -> &'a [Self] {
        &Tier::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.as_str()))
    }
}

impl ValueEnum for Priority {
    fn value_variants<'a>() -> &'a [Self] {
        &Priority::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        let name = PossibleValue::new(self.as_str());
        Some(match self {
            Priority::Batch => name.help(
                "Work that may wait for interactive requests: the Batch API's lines, or any request sent with it",
            ),
            Priority::High | Priority::Normal => name,
        })
    }
}
