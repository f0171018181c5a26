//! The API-key store port: the one document of key digests a deployed router accepts.

use async_trait::async_trait;

use super::port_error::KeyStoreError;

/// Where the digests of the API keys a deployed router accepts are kept, as one JSON document (the stack's Secrets
/// Manager secret): the router reads it, `gpuinfer api-key` rewrites it.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// The document as it stands.
    async fn read(&self) -> Result<String, KeyStoreError>;
    /// Replaces the document with `document`.
    async fn write(&self, document: &str) -> Result<(), KeyStoreError>;
}
