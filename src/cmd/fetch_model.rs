//! `gpuinfer fetch-model`: download model weights from S3 at container start, fast and resumable.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::aws::model_download::{FetchConfig, fetch};
use crate::aws::s3::{self, S3Location};
use crate::aws::sdk_config;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// S3 prefix holding the model's files, e.g. s3://my-models/mistral-7b-awq/.
    pub(crate) source: String,
    /// Local folder to fill (created if needed); files already complete are kept.
    pub(crate) dest: PathBuf,
    /// Ranged GETs in flight at once, across all files.
    #[arg(long, env = "FETCH_CONCURRENCY", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=512))]
    pub concurrency: u32,
    /// Size of one ranged GET, in MiB.
    #[arg(long, env = "FETCH_PART_SIZE_MIB", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub(crate) part_size_mib: u64,
}

pub struct Config {
    source: S3Location,
    dest: PathBuf,
    fetch: FetchConfig,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        Ok(Config {
            source: S3Location::parse(&self.source).map_err(anyhow::Error::msg)?,
            dest: self.dest,
            fetch: FetchConfig {
                concurrency: self.concurrency as usize,
                part_size: self.part_size_mib * 1024 * 1024,
                interactive: std::io::stderr().is_terminal(),
                log_every: Duration::from_secs(5),
            },
        })
    }
}

pub(crate) async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let client = s3::client(&sdk_config(None).await);
    let started = Instant::now();
    let summary = tokio::select! {
        summary = fetch(&client, &config.source, &config.dest, &config.fetch) => summary?,
        () = shutdown.cancelled() => anyhow::bail!("interrupted; run again to resume where it stopped"),
    };
    let seconds = started.elapsed().as_secs_f64();
    tracing::info!(
        files = summary.files,
        skipped = summary.skipped,
        downloaded_mib = format!("{:.1}", summary.bytes_downloaded as f64 / 1_048_576.0),
        seconds = format!("{seconds:.1}"),
        "model ready in {}",
        config.dest.display()
    );
    Ok(())
}
