//! `gpuinfer api-key add|list|revoke`: the API keys of a deployed stack's `/v1` routes, kept as digests in its key
//! store (the ApiKeysSecret): make one for a project (printed once), list them, revoke one.

use std::sync::Arc;

use anyhow::Context;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use tokio_util::sync::CancellationToken;

use crate::aws::sdk_config;
use crate::aws::secrets_manager::SecretKeyStore;
use crate::ports::KeyStore;
use crate::router::api_keys::{DEFAULT_CACHE_SECONDS, KeyDocument, check_project};

/// Random bytes in a new key (256 bits), after its `sk-`.
const KEY_BYTES: usize = 32;
/// Hex digits of a digest that `list` shows and `revoke` takes.
const SHOWN_DIGEST: usize = 12;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The secret that holds the keys' digests: the stack's ApiKeysSecretArn output (its ARN, or its name).
    #[arg(long, env = "API_KEYS_SECRET_ID", global = true)]
    pub(crate) secret_id: Option<String>,
    #[command(subcommand)]
    pub(crate) action: Action,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub(crate) enum Action {
    /// Make a key for a project and print it, once: the store keeps only its SHA-256 digest. Two keys of one project
    /// see the same files, batches and responses, so a key is rotated by adding its successor, then revoking it.
    Add {
        /// The project the key's requests create under /v1 belong to (1 to 64 letters, digits, '-', '_' or '.').
        #[arg(long)]
        project: String,
    },
    /// List the keys: each one's digest (its first digits, which revoke takes) and project; never a key.
    List,
    /// Revoke the key whose digest starts with --digest (as `list` shows it).
    Revoke {
        /// The first hex digits of the key's digest (8 at least).
        #[arg(long)]
        digest: String,
    },
}

pub struct Config {
    secret_id: String,
    action: Action,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        let secret_id = self.secret_id.map(|id| id.trim().to_owned()).filter(|id| !id.is_empty()).context(
            "give --secret-id (API_KEYS_SECRET_ID): the stack's ApiKeysSecretArn output, e.g. aws cloudformation \
             describe-stacks --stack-name gpuinfer --query \"Stacks[0].Outputs[?OutputKey=='ApiKeysSecretArn'].OutputValue\" \
             --output text",
        )?;
        if let Action::Add { project } = &self.action {
            check_project(project).map_err(|e| anyhow::anyhow!("--project: {e}"))?;
        }
        Ok(Config { secret_id, action: self.action })
    }
}

pub(crate) async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let client = aws_sdk_secretsmanager::Client::new(&sdk_config(None).await);
    let store: Arc<dyn KeyStore> = Arc::new(SecretKeyStore::new(client, config.secret_id));
    tokio::select! {
        done = act(store.as_ref(), &config.action) => done,
        () = shutdown.cancelled() => anyhow::bail!("interrupted"),
    }
}

/// Carries out `action` on `store`'s document.
async fn act(store: &dyn KeyStore, action: &Action) -> anyhow::Result<()> {
    let text = store.read().await?;
    let mut document = KeyDocument::parse(&text).map_err(anyhow::Error::msg).context("reading the key store")?;
    match action {
        Action::Add { project } => {
            let key = new_key()?;
            let digest = document.add(project, &key).map_err(anyhow::Error::msg)?.digest_hex();
            store.write(&document.to_json()).await?;
            println!("{key}");
            #[allow(clippy::print_stderr)]
            {
                eprintln!(
                    "added a key of project {project} (digest {}): the line above is the key, shown this once. The \
                     router accepts it within API_KEYS_CACHE_SECONDS ({DEFAULT_CACHE_SECONDS} s unless set).",
                    &digest[..SHOWN_DIGEST]
                );
            }
        }
        Action::List => {
            for entry in document.entries() {
                println!("{}  {}", &entry.digest_hex()[..SHOWN_DIGEST], entry.project());
            }
        }
        Action::Revoke { digest } => {
            let revoked = document.revoke(digest).map_err(anyhow::Error::msg)?;
            store.write(&document.to_json()).await?;
            println!(
                "revoked the key {} of project {}: refused within API_KEYS_CACHE_SECONDS ({DEFAULT_CACHE_SECONDS} s \
                 unless set)",
                &revoked.digest_hex()[..SHOWN_DIGEST],
                revoked.project()
            );
        }
    }
    Ok(())
}

/// A new key: `sk-` and 32 random bytes from the operating system, base64url.
fn new_key() -> anyhow::Result<String> {
    let mut bytes = [0u8; KEY_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no random bytes from the operating system: {e}"))?;
    Ok(format!("sk-{}", URL_SAFE_NO_PAD.encode(bytes)))
}
