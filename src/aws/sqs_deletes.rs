//! Coalesces deletes into many-message calls: deletes that arrive while earlier ones are on the wire go out together,
//! so a busy worker makes up to ten times fewer delete calls and an idle one waits for none. For queues behind a
//! network call (SQS); a local queue deletes faster than it could hand a delete to another task.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::ports::{MAX_MESSAGES_PER_CALL, QueueError};

/// Batch calls on the wire at once; deletes arriving meanwhile wait and go out together.
const CALLS_IN_FLIGHT: usize = 4;

/// One call that deletes up to [`MAX_MESSAGES_PER_CALL`] messages of a queue.
#[async_trait]
pub trait DeleteMany: Send + Sync + 'static {
    /// One outcome per receipt, in order.
    async fn delete_many(&self, receipts: &[String]) -> Vec<Result<(), QueueError>>;
}

type Pending = (String, oneshot::Sender<Result<(), QueueError>>);

/// The deletes of one queue. The task that groups them starts with the first delete and ends when this is dropped;
/// what waits in it is bounded by the requests in flight, since each one waits for its own delete.
pub struct SharedDeletes<D> {
    target: Arc<D>,
    pending: OnceLock<mpsc::UnboundedSender<Pending>>,
}

impl<D> std::fmt::Debug for SharedDeletes<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedDeletes")
    }
}

impl<D: DeleteMany> SharedDeletes<D> {
    pub fn new(target: D) -> Self {
        SharedDeletes { target: Arc::new(target), pending: OnceLock::new() }
    }

    /// Deletes one message, in one call with whatever other deletes are waiting; resolves with its own outcome.
    pub async fn delete(&self, receipt: &str) -> Result<(), QueueError> {
        let (done, outcome) = oneshot::channel();
        let pending = self.pending.get_or_init(|| {
            let (sender, receiver) = mpsc::unbounded_channel();
            tokio::spawn(send_calls(Arc::clone(&self.target), receiver));
            sender
        });
        pending.send((receipt.to_owned(), done)).map_err(|_| interrupted())?;
        outcome.await.unwrap_or_else(|_| Err(interrupted()))
    }
}

/// Takes the first waiting delete and every other one already waiting (up to a call's worth) as soon as a call slot
/// is free, and sends them in one call.
async fn send_calls<D: DeleteMany>(target: Arc<D>, mut pending: mpsc::UnboundedReceiver<Pending>) {
    let calls = Arc::new(Semaphore::new(CALLS_IN_FLIGHT));
    while let Some(first) = pending.recv().await {
        let Ok(slot) = Arc::clone(&calls).acquire_owned().await else { return };
        let mut call = vec![first];
        while call.len() < MAX_MESSAGES_PER_CALL {
            match pending.try_recv() {
                Ok(next) => call.push(next),
                Err(_) => break,
            }
        }
        let target = Arc::clone(&target);
        tokio::spawn(async move {
            let (receipts, waiting): (Vec<String>, Vec<_>) = call.into_iter().unzip();
            let outcomes = target.delete_many(&receipts).await;
            for (done, outcome) in waiting.into_iter().zip(outcomes) {
                let _ = done.send(outcome);
            }
            drop(slot);
        });
    }
}

fn interrupted() -> QueueError {
    QueueError::unavailable("the delete was interrupted (the worker is stopping)")
}
