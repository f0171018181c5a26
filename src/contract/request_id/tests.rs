//! Unit tests of `contract/request_id.rs`.

use super::*;

#[test]
fn an_id_prints_back_exactly_as_it_was_sent() {
    for sent in [
        "550e8400-e29b-41d4-a716-446655440000",
        "550E8400-E29B-41D4-A716-446655440000",
        "550e8400-E29b-41D4-a716-44665544000A",
    ] {
        let id = RequestId::parse(sent).unwrap();
        assert_eq!(id.to_string(), sent);
        assert_eq!(id.uuid(), Uuid::parse_str(sent).unwrap());
        assert_eq!(serde_json::to_string(&id).unwrap(), format!("\"{sent}\""));
    }
}

#[test]
fn spellings_that_differ_only_in_case_have_one_canonical_id() {
    let lower = RequestId::parse("550e8400-e29b-41d4-a716-44665544000a").unwrap();
    let upper = RequestId::parse("550E8400-E29B-41D4-A716-44665544000A").unwrap();
    assert_ne!(lower, upper, "kept as sent");
    assert_eq!(lower.canonical(), upper.canonical());
    assert_eq!(upper.canonical().to_string(), "550e8400-e29b-41d4-a716-44665544000a");
}

#[test]
fn only_a_hyphenated_version_4_uuid_is_an_id() {
    for refused in [
        "550e8400e29b41d4a716446655440000",
        "{550e8400-e29b-41d4-a716-446655440000}",
        "urn:uuid:550e8400-e29b-41d4-a716-446655440000",
        "550e8400-e29b-11d4-a716-446655440000",
        "550e8400-e29b-41d4-c716-446655440000",
        "00000000-0000-0000-0000-000000000000",
        "550e8400-e29b-41d4-a716-44665544000g",
        "",
    ] {
        assert_eq!(RequestId::parse(refused), None, "{refused}");
    }
}

#[test]
fn the_router_knows_the_ids_it_made_and_not_a_clients() {
    for _ in 0..100 {
        let made = RequestId::router_made();
        assert!(made.is_router_made());
        let sent = RequestId::parse(&made.to_string().to_uppercase()).unwrap();
        assert!(sent.is_router_made(), "in any case");
        assert_eq!(made.uuid().get_version_num(), 4);
        assert_eq!(made.uuid().get_variant(), uuid::Variant::RFC4122);
    }
    let clients = (0..1000).filter(|_| RequestId::new_v4().is_router_made()).count();
    assert_eq!(clients, 0, "a random id passes the 32-bit check once in 2^32");
    let mut altered = *RequestId::router_made().uuid().as_bytes();
    altered[3] ^= 1;
    assert!(!RequestId::from(Uuid::from_bytes(altered)).is_router_made());
}
