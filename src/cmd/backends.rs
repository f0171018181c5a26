//! Adapter wiring shared by the subcommands: SQS/S3 when AWS names are configured, else the embedded backends.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context, bail};
use aws_config::SdkConfig;
use tokio::sync::OnceCell;

use crate::aws::s3::{self, S3Location, S3Store};
use crate::aws::sdk_config;
use crate::aws::sqs::SqsQueue;
use crate::aws::sqs_results::SqsResults;
use crate::contract::tier::{Lanes, Priority, Tier};
use crate::local::LocalBackends;
use crate::ports::{Queue, ResultStore};
use crate::worker::shared_lane::SharedLane;

/// Where result documents are written and read (OUTPUT_DESTINATION).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Destination {
    Folder(PathBuf),
    S3(S3Location),
    Queue(String),
}

impl Destination {
    /// `s3://bucket/prefix/`, an SQS queue URL, a folder (or `file://` path); none → the data directory.
    pub(crate) fn parse(value: Option<&str>, data_dir: &Path) -> anyhow::Result<Self> {
        Ok(match value.map(str::trim) {
            None | Some("") => Destination::Folder(data_dir.to_owned()),
            Some(v) if v.starts_with("s3://") => Destination::S3(S3Location::parse(v).map_err(anyhow::Error::msg)?),
            Some(v) if v.starts_with("https://") || v.starts_with("http://") => Destination::Queue(v.to_owned()),
            Some(v) => Destination::Folder(PathBuf::from(v.strip_prefix("file://").unwrap_or(v))),
        })
    }
}

/// Where a worker or the router finds a tier's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum QueueSource {
    /// The embedded queue of the tier in the data directory.
    Embedded,
    Sqs {
        url: String,
        dead_letter_url: Option<String>,
    },
    /// The high lane of a tier on SQS with one queue (the AWS sample's setup): it shares the normal lane's queue.
    SharedWithNormal,
}

impl QueueSource {
    pub(crate) fn from_url(url: Option<String>, dead_letter_url: Option<String>) -> Self {
        match url.filter(|u| !u.trim().is_empty()) {
            Some(url) => QueueSource::Sqs { url, dead_letter_url: dead_letter_url.filter(|u| !u.trim().is_empty()) },
            None => QueueSource::Embedded,
        }
    }

    /// A tier's lanes from their URLs (`names`: the variables that set them): SQS when the normal lane's is set
    /// (without a high or batch lane's, those requests share the normal queue), embedded when none is.
    pub(crate) fn lanes(
        urls: Lanes<Option<String>>,
        dead_letter_url: Option<String>,
        names: Lanes<&str>,
    ) -> anyhow::Result<Lanes<QueueSource>> {
        let normal = QueueSource::from_url(urls.normal, dead_letter_url.clone());
        let beside_normal = |url: Option<String>, name: &str| match QueueSource::from_url(url, dead_letter_url.clone())
        {
            QueueSource::Embedded if !normal.is_embedded() => Ok(QueueSource::SharedWithNormal),
            QueueSource::Sqs { .. } if normal.is_embedded() => {
                bail!("{name} is set but {} is not: set both (SQS), or neither (embedded queues)", names.normal)
            }
            lane => Ok(lane),
        };
        let (high, batch) = (beside_normal(urls.high, names.high)?, beside_normal(urls.batch, names.batch)?);
        Ok(Lanes { high, normal, batch })
    }

    pub(crate) fn is_embedded(&self) -> bool {
        *self == QueueSource::Embedded
    }
}

/// Opens adapters on first use: the AWS SDK configuration, or the data directory's SQLite file.
#[derive(Debug)]
pub(crate) struct Wiring {
    data_dir: PathBuf,
    local: OnceLock<LocalBackends>,
    sdk: OnceCell<SdkConfig>,
}

impl Wiring {
    pub(crate) fn new(data_dir: PathBuf) -> Self {
        Wiring { data_dir, local: OnceLock::new(), sdk: OnceCell::new() }
    }

    /// The data directory the embedded backends keep everything in.
    pub(crate) fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub(crate) fn local(&self) -> anyhow::Result<&LocalBackends> {
        if let Some(local) = self.local.get() {
            return Ok(local);
        }
        let opened = LocalBackends::open(&self.data_dir)
            .with_context(|| format!("opening the data directory {}", self.data_dir.display()))?;
        Ok(self.local.get_or_init(|| opened))
    }

    pub(crate) async fn sdk(&self) -> &SdkConfig {
        self.sdk.get_or_init(|| sdk_config(None)).await
    }

    /// A tier's lanes.
    pub(crate) async fn lanes(
        &self,
        sources: &Lanes<QueueSource>,
        tier: Tier,
        visibility_timeout: Duration,
        max_receive_count: u32,
    ) -> anyhow::Result<Lanes<Arc<dyn Queue>>> {
        let normal = self.queue(&sources.normal, tier, Priority::Normal, visibility_timeout, max_receive_count).await?;
        let beside_normal = async |lane: Priority| -> anyhow::Result<Arc<dyn Queue>> {
            Ok(match sources.get(lane) {
                QueueSource::SharedWithNormal => Arc::new(SharedLane::new(Arc::clone(&normal))),
                source => self.queue(source, tier, lane, visibility_timeout, max_receive_count).await?,
            })
        };
        let (high, batch) = (beside_normal(Priority::High).await?, beside_normal(Priority::Batch).await?);
        Ok(Lanes { high, normal, batch })
    }

    async fn queue(
        &self,
        source: &QueueSource,
        tier: Tier,
        lane: Priority,
        visibility_timeout: Duration,
        max_receive_count: u32,
    ) -> anyhow::Result<Arc<dyn Queue>> {
        Ok(match source {
            QueueSource::Embedded => self.local()?.lane_queue(tier, lane, visibility_timeout, max_receive_count),
            QueueSource::Sqs { url, dead_letter_url } => Arc::new(
                SqsQueue::new(aws_sdk_sqs::Client::new(self.sdk().await), url.clone(), dead_letter_url.clone())
                    .hiding_received_for(visibility_timeout),
            ),
            QueueSource::SharedWithNormal => bail!("the {tier} tier's {lane} lane has no queue of its own"),
        })
    }

    pub(crate) async fn store(&self, destination: &Destination) -> anyhow::Result<Arc<dyn ResultStore>> {
        Ok(match destination {
            Destination::Folder(dir) if dir == &self.data_dir => self.local()?.store.clone(),
            Destination::Folder(dir) => Arc::new(
                crate::local::store::FileStore::open(dir).with_context(|| format!("opening {}", dir.display()))?,
            ),
            Destination::S3(location) => Arc::new(S3Store::new(s3::client(self.sdk().await), location.clone())),
            Destination::Queue(url) => {
                let queue = SqsQueue::new(aws_sdk_sqs::Client::new(self.sdk().await), url.clone(), None);
                Arc::new(SqsResults::new(queue, url.clone()))
            }
        })
    }
}

/// Refuses a worker on SQS without a dead-letter queue: malformed messages would have nowhere to go.
pub(crate) fn require_dead_letter(sources: &Lanes<QueueSource>) -> anyhow::Result<()> {
    if let QueueSource::Sqs { dead_letter_url: None, .. } = sources.normal {
        bail!("REQUEST_QUEUE_URL is set but DLQ_URL is not: set DLQ_URL to the dead-letter queue's URL");
    }
    Ok(())
}
