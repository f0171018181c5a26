//! The API keys a router accepts, kept as SHA-256 digests, each with the project that owns what its requests
//! create under `/v1`, and the caller a checked request carries (`Caller`).
//!
//! Locally the keys come from `--api-key` (`[project=]key`, several at once) and guard every route but
//! `GET /healthz`. A key without a project is a project of its own, named after its digest. On a deployed stack they
//! come from a key store (`API_KEYS_SECRET_ID`: `key_document`, `stored_keys`) and guard the `/v1` routes, where
//! OpenAI's clients send them; API Gateway's IAM guards the others.
//!
//! - `keys`: the keys and their projects, the caller; `key_source`: where they come from, which routes they guard
//! - `key_document`: the key store's document; `stored_keys`: its keys, read again after the cache time

mod key_document;
mod key_source;
mod keys;
mod stored_keys;

pub use key_document::{KeyDocument, MAX_DOCUMENT_BYTES};
pub use key_source::KeySource;
pub use keys::{ApiKeys, digest};
pub(crate) use keys::{Caller, check_project, client_key};
pub(crate) use stored_keys::DEFAULT_CACHE_SECONDS;
pub use stored_keys::StoredKeys;
