//! The keys a router accepts, kept as SHA-256 digests each with its project (`KeyEntry`, `ApiKeys`), as given
//! locally (`[project=]key`, several at once; a key without a project is a project of its own, named after its
//! digest), a project's name, and the caller a checked request carries (`Caller`).

use sha2::{Digest, Sha256};

/// A project's name: what owns files, uploads, batches and responses.
const MAX_PROJECT_CHARS: usize = 64;

/// One accepted key: its digest and its project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyEntry {
    digest: [u8; 32],
    project: String,
}

impl KeyEntry {
    pub fn new(digest: [u8; 32], project: &str) -> Result<Self, String> {
        check_project(project)?;
        Ok(KeyEntry { digest, project: project.to_owned() })
    }

    pub fn project(&self) -> &str {
        &self.project
    }

    /// The key's SHA-256 digest in lowercase hex, as the key store writes it.
    pub fn digest_hex(&self) -> String {
        hex::encode(self.digest)
    }

    /// A key given as `[project=]key`.
    fn parse(text: &str) -> Result<Self, String> {
        let (project, key) = split(text);
        if key.is_empty() {
            return Err("an API key is empty: give --api-key [project=]key".into());
        }
        let project = project.map_or_else(|| format!("key-{}", &hex::encode(digest(key))[..12]), str::to_owned);
        Ok(KeyEntry { digest: digest(key), project })
    }
}

/// `[project=]key` as its project, when named, and its key. A `=` not after a project name is the key's own
/// (base64 padding, say).
fn split(text: &str) -> (Option<&str>, &str) {
    let text = text.trim();
    match text.split_once('=') {
        Some((project, key)) if check_project(project).is_ok() && !key.is_empty() => (Some(project), key),
        _ => (None, text),
    }
}

/// The key a client sends, from a `--api-key` list as the router takes it: the first, without its `project=`.
pub(crate) fn client_key(list: &str) -> Option<String> {
    let first = list.split(',').map(str::trim).find(|key| !key.is_empty())?;
    Some(split(first).1.to_owned())
}

/// The keys a router accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeys {
    entries: Vec<KeyEntry>,
}

impl ApiKeys {
    /// The keys of a key store's entries.
    pub(super) fn new(entries: Vec<KeyEntry>) -> Self {
        ApiKeys { entries }
    }

    /// Keys given on the command line or in `GPUINFER_API_KEY`: `[project=]key`, comma-separated or repeated.
    pub fn parse_local(values: &[String]) -> Result<Option<Self>, String> {
        let entries: Vec<KeyEntry> = values
            .iter()
            .flat_map(|value| value.split(','))
            .filter(|key| !key.trim().is_empty())
            .map(KeyEntry::parse)
            .collect::<Result<_, _>>()?;
        Ok((!entries.is_empty()).then_some(ApiKeys { entries }))
    }

    /// The project of the key `token`, when it is one of these. Every entry is compared, in full.
    pub fn project_of(&self, token: &str) -> Option<&str> {
        let sent = digest(token);
        let mut found = None;
        for entry in &self.entries {
            let diff = entry.digest.iter().zip(&sent).fold(0u8, |diff, (a, b)| diff | (a ^ b));
            if diff == 0 {
                found = Some(entry.project.as_str());
            }
        }
        found
    }
}

/// Who sent a request that reached a handler: the project of its API key, or anyone where no key is asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Caller {
    pub project: Option<String>,
}

impl Caller {
    pub(crate) fn of(project: &str) -> Self {
        Caller { project: Some(project.to_owned()) }
    }

    /// Whether this caller may see an object owned by `owner` (None: created where no key was asked). A caller
    /// without a project (no keys configured) sees everything; one with a project sees only its own.
    pub(crate) fn owns(&self, owner: Option<&str>) -> bool {
        self.project.is_none() || self.project.as_deref() == owner
    }
}

/// A project name is 1 to 64 letters, digits, `-`, `_` or `.`.
pub(crate) fn check_project(project: &str) -> Result<(), String> {
    let valid = (1..=MAX_PROJECT_CHARS).contains(&project.len())
        && project.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if valid {
        Ok(())
    } else {
        Err(format!("{project:?}: a project is 1 to {MAX_PROJECT_CHARS} letters, digits, '-', '_' or '.'"))
    }
}

/// The SHA-256 digest of a key.
pub fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.trim().as_bytes()).into()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
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
}
