//! Where a router's keys come from: those it was started with, or a key store's, read again after its cache time;
//! and which requests must carry one.

use std::sync::Arc;

use super::keys::ApiKeys;
use super::stored_keys::StoredKeys;
use crate::ports::KeyStoreError;

/// Where a router's keys come from, and which requests must carry one.
#[derive(Debug, Clone)]
pub enum KeySource {
    /// Keys given when the router started (`--api-key`): every route but `GET /healthz`.
    Local(ApiKeys),
    /// The keys of a key store, read again after its cache time: the `/v1` routes only.
    Stored(Arc<StoredKeys>),
}

impl KeySource {
    /// Whether a request for `path` must carry a key.
    pub fn guards(&self, path: &str) -> bool {
        match self {
            KeySource::Local(_) => true,
            KeySource::Stored(_) => path == "/v1" || path.starts_with("/v1/"),
        }
    }

    /// The project of the key `token`, None when it is no key of this source; an error when the keys could not be
    /// read (the request is then refused, never let through).
    pub async fn project_of(&self, token: &str) -> Result<Option<String>, KeyStoreError> {
        match self {
            KeySource::Local(keys) => Ok(keys.project_of(token).map(str::to_owned)),
            KeySource::Stored(stored) => stored.project_of(token).await,
        }
    }

    /// What a refused client should send, for its error message.
    pub fn what_to_send(&self) -> &'static str {
        match self {
            KeySource::Local(_) => "send Authorization: Bearer <one of the keys gpuinfer was started with>",
            KeySource::Stored(_) => {
                "send Authorization: Bearer <key> (an OpenAI client's api_key), a key made with gpuinfer api-key add"
            }
        }
    }
}
