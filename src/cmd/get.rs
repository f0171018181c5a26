//! `gpuinfer get ID`: a request's result document from a router; the flags `submit` shares (router URL,
//! SigV4, waiting, output) and how both print a document.

use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::cmd::client::{Client, ClientError, Signer};
use crate::router::api_keys::client_key;

/// The exit statuses `ClientError::exit_code` gives, as `--help` shows them.
pub(crate) const EXIT_STATUS: &str = "\
Exit status:
  0  success: the result text (or, with --json, the document) is printed
  1  anything else: the router unreachable or failing (5xx), no AWS credentials for --sigv4
  2  the router refused the request (4xx): the message says which field is wrong
  3  the request ended in an error document (expired, canceled, engine_rejected, attempts_exhausted)
  4  no result yet: still pending after --timeout-seconds (without --wait: pending now)";

/// Where the router is and how to talk to it, wait and print; shared by `submit` and `get`.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// Router URL: a local `gpuinfer dev` or `router`, or the API Gateway stage URL.
    #[arg(long, env = "GPUINFER_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Sign requests with SigV4 (service execute-api; credentials and region from the AWS chain), for an API
    /// with IAM authorization.
    #[arg(long, env = "GPUINFER_SIGV4")]
    pub(crate) sigv4: bool,
    /// The API key of a router or `gpuinfer dev` started with --api-key (the same variable; of a list, the first
    /// key is sent, without its `project=`).
    #[arg(long, env = "GPUINFER_API_KEY", hide_env_values = true, conflicts_with = "sigv4")]
    pub api_key: Option<String>,
    /// Wait for the result document, looking with back-off (0.5 s growing to 5 s), and print it.
    #[arg(long, env = "GPUINFER_WAIT")]
    pub(crate) wait: bool,
    /// Longest wait with --wait, in seconds.
    #[arg(long, env = "GPUINFER_TIMEOUT_SECONDS", default_value_t = 600)]
    pub(crate) timeout_seconds: u64,
    /// Print whole JSON documents instead of the generated text.
    #[arg(long, env = "GPUINFER_JSON")]
    pub(crate) json: bool,
}

impl ClientArgs {
    pub async fn client(&self) -> Result<Client, ClientError> {
        let signer = if self.sigv4 { Some(Signer::from_environment().await?) } else { None };
        Ok(Client::new(&self.url, signer)?.with_api_key(self.api_key.as_deref().and_then(client_key)))
    }

    /// Waits for `request_id`'s document (or stops at `shutdown`), prints it, and turns an error document
    /// into its error.
    pub(crate) async fn wait_and_print(
        &self,
        client: &Client,
        request_id: &str,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<()> {
        let document = tokio::select! {
            document = client.wait(request_id, Duration::from_secs(self.timeout_seconds)) => document?,
            () = shutdown.cancelled() => anyhow::bail!("interrupted while waiting for {request_id}"),
        };
        Ok(self.print(&document)?)
    }

    /// Prints the text of a success document (the whole document with --json); an error document is its error.
    pub(crate) fn print(&self, document: &Value) -> Result<(), ClientError> {
        if self.json {
            println!("{}", serde_json::to_string_pretty(document).unwrap_or_default());
        }
        if let Some(error) = ClientError::from_document(document) {
            return Err(error);
        }
        if !self.json {
            println!("{}", document["result"]["text"].as_str().unwrap_or_default());
        }
        Ok(())
    }
}

#[derive(Debug, clap::Args)]
#[command(after_help = EXIT_STATUS)]
pub struct Args {
    /// The requestId that `submit` (or POST /infer) answered.
    pub request_id: crate::contract::request_id::RequestId,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub struct Config {
    request_id: String,
    client: ClientArgs,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        Ok(Config { request_id: self.request_id.to_string(), client: self.client })
    }
}

pub(crate) async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let client = config.client.client().await?;
    if config.client.wait {
        return config.client.wait_and_print(&client, &config.request_id, &shutdown).await;
    }
    match client.result(&config.request_id).await? {
        Some(document) => Ok(config.client.print(&document)?),
        None => Err(ClientError::TimedOut { request_id: config.request_id, waited_s: 0 }.into()),
    }
}
