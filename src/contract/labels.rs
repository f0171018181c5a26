//! What a caller tags a request with, kept with it and returned with its result, never sent to the engine: `user`
//! (who it is for) and `metadata` (at most 16 string pairs, bounded as OpenAI bounds them).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub(crate) const MAX_METADATA_PAIRS: usize = 16;
pub(crate) const MAX_METADATA_KEY_CHARS: usize = 64;
pub(crate) const MAX_METADATA_VALUE_CHARS: usize = 512;
/// Longest `user`, as OpenAI bounds its end-user ids.
pub(crate) const MAX_USER_CHARS: usize = 256;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Labels {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl Labels {
    /// Takes `user` and `metadata` out of a request body, each checked; else the field at fault and why.
    pub(crate) fn take(object: &mut Map<String, Value>) -> Result<Labels, (&'static str, String)> {
        let user = match object.remove("user") {
            None => None,
            Some(Value::String(user)) if user.chars().count() <= MAX_USER_CHARS => Some(user),
            Some(_) => return Err(("user", format!("must be a string of at most {MAX_USER_CHARS} characters"))),
        };
        let metadata = object.remove("metadata").map(check_metadata).transpose().map_err(|why| ("metadata", why))?;
        Ok(Labels { user, metadata })
    }
}

/// OpenAI's metadata: at most 16 pairs, keys of at most 64 characters, string values of at most 512; else why not.
pub(crate) fn check_metadata(value: Value) -> Result<Map<String, Value>, String> {
    let Value::Object(pairs) = value else {
        return Err(format!("must be an object of at most {MAX_METADATA_PAIRS} string values"));
    };
    if pairs.len() > MAX_METADATA_PAIRS {
        return Err(format!("at most {MAX_METADATA_PAIRS} pairs, got {}", pairs.len()));
    }
    let shown = |key: &str| format!("{:?}", key.chars().take(40).collect::<String>());
    for (key, value) in &pairs {
        if key.chars().count() > MAX_METADATA_KEY_CHARS {
            return Err(format!("key {}…: longer than {MAX_METADATA_KEY_CHARS} characters", shown(key)));
        }
        match value {
            Value::String(text) if text.chars().count() <= MAX_METADATA_VALUE_CHARS => {}
            Value::String(_) => {
                return Err(format!("{}: a value longer than {MAX_METADATA_VALUE_CHARS} characters", shown(key)));
            }
            _ => return Err(format!("{}: values must be strings", shown(key))),
        }
    }
    Ok(pairs)
}
