//! The key store's document, `{"keys": [{"project": "<name>", "sha256": "<hex digest of the key>"}]}`: the keys a
//! deployed router accepts under `/v1`, kept as digests, each with its project. `gpuinfer api-key` adds, lists and
//! revokes them; the router reads them.

use serde::{Deserialize, Serialize};

use super::keys::{ApiKeys, KeyEntry, digest};

/// The fewest hex digits of a digest that name one key to revoke.
pub(crate) const MIN_DIGEST_PREFIX: usize = 8;
/// The longest document a Secrets Manager secret holds: its SecretString is at most 65,536 bytes.
pub const MAX_DOCUMENT_BYTES: usize = 65_536;

/// The document as JSON reads and writes it.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    keys: Vec<StoredKey>,
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredKey {
    project: String,
    sha256: String,
}

/// The key store's entries, in the order they were added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyDocument {
    entries: Vec<KeyEntry>,
}

impl KeyDocument {
    /// Reads the document; an entry whose project or digest is not valid makes the whole document invalid (a
    /// router then accepts no key rather than a guess).
    pub fn parse(text: &str) -> Result<Self, String> {
        let stored: Stored = serde_json::from_str(text).map_err(|e| {
            format!(r#"not a key document ({e}): it must read {{"keys": [{{"project": "…", "sha256": "…"}}]}}"#)
        })?;
        let entries = stored
            .keys
            .iter()
            .enumerate()
            .map(|(i, key)| {
                let digest = parse_digest(&key.sha256).map_err(|e| format!("keys[{i}].sha256: {e}"))?;
                KeyEntry::new(digest, &key.project).map_err(|e| format!("keys[{i}].project: {e}"))
            })
            .collect::<Result<_, String>>()?;
        Ok(KeyDocument { entries })
    }

    /// The document as the store keeps it.
    pub fn to_json(&self) -> String {
        let keys = self.entries.iter().map(|e| StoredKey { project: e.project().to_owned(), sha256: e.digest_hex() });
        let stored = Stored { keys: keys.collect() };
        serde_json::to_string_pretty(&stored).unwrap_or_default()
    }

    /// The keys a router accepts: every entry (none, for an empty document).
    pub fn keys(&self) -> ApiKeys {
        ApiKeys::new(self.entries.clone())
    }

    pub fn entries(&self) -> &[KeyEntry] {
        &self.entries
    }

    /// Adds `key` for `project`; refused for a key already there, and for one the store has no room for.
    pub fn add(&mut self, project: &str, key: &str) -> Result<&KeyEntry, String> {
        let entry = KeyEntry::new(digest(key), project)?;
        if self.entries.iter().any(|e| e.digest_hex() == entry.digest_hex()) {
            return Err("this key is already in the store".into());
        }
        self.entries.push(entry);
        if self.to_json().len() > MAX_DOCUMENT_BYTES {
            self.entries.pop();
            return Err(format!(
                "the key store is full ({} keys; a secret holds at most {MAX_DOCUMENT_BYTES} bytes): revoke keys no                  longer used",
                self.entries.len()
            ));
        }
        Ok(&self.entries[self.entries.len() - 1])
    }

    /// Removes the one entry whose digest starts with `prefix` (at least `MIN_DIGEST_PREFIX` hex digits) and
    /// returns it; refused when none or several match.
    pub fn revoke(&mut self, prefix: &str) -> Result<KeyEntry, String> {
        let prefix = prefix.trim().to_ascii_lowercase();
        if prefix.len() < MIN_DIGEST_PREFIX || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "{prefix:?}: give at least {MIN_DIGEST_PREFIX} hex digits of the key's digest (gpuinfer api-key list \
                 shows them)"
            ));
        }
        let matching: Vec<usize> =
            (0..self.entries.len()).filter(|&i| self.entries[i].digest_hex().starts_with(&prefix)).collect();
        match matching[..] {
            [one] => Ok(self.entries.remove(one)),
            [] => Err(format!("no key's digest starts with {prefix} (gpuinfer api-key list shows them)")),
            _ => Err(format!("{} keys' digests start with {prefix}: give more of the digest", matching.len())),
        }
    }
}

/// A SHA-256 digest written as 64 hex digits.
fn parse_digest(text: &str) -> Result<[u8; 32], String> {
    let mut digest = [0u8; 32];
    hex::decode_to_slice(text.trim(), &mut digest)
        .map_err(|_| format!("{:?} is not a SHA-256 digest (64 hex digits)", text.trim()))?;
    Ok(digest)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
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
}
