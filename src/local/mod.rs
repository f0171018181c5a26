//! Embedded backends for one machine: SQLite queues and a results folder under a data directory, and the
//! local fleets: fixed worker pools, or engines started on demand.

pub(crate) mod fleet;
pub(crate) mod objects;
pub(crate) mod queue;
pub(crate) mod store;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use queue::{LocalQueue, QueueDb, QueueSettings};
use store::FileStore;

use crate::contract::tier::{Lanes, Priority, Tier};
use crate::ports::{QueueError, StoreError};

pub(crate) const DEAD_LETTER_QUEUE: &str = "dead-letter";

/// Days a result stays in the data directory unless configured (the template's ResultRetentionDays).
pub(crate) const RESULT_RETENTION_DAYS: u64 = 30;

/// Where the embedded backends live when no data directory is given.
pub(crate) const DEFAULT_DATA_DIR: &str = ".gpuinfer";

/// The embedded queue of one lane of a tier: the tier's name, with `-high` or `-batch` for those lanes.
pub(crate) fn queue_name(tier: Tier, lane: Priority) -> String {
    match lane {
        Priority::Normal => tier.as_str().to_owned(),
        lane => format!("{tier}-{lane}"),
    }
}

#[cfg(unix)]
fn make_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

#[cfg(unix)]
fn warn_if_readable_by_others(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(metadata) = std::fs::metadata(dir)
        && metadata.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(dir = %dir.display(), mode = format!("{:o}", metadata.permissions().mode() & 0o777), "the data directory holds prompts and results and others can open it: chmod 700 it");
    }
}

#[cfg(not(unix))]
fn make_private(_dir: &Path) -> std::io::Result<()> {
    Ok(())
}

#[cfg(not(unix))]
fn warn_if_readable_by_others(_dir: &Path) {}

/// The queue database and result folder of one data directory.
#[derive(Debug, Clone)]
pub struct LocalBackends {
    pub(crate) db: QueueDb,
    pub store: Arc<FileStore>,
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot create the data directory {0}: {1}")]
    Dir(String, std::io::Error),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl LocalBackends {
    /// Opens (creating if needed) `<dir>/queue.db` and `<dir>/results/`. A directory it creates is private to its
    /// owner (0700), as it holds prompts and results; an existing one keeps its mode (it may be shared on purpose),
    /// with a warning when others can read it.
    pub fn open(dir: &Path) -> Result<Self, OpenError> {
        let dir_error = |e| OpenError::Dir(dir.display().to_string(), e);
        if dir.exists() {
            warn_if_readable_by_others(dir);
        } else {
            std::fs::create_dir_all(dir).map_err(dir_error)?;
            make_private(dir).map_err(dir_error)?;
        }
        Ok(LocalBackends { db: QueueDb::open(&dir.join("queue.db"))?, store: Arc::new(FileStore::open(dir)?) })
    }

    /// One lane's request queue of a tier (`small`, `small-high`, …), redriving to the shared dead-letter queue.
    pub fn lane_queue(
        &self,
        tier: Tier,
        lane: Priority,
        visibility_timeout: Duration,
        max_receive_count: u32,
    ) -> Arc<LocalQueue> {
        Arc::new(self.db.queue(
            &queue_name(tier, lane),
            QueueSettings { visibility_timeout, max_receive_count, dead_letter_queue: DEAD_LETTER_QUEUE.into() },
        ))
    }

    /// Makes the messages a stopped process held visible again (see `QueueDb::take_back_leases`): only for a process
    /// that holds the data directory's lock.
    pub fn take_back_leases(&self) -> Result<usize, QueueError> {
        self.db.take_back_leases()
    }

    /// Every lane's request queue of a tier.
    pub fn tier_lanes(
        &self,
        tier: Tier,
        visibility_timeout: Duration,
        max_receive_count: u32,
    ) -> Lanes<Arc<LocalQueue>> {
        Lanes::from_fn(|lane| self.lane_queue(tier, lane, visibility_timeout, max_receive_count))
    }

    /// A tier's request queues for a test that sends to them or counts them but never receives.
    #[cfg(feature = "test-support")]
    pub fn lane_handles(&self, tier: Tier) -> Lanes<Arc<LocalQueue>> {
        self.tier_lanes(tier, tier.queue_visibility_timeout(), crate::ports::DEFAULT_MAX_RECEIVE_COUNT)
    }

    /// The dead-letter queue, for a test to inspect.
    #[cfg(feature = "test-support")]
    pub fn dead_letter_queue(&self) -> LocalQueue {
        self.db.queue(
            DEAD_LETTER_QUEUE,
            QueueSettings {
                visibility_timeout: Duration::from_secs(30),
                max_receive_count: u32::MAX,
                dead_letter_queue: DEAD_LETTER_QUEUE.into(),
            },
        )
    }
}
