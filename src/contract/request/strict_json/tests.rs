//! Unit tests of `contract/request/strict_json.rs`.

use serde_json::json;

use super::parse_json;

#[test]
fn a_key_given_twice_is_refused_at_any_depth_and_anything_else_reads_as_serde_json_reads_it() {
    for body in [r#"{"a": 1, "a": 2}"#, r#"[{"b": {"c": null, "c": null}}]"#] {
        let error = parse_json(body.as_bytes()).unwrap_err();
        assert!(error.to_string().contains("given twice"), "{body}: {error}");
    }
    let body = r#"{"a": [1, -2, 2.5, "x", true, null, {"b": {}}], "c": 18446744073709551615}"#;
    assert_eq!(
        parse_json(body.as_bytes()).unwrap(),
        json!({"a": [1, -2, 2.5, "x", true, null, {"b": {}}], "c": u64::MAX})
    );
}
