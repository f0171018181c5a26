//! The expiry sweep of `gpuinfer dev`'s data directory, what the results bucket's lifecycle rules do on AWS: at
//! start and every `EXPIRY_SWEEP_SECONDS`, the API's objects whose time has come (uploads past their hour, files
//! past their `expires_at`), then every object older than the retention, in every folder.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::local::store::FileStore;
use crate::router::openai::expiry;

/// Seconds between two sweeps unless configured: an upload's parts outlive its hour by at most this.
pub(crate) const EXPIRY_SWEEP_SECONDS: u64 = 300;

/// Sweeps `store` now and every `every`, until `shutdown`.
pub(super) async fn sweep_periodically(
    store: Arc<FileStore>,
    retention: Duration,
    every: Duration,
    shutdown: CancellationToken,
) {
    let mut ticks = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = shutdown.cancelled() => return,
        }
        let now = SystemTime::now();
        match expiry::sweep(store.as_ref(), chrono::DateTime::<chrono::Utc>::from(now).timestamp()).await {
            Ok(0) => {}
            Ok(ended) => tracing::info!(ended, "expired uploads and files ended"),
            Err(error) => tracing::warn!(%error, "ending expired uploads and files failed; trying again next sweep"),
        }
        let old = Arc::clone(&store);
        match tokio::task::spawn_blocking(move || old.expire(retention, now)).await {
            Ok(Ok(0)) => {}
            Ok(Ok(removed)) => {
                tracing::info!(removed, retention_days = retention.as_secs() / 86_400, "expired documents removed")
            }
            Ok(Err(error)) => tracing::warn!(%error, "expiring old documents failed; trying again next sweep"),
            Err(error) => tracing::warn!(%error, "the expiry sweep stopped midway; trying again next sweep"),
        }
    }
}
