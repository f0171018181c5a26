//! OpenAI's `expires_after` of a file: `{"anchor": "created_at", "seconds": …}`, from 3600 (an hour) to 2592000
//! (30 days) after the file's creation; in a JSON body an object, in a multipart form the fields
//! `expires_after[anchor]` and `expires_after[seconds]`.

use serde::{Deserialize, Serialize};

use super::error::OpenAiError;

/// The one anchor OpenAI offers.
const ANCHOR: &str = "created_at";
/// The shortest and longest expiry OpenAI accepts.
const MIN_SECONDS: i64 = 3600;
const MAX_SECONDS: i64 = 30 * 86_400;

/// When a file expires, as a client asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ExpiresAfter {
    pub(crate) anchor: String,
    pub(crate) seconds: i64,
}

impl ExpiresAfter {
    /// The policy, if it keeps OpenAI's rules.
    pub(super) fn checked(self) -> Result<Self, OpenAiError> {
        if self.anchor != ANCHOR {
            return Err(refused(format!("anchor must be \"{ANCHOR}\", got {:?}", self.anchor)));
        }
        if !(MIN_SECONDS..=MAX_SECONDS).contains(&self.seconds) {
            return Err(refused(format!("seconds must be from {MIN_SECONDS} to {MAX_SECONDS}, got {}", self.seconds)));
        }
        Ok(self)
    }

    /// When a file created at `created_at` (Unix seconds) expires.
    pub(super) fn expires_at(&self, created_at: i64) -> i64 {
        created_at + self.seconds
    }
}

fn refused(why: String) -> OpenAiError {
    OpenAiError::invalid_param("expires_after", format!("expires_after: {why}"))
}

/// `expires_after` as a multipart form's fields arrive, in any order.
#[derive(Debug, Default)]
pub(super) struct FormFields {
    pub(crate) anchor: Option<String>,
    pub(crate) seconds: Option<String>,
}

impl FormFields {
    /// The policy the fields give, None without them, or the refusal naming what is wrong.
    pub(super) fn checked(self) -> Result<Option<ExpiresAfter>, OpenAiError> {
        match (self.anchor, self.seconds) {
            (None, None) => Ok(None),
            (Some(anchor), Some(seconds)) => {
                let seconds = seconds
                    .trim()
                    .parse()
                    .map_err(|_| refused(format!("seconds must be a whole number, got {seconds:?}")))?;
                ExpiresAfter { anchor, seconds }.checked().map(Some)
            }
            _ => Err(refused(format!("give both expires_after[anchor] (\"{ANCHOR}\") and expires_after[seconds]"))),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Unit tests of `router/openai/expires_after.rs`.

    use super::*;

    fn form(anchor: Option<&str>, seconds: Option<&str>) -> Result<Option<ExpiresAfter>, OpenAiError> {
        FormFields { anchor: anchor.map(str::to_owned), seconds: seconds.map(str::to_owned) }.checked()
    }

    #[test]
    fn openais_bounds_hold_in_forms_and_json() {
        assert_eq!(form(None, None).unwrap(), None);
        let hour = form(Some("created_at"), Some("3600")).unwrap().unwrap();
        assert_eq!(hour.expires_at(100), 3700);
        assert!(form(Some("created_at"), Some("2592000")).is_ok());
        for (anchor, seconds) in
            [("created_at", "3599"), ("created_at", "2592001"), ("created_at", "1h"), ("x", "3600")]
        {
            assert!(form(Some(anchor), Some(seconds)).is_err(), "{anchor} {seconds}");
        }
        assert!(form(Some("created_at"), None).is_err());
        let json: ExpiresAfter = serde_json::from_str(r#"{"anchor": "created_at", "seconds": 10}"#).unwrap();
        assert!(json.checked().is_err());
    }
}
