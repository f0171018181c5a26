//! Unit tests of `contract/openai_response.rs`: response ids map to their request and back; nothing else is taken for one.

use super::*;

#[test]
fn a_response_id_maps_to_its_request_and_back() {
    let request = RequestId::router_made();
    let id = response_id(request);
    assert_eq!(id, format!("resp_{}", request.uuid().simple()));
    assert_eq!(request_id(&id), Some(request));
}

#[test]
fn only_ids_made_as_response_ids_are_taken() {
    let uuid = uuid::Uuid::new_v4();
    for id in [
        format!("resp_{}", uuid.hyphenated()),
        format!("resp_{}", uuid.simple().to_string().to_uppercase()),
        format!("batch_{}", uuid.simple()),
        format!("resp_{}", uuid::Uuid::now_v7().simple()),
        "resp_".into(),
        "resp_../../results/x".into(),
    ] {
        assert_eq!(request_id(&id), None, "{id}");
    }
}
