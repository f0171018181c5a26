//! Result delivery to an SQS queue (the AWS sample's alternative OUTPUT_DESTINATION): each document is one message.

use async_trait::async_trait;

use super::sqs::SqsQueue;
use crate::contract::request_id::RequestId;
use crate::ports::{PutOutcome, Queue, ResultStore, StoreError};

/// Sends result documents as messages. A queue cannot be asked whether a result exists or what it
/// says, so the worker always runs the request and GET /results cannot read it back.
#[derive(Debug, Clone)]
pub(crate) struct SqsResults {
    queue: SqsQueue,
    url: String,
}

impl SqsResults {
    pub(crate) fn new(queue: SqsQueue, url: String) -> Self {
        SqsResults { queue, url }
    }
}

#[async_trait]
impl ResultStore for SqsResults {
    async fn exists(&self, _request_id: RequestId) -> Result<bool, StoreError> {
        Ok(false)
    }

    async fn put_if_absent(&self, _request_id: RequestId, document: &[u8]) -> Result<PutOutcome, StoreError> {
        let body = String::from_utf8_lossy(document);
        self.queue.send(&body).await.map_err(|e| StoreError::caused("sending the result document", e))?;
        Ok(PutOutcome::Created)
    }

    /// Nothing is read back from a queue, so there is nothing to remove.
    async fn delete(&self, _request_id: RequestId) -> Result<(), StoreError> {
        Ok(())
    }

    /// A queue keeps no record to compare a later request with: a reused id is not detected.
    async fn record_acceptance(&self, _request_id: RequestId, _record: &[u8]) -> Result<PutOutcome, StoreError> {
        Ok(PutOutcome::Created)
    }

    async fn acceptance(&self, _request_id: RequestId) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(None)
    }

    async fn forget_acceptance(&self, _request_id: RequestId) -> Result<(), StoreError> {
        Ok(())
    }

    /// Nothing is read back from a queue: no cancel can be stored, so none is marked.
    async fn mark_cancels(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn cancel_mark(&self) -> Result<Option<String>, StoreError> {
        Ok(None)
    }

    async fn get(&self, _request_id: RequestId) -> Result<Option<Vec<u8>>, StoreError> {
        Err(StoreError::unavailable(format!(
            "results are delivered as messages to {}; read them from that queue",
            self.url
        )))
    }
}
