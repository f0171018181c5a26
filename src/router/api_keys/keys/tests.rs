//! Unit tests of `router/api_keys/keys.rs`.

use super::*;

fn keys(values: &[&str]) -> ApiKeys {
    ApiKeys::parse_local(&values.iter().map(|v| (*v).to_owned()).collect::<Vec<_>>()).unwrap().unwrap()
}

#[test]
fn several_keys_are_accepted_each_with_its_project() {
    let keys = keys(&["team-a=sk-one,team-b=sk-two", "team-a=sk-rotated"]);
    assert_eq!(keys.project_of("sk-one"), Some("team-a"));
    assert_eq!(keys.project_of("sk-rotated"), Some("team-a"), "a second key of one project sees the same objects");
    assert_eq!(keys.project_of("sk-two"), Some("team-b"));
    assert_eq!(keys.project_of("sk-three"), None);
    assert_eq!(keys.project_of("team-a=sk-one"), None, "the project is not part of the key");
}

#[test]
fn a_key_without_a_project_is_a_project_of_its_own() {
    let two = keys(&["sk-alone", "sk-other"]);
    let (alone, other) = (two.project_of("sk-alone").unwrap(), two.project_of("sk-other").unwrap());
    assert!(alone.starts_with("key-") && alone.len() == 16, "{alone}");
    assert_ne!(alone, other);
    // A key whose '=' is not after a project name is the whole key (base64 padding, say).
    assert!(keys(&["c2stYWxvbmU="]).project_of("c2stYWxvbmU=").is_some_and(|p| p.starts_with("key-")));
}

#[test]
fn no_keys_means_none_asked_and_a_bad_project_is_refused() {
    assert_eq!(ApiKeys::parse_local(&[]).unwrap(), None);
    assert_eq!(ApiKeys::parse_local(&[" , ".into()]).unwrap(), None);
    assert!(KeyEntry::new([0; 32], "a/b").is_err());
    assert!(KeyEntry::new([0; 32], &"p".repeat(65)).is_err());
}

#[test]
fn a_caller_sees_its_own_and_no_keys_sees_everything() {
    assert!(Caller::default().owns(Some("team-a")) && Caller::default().owns(None));
    assert!(Caller::of("team-a").owns(Some("team-a")));
    assert!(!Caller::of("team-a").owns(Some("team-b")));
    assert!(!Caller::of("team-a").owns(None), "what was made with no key asked is not a project's");
}

#[test]
fn a_client_sends_the_first_key_of_a_list_without_its_project() {
    assert_eq!(client_key("team-a=sk-one,team-b=sk-two").as_deref(), Some("sk-one"));
    assert_eq!(client_key(" sk-alone ").as_deref(), Some("sk-alone"));
    assert_eq!(client_key("c2stYWxvbmU=").as_deref(), Some("c2stYWxvbmU="));
    assert_eq!(client_key(" , "), None);
}
