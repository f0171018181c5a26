//! The memory all request bodies being read may hold at once: a body is read into memory only as far as the
//! budget allows, and a request that would go beyond it is refused (503, retry later) instead of waited on.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes of request bodies in memory at once unless configured: room for 25 of the largest (5 MiB) batches.
pub(crate) const DEFAULT_BODY_MEMORY_MIB: u64 = 128;

/// Shared by every request of one server; each body holds its bytes until its request is answered.
#[derive(Debug, Clone)]
pub struct BodyBudget {
    bytes: Arc<Semaphore>,
    total: usize,
}

/// The share of the budget one body holds; freed when dropped.
#[derive(Debug)]
pub struct Held(Option<OwnedSemaphorePermit>);

impl BodyBudget {
    pub fn new(total: usize) -> Self {
        BodyBudget { bytes: Arc::new(Semaphore::new(total)), total }
    }

    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// Nothing held yet.
    pub fn none(&self) -> Held {
        Held(None)
    }

    /// Adds `bytes` to what `held` holds, if the budget has them now.
    pub fn take(&self, held: &mut Held, bytes: usize) -> bool {
        let Ok(bytes) = u32::try_from(bytes) else { return false };
        match Arc::clone(&self.bytes).try_acquire_many_owned(bytes) {
            Ok(permit) => {
                match &mut held.0 {
                    Some(earlier) => earlier.merge(permit),
                    none => *none = Some(permit),
                }
                true
            }
            Err(_) => false,
        }
    }
}

impl Default for BodyBudget {
    fn default() -> Self {
        BodyBudget::new(DEFAULT_BODY_MEMORY_MIB as usize * 1024 * 1024)
    }
}
