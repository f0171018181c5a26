//! `gpuinfer submit`: send one request to a router (a prompt from the arguments or stdin, or a whole JSON
//! request), print its requestId, or with --wait its result.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, bail};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::cmd::get::{ClientArgs, EXIT_STATUS};
use crate::contract::request::{DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_TOP_P};
use crate::contract::tier::{Priority, Tier};

#[derive(Debug, clap::Args)]
#[command(after_help = EXIT_STATUS)]
pub struct Args {
    /// The prompt (words are joined with spaces); read from stdin when none is given.
    pub(crate) prompt: Vec<String>,
    /// Send the JSON request in this file (`-`: stdin) instead of a prompt; the flags below override its fields.
    #[arg(long, env = "GPUINFER_JSON_REQUEST", conflicts_with = "prompt")]
    pub(crate) json_request: Option<PathBuf>,
    #[command(flatten)]
    pub fields: FieldArgs,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// The request's fields, each overriding the JSON request's.
#[derive(Debug, clap::Args)]
pub struct FieldArgs {
    /// requestId (UUID v4) [default: the router generates one].
    #[arg(long, env = "GPUINFER_REQUEST_ID")]
    pub request_id: Option<crate::contract::request_id::RequestId>,
    #[arg(long, env = "GPUINFER_MAX_TOKENS", help = format!(
        "Most tokens to generate (1–2048) [router default: {DEFAULT_MAX_TOKENS}]"
    ))]
    pub max_tokens: Option<u32>,
    #[arg(long, env = "GPUINFER_TEMPERATURE", help = format!(
        "Sampling temperature (0.0–2.0) [router default: {DEFAULT_TEMPERATURE}]"
    ))]
    pub temperature: Option<f64>,
    #[arg(long, env = "GPUINFER_TOP_P", help = format!("Nucleus sampling (0, 1] [router default: {DEFAULT_TOP_P}]"))]
    pub top_p: Option<f64>,
    /// Skip classification: send to this tier.
    #[arg(long, env = "GPUINFER_ROUTE", value_enum)]
    pub route: Option<Tier>,
    /// The lane within the tier [router default: normal].
    #[arg(long, env = "GPUINFER_PRIORITY", value_enum)]
    pub(crate) priority: Option<Priority>,
    /// Seconds from acceptance after which the request is not run (1–86400).
    #[arg(long, env = "GPUINFER_DEADLINE_SECONDS", conflicts_with = "deadline")]
    pub(crate) deadline_seconds: Option<f64>,
    /// RFC 3339 date-time after which the request is not run (within 24 hours).
    #[arg(long, env = "GPUINFER_DEADLINE")]
    pub(crate) deadline: Option<String>,
    /// URL the result document is POSTed to, signed (https; http only where the operator allows it).
    #[arg(long, env = "GPUINFER_CALLBACK_URL")]
    pub(crate) callback_url: Option<String>,
}

impl FieldArgs {
    /// The fields given, by their JSON names.
    fn given(self) -> impl Iterator<Item = (String, Value)> {
        let fields = [
            ("requestId", self.request_id.map(|id| json!(id))),
            ("maxTokens", self.max_tokens.map(|n| json!(n))),
            ("temperature", self.temperature.map(|t| json!(t))),
            ("topP", self.top_p.map(|p| json!(p))),
            ("route", self.route.map(|tier| json!(tier))),
            ("priority", self.priority.map(|priority| json!(priority))),
            ("deadlineSeconds", self.deadline_seconds.map(|s| json!(s))),
            ("deadline", self.deadline.map(|d| json!(d))),
            ("callbackUrl", self.callback_url.map(|url| json!(url))),
        ];
        fields.into_iter().filter_map(|(name, value)| Some((name.to_owned(), value?)))
    }
}

pub struct Config {
    request: Value,
    client: ClientArgs,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        let mut request = match &self.json_request {
            Some(path) => {
                let text = read_input(Some(path))?;
                match serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))? {
                    Value::Object(object) => object,
                    _ => bail!("{}: a request is a JSON object", path.display()),
                }
            }
            None => {
                let prompt = if self.prompt.is_empty() { read_input(None)? } else { self.prompt.join(" ") };
                Map::from_iter([("prompt".to_owned(), json!(prompt.trim_end_matches('\n')))])
            }
        };
        request.extend(self.fields.given());
        Ok(Config { request: Value::Object(request), client: self.client })
    }
}

/// The contents of `path` (`-` or None: stdin).
fn read_input(path: Option<&PathBuf>) -> anyhow::Result<String> {
    match path.filter(|p| p.as_os_str() != "-") {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display())),
        None => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).context("cannot read stdin")?;
            Ok(text)
        }
    }
}

pub(crate) async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let client = config.client.client().await?;
    let answer = client.submit(&config.request).await?;
    let request_id = answer["requestId"].as_str().context("the router's answer has no requestId")?.to_owned();
    if config.client.wait {
        return config.client.wait_and_print(&client, &request_id, &shutdown).await;
    }
    if config.client.json {
        println!("{answer}");
    } else {
        println!("{request_id}");
    }
    Ok(())
}
