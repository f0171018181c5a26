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
    for (anchor, seconds) in [("created_at", "3599"), ("created_at", "2592001"), ("created_at", "1h"), ("x", "3600")] {
        assert!(form(Some(anchor), Some(seconds)).is_err(), "{anchor} {seconds}");
    }
    assert!(form(Some("created_at"), None).is_err());
    let json: ExpiresAfter = serde_json::from_str(r#"{"anchor": "created_at", "seconds": 10}"#).unwrap();
    assert!(json.checked().is_err());
}
