//! Embedded backends for one machine: SQLite queues and a results folder under a data directory, and the
//! fixed fleet of local worker pools.

pub mod fleet;
pub mod queue;
pub mod store;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::ports::{QueueError, StoreError};
use crate::routing::Tier;
use queue::{LocalQueue, QueueDb, QueueSettings};
use store::FileStore;

pub const DEAD_LETTER_QUEUE: &str = "dead-letter";

/// The queue database and result folder of one data directory.
#[derive(Debug, Clone)]
pub struct LocalBackends {
    pub db: QueueDb,
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
    /// Opens (creating if needed) `<dir>/queue.db` and `<dir>/results/`.
    pub fn open(dir: &Path) -> Result<Self, OpenError> {
        std::fs::create_dir_all(dir).map_err(|e| OpenError::Dir(dir.display().to_string(), e))?;
        Ok(LocalBackends { db: QueueDb::open(&dir.join("queue.db"))?, store: Arc::new(FileStore::open(dir)?) })
    }

    /// The request queue of a tier, redriving to the shared dead-letter queue.
    pub fn tier_queue(&self, tier: Tier, visibility_timeout: Duration, max_receive_count: u32) -> Arc<LocalQueue> {
        Arc::new(self.db.queue(
            tier.as_str(),
            QueueSettings { visibility_timeout, max_receive_count, dead_letter_queue: DEAD_LETTER_QUEUE.into() },
        ))
    }

    /// A tier's request queue for a process that sends to it or counts it but never receives.
    pub fn queue_handle(&self, tier: Tier) -> Arc<LocalQueue> {
        self.tier_queue(tier, Duration::from_secs(300), 3)
    }

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
