//! Unit tests of `router/api_keys/key_document.rs`.

use super::*;

#[test]
fn a_document_lists_its_keys_by_project_and_reads_back_as_written() {
    let mut document = KeyDocument::parse(r#"{"keys": []}"#).unwrap();
    document.add("team-a", "sk-one").unwrap();
    document.add("team-a", "sk-rotated").unwrap();
    document.add("team-b", "sk-two").unwrap();
    assert!(document.add("team-c", "sk-one").is_err(), "a key already there");
    let text = document.to_json();
    let stored: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(stored["keys"][0]["project"], "team-a");
    assert_eq!(stored["keys"][0]["sha256"], hex::encode(digest("sk-one")));
    assert!(!text.contains("sk-one"), "the store holds digests, never keys");
    let again = KeyDocument::parse(&text).unwrap();
    assert_eq!(again, document);
    let keys = again.keys();
    assert_eq!(keys.project_of("sk-rotated"), Some("team-a"), "two keys of one project");
    assert_eq!(keys.project_of("sk-two"), Some("team-b"));
    assert_eq!(keys.project_of("sk-three"), None);
}

#[test]
fn a_key_is_revoked_by_a_prefix_of_its_digest_naming_it_alone() {
    let mut document = KeyDocument::default();
    document.add("team-a", "sk-one").unwrap();
    document.add("team-b", "sk-two").unwrap();
    let one = hex::encode(digest("sk-one"));
    assert!(document.revoke(&one[..MIN_DIGEST_PREFIX - 1]).unwrap_err().contains("at least"));
    assert!(document.revoke("zzzzzzzz").unwrap_err().contains("hex digits"));
    assert!(document.revoke("00000000").unwrap_err().contains("no key"));
    let revoked = document.revoke(&one[..MIN_DIGEST_PREFIX].to_uppercase()).unwrap();
    assert_eq!(revoked.project(), "team-a");
    assert_eq!(document.keys().project_of("sk-one"), None);
    assert_eq!(document.keys().project_of("sk-two"), Some("team-b"));
}

#[test]
fn a_document_with_a_bad_entry_is_refused_naming_it() {
    for (text, names) in [
        ("not json", "not a key document"),
        (r#"{"keys": [{"project": "team-a"}]}"#, "not a key document"),
        (r#"{"keys": [{"project": "a/b", "sha256": "00"}]}"#, "keys[0].sha256"),
    ] {
        let error = KeyDocument::parse(text).unwrap_err();
        assert!(error.contains(names), "{text}: {error}");
    }
    let bad_project = format!(r#"{{"keys": [{{"project": "a/b", "sha256": "{}"}}]}}"#, "0".repeat(64));
    assert!(KeyDocument::parse(&bad_project).unwrap_err().contains("keys[0].project"));
}
