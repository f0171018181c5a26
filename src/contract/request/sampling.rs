//! How the model samples its answer: its length, temperature and nucleus, and what the engines also honour (a seed,
//! the presence and frequency penalties, biases of given tokens, log probabilities with their alternatives).

use serde::Serialize;
use serde_json::{Map, Value};

use super::field_checks::{parse_number, parse_optional_number};
use super::refusal::{RequestError, clip};

pub const MAX_TOKENS_LIMIT: u32 = 2048;
pub(crate) const DEFAULT_MAX_TOKENS: u32 = 256;
pub(crate) const DEFAULT_TEMPERATURE: f64 = 0.7;
pub(crate) const DEFAULT_TOP_P: f64 = 1.0;
/// Most alternatives a token's log probability comes with (`topLogprobs`), as OpenAI bounds it.
pub(crate) const MAX_TOP_LOGPROBS: u64 = 20;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sampling {
    pub max_tokens: u32,
    pub temperature: f64,
    pub top_p: f64,
    /// Same seed, same parameters, same engine: the same answer, as far as the engine is deterministic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    /// Token id (as the engine's tokenizer numbers them, a decimal string) → bias from −100 to 100.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logit_bias: Option<Map<String, Value>>,
    /// Whether the answer comes with each token's log probability.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub logprobs: bool,
    /// How many most likely alternatives each token's log probability comes with (needs `logprobs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<u8>,
}

impl Sampling {
    /// The defaults, with `max_tokens` and `temperature` as given: what a short internal question asks.
    pub(crate) fn plain(max_tokens: u32, temperature: f64) -> Self {
        Sampling {
            max_tokens,
            temperature,
            top_p: DEFAULT_TOP_P,
            seed: None,
            presence_penalty: None,
            frequency_penalty: None,
            logit_bias: None,
            logprobs: false,
            top_logprobs: None,
        }
    }
}

/// Takes the sampling fields out of a request body, each checked, the defaults where absent.
pub(super) fn take_sampling(object: &mut Map<String, Value>) -> Result<Sampling, RequestError> {
    let max_tokens = match object.remove("maxTokens") {
        None => DEFAULT_MAX_TOKENS,
        Some(value) => value
            .as_u64()
            .filter(|n| (1..=u64::from(MAX_TOKENS_LIMIT)).contains(n))
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                RequestError::invalid(
                    "maxTokens",
                    format!("must be an integer from 1 to {MAX_TOKENS_LIMIT}, got {}", clip(&value)),
                )
            })?,
    };
    let temperature =
        parse_number(object, "temperature", DEFAULT_TEMPERATURE, |t| (0.0..=2.0).contains(&t), "from 0.0 to 2.0")?;
    let top_p = parse_number(object, "topP", DEFAULT_TOP_P, |p| p > 0.0 && p <= 1.0, "greater than 0 and at most 1")?;
    let seed = object
        .remove("seed")
        .map(|value| {
            value.as_i64().ok_or_else(|| {
                RequestError::invalid("seed", format!("must be an integer (64-bit signed), got {}", clip(&value)))
            })
        })
        .transpose()?;
    let penalty = |object: &mut Map<String, Value>, field: &str| {
        parse_optional_number(object, field, |p| (-2.0..=2.0).contains(&p), "from -2.0 to 2.0")
    };
    let presence_penalty = penalty(object, "presencePenalty")?;
    let frequency_penalty = penalty(object, "frequencyPenalty")?;
    let logit_bias = object.remove("logitBias").map(check_logit_bias).transpose()?;
    let logprobs = match object.remove("logprobs") {
        None => false,
        Some(Value::Bool(logprobs)) => logprobs,
        Some(other) => {
            return Err(RequestError::invalid("logprobs", format!("must be true or false, got {}", clip(&other))));
        }
    };
    let top_logprobs = match object.remove("topLogprobs") {
        None => None,
        Some(value) => Some(
            value.as_u64().filter(|n| *n <= MAX_TOP_LOGPROBS).and_then(|n| u8::try_from(n).ok()).ok_or_else(|| {
                RequestError::invalid(
                    "topLogprobs",
                    format!("must be an integer from 0 to {MAX_TOP_LOGPROBS}, got {}", clip(&value)),
                )
            })?,
        ),
    };
    if top_logprobs.is_some() && !logprobs {
        return Err(RequestError::invalid("topLogprobs", "needs logprobs: true"));
    }
    Ok(Sampling {
        max_tokens,
        temperature,
        top_p,
        seed,
        presence_penalty,
        frequency_penalty,
        logit_bias,
        logprobs,
        top_logprobs,
    })
}

/// `logitBias`: an object of token ids (decimal strings) to biases from −100 to 100, as OpenAI takes it.
fn check_logit_bias(value: Value) -> Result<Map<String, Value>, RequestError> {
    let invalid =
        || RequestError::invalid("logitBias", "an object of token ids (\"1234\") to numbers from -100 to 100");
    let Value::Object(biases) = value else { return Err(invalid()) };
    let fits = |(token, bias): (&String, &Value)| {
        token.parse::<u32>().is_ok() && bias.as_f64().is_some_and(|b| (-100.0..=100.0).contains(&b))
    };
    if biases.iter().all(fits) { Ok(biases) } else { Err(invalid()) }
}
