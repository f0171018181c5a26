//! A Secrets Manager secret's current SecretString (GetSecretValue, PutSecretValue): the API-key store, whose
//! document it is, and the OpenAI webhook's signing key, read once as the router starts.

use async_trait::async_trait;
use aws_sdk_secretsmanager::Client;

use crate::ports::{KeyStore, KeyStoreError};

#[derive(Debug, Clone)]
pub(crate) struct SecretKeyStore {
    client: Client,
    /// The secret's ARN or name.
    secret_id: String,
}

impl SecretKeyStore {
    pub(crate) fn new(client: Client, secret_id: String) -> Self {
        SecretKeyStore { client, secret_id }
    }
}

#[async_trait]
impl KeyStore for SecretKeyStore {
    async fn read(&self) -> Result<String, KeyStoreError> {
        let output = self
            .client
            .get_secret_value()
            .secret_id(&self.secret_id)
            .send()
            .await
            .map_err(|e| KeyStoreError::caused(&format!("GetSecretValue {}", self.secret_id), e))?;
        output.secret_string.ok_or_else(|| {
            KeyStoreError::unavailable(format!("{} holds no SecretString (the key document is text)", self.secret_id))
        })
    }

    async fn write(&self, document: &str) -> Result<(), KeyStoreError> {
        self.client
            .put_secret_value()
            .secret_id(&self.secret_id)
            .secret_string(document)
            .send()
            .await
            .map_err(|e| KeyStoreError::caused(&format!("PutSecretValue {}", self.secret_id), e))?;
        Ok(())
    }
}
