//! The classifiers that are not an AWS service's: `openai` asks any OpenAI-compatible endpoint. What every
//! classifier shares (its instruction, its answer, its failure reports) is `ports::classifier`'s.

pub(crate) mod openai;
