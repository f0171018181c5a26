//! Waiting for a request's result inside the call that sent it (`POST /infer?wait=N`, a Response created without
//! `background`): its document looked for with a growing pause, up to a bound.

use std::time::{Duration, Instant};

use crate::contract::request_id::RequestId;
use crate::ports::{ResultStore, StoreError};

/// How often a waited-for document is looked for: first after this, then twice as long each time...
const FIRST_POLL: Duration = Duration::from_millis(250);
/// ...up to this.
const LONGEST_POLL: Duration = Duration::from_secs(2);

/// The request's document once stored, looked for with a growing pause for up to `wait`; None past it.
pub(crate) async fn document(
    store: &dyn ResultStore,
    request_id: RequestId,
    wait: Duration,
) -> Result<Option<Vec<u8>>, StoreError> {
    let until = Instant::now() + wait;
    let mut pause = FIRST_POLL;
    loop {
        if let Some(document) = store.get(request_id).await? {
            return Ok(Some(document));
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        tokio::time::sleep(pause.min(left)).await;
        pause = (pause * 2).min(LONGEST_POLL);
    }
}
