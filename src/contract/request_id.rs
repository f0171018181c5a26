//! A request's id: a UUID v4 in its hyphenated form, kept exactly as the client wrote it. The AWS sample accepts
//! any case and keys results by the id as sent, so the 202, the result key and the document all repeat the
//! client's own letters; as an identity, though, case does not count (`canonical`): two spellings of one UUID are
//! one id, which only one request may hold.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The UUID and which of its 32 hex digits were written in upper case (bit i: digit i): `Copy`, and printed back
/// as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId {
    uuid: Uuid,
    upper: u32,
}

impl RequestId {
    /// A fresh random id (lower case).
    pub fn new_v4() -> Self {
        Uuid::new_v4().into()
    }

    /// A fresh id the router makes for a request sent without one: a random UUID v4 (lower case) whose last four
    /// bytes check the first twelve ([`RequestId::is_router_made`]), so the router knows its own ids when a client
    /// sends one back, without keeping a record of each.
    pub fn router_made() -> Self {
        let mut bytes = *Uuid::new_v4().as_bytes();
        let check = router_check(&bytes);
        bytes[12..].copy_from_slice(&check);
        Uuid::from_bytes(bytes).into()
    }

    /// Whether the router made this id (of a random client id, one in 2^32 looks so).
    pub fn is_router_made(&self) -> bool {
        let bytes = self.uuid.as_bytes();
        bytes[12..] == router_check(bytes)
    }

    /// The id in `text` when it is a UUID v4 (RFC 4122 variant) in the hyphenated 8-4-4-4-12 form, in any case:
    /// the AWS sample's rule.
    pub fn parse(text: &str) -> Option<Self> {
        let hyphenated = text.len() == 36 && [8, 13, 18, 23].iter().all(|&i| text.as_bytes()[i] == b'-');
        let uuid = Uuid::try_parse(text)
            .ok()
            .filter(|uuid| hyphenated && uuid.get_version_num() == 4 && uuid.get_variant() == uuid::Variant::RFC4122)?;
        let upper = text
            .chars()
            .filter(|c| *c != '-')
            .enumerate()
            .filter(|(_, c)| c.is_ascii_uppercase())
            .fold(0u32, |mask, (i, _)| mask | (1 << i));
        Some(RequestId { uuid, upper })
    }

    pub fn uuid(&self) -> Uuid {
        self.uuid
    }

    /// The id's identity, whatever its case: the same UUID in lower case. Two spellings that differ only in case
    /// have one canonical id.
    pub(crate) fn canonical(&self) -> RequestId {
        self.uuid.into()
    }
}

/// The check of a router-made id: the first four bytes of SHA-256 over a label and the id's first twelve bytes.
fn router_check(bytes: &[u8; 16]) -> [u8; 4] {
    let digest = Sha256::new().chain_update(b"gpuinfer router-made requestId").chain_update(&bytes[..12]).finalize();
    [digest[0], digest[1], digest[2], digest[3]]
}

impl From<Uuid> for RequestId {
    fn from(uuid: Uuid) -> Self {
        RequestId { uuid, upper: 0 }
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buffer = Uuid::encode_buffer();
        let lower = self.uuid.hyphenated().encode_lower(&mut buffer);
        let mut digit = 0;
        for c in lower.chars() {
            if c == '-' {
                f.write_str("-")?;
                continue;
            }
            let c = if self.upper & (1 << digit) != 0 { c.to_ascii_uppercase() } else { c };
            digit += 1;
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

impl FromStr for RequestId {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        RequestId::parse(text).ok_or_else(|| format!("{text}: not a UUID v4 (8-4-4-4-12 hex digits)"))
    }
}

impl Serialize for RequestId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RequestId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
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
}
