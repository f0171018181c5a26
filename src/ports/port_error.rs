//! The one error shape of every port (`PortError<P>`, retry later) and the queue's own errors.

use std::marker::PhantomData;
use std::sync::Arc;

/// The error an adapter's call failed with (the SDK's, SQLite's, the file system's), kept as the port error's
/// source so nothing of its chain is lost; shared, so a batch call's one failure can fail every entry.
pub(crate) type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// The name a port's errors begin with.
pub(crate) trait PortName {
    const NAME: &'static str;
}

/// A call to port `P` that failed and may succeed if retried later: `context` says which call and why (followed
/// by its cause's whole chain, so a log line tells everything), `source` is the cause itself (so nothing is lost
/// to callers that look into it). The one error shape of every port.
#[derive(Debug, Clone)]
pub struct PortError<P> {
    pub(crate) context: String,
    pub(crate) source: Option<Cause>,
    port: PhantomData<fn() -> P>,
}

impl<P> PortError<P> {
    pub fn unavailable(context: impl Into<String>) -> Self {
        PortError { context: context.into(), source: None, port: PhantomData }
    }

    pub(crate) fn caused(context: &str, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        let context = format!("{context}: {}", crate::infra::error_chain::describe(&source));
        PortError { context, source: Some(Arc::new(source)), port: PhantomData }
    }

    /// `context` as given, with `source` kept as the cause (its chain not repeated in the text).
    pub(crate) fn with_source(context: String, source: Cause) -> Self {
        PortError { context, source: Some(source), port: PhantomData }
    }
}

impl<P: PortName> std::fmt::Display for PortError<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} unavailable: {}", P::NAME, self.context)
    }
}

impl<P: PortName + std::fmt::Debug> std::error::Error for PortError<P> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|cause| cause as &(dyn std::error::Error + 'static))
    }
}

/// The queue port ([`Queue`]).
#[derive(Debug, Clone, Copy)]
pub struct QueuePort;
impl PortName for QueuePort {
    const NAME: &'static str = "queue";
}

/// The store ports ([`ResultStore`], [`ObjectStore`]).
#[derive(Debug, Clone, Copy)]
pub struct StorePort;
impl PortName for StorePort {
    const NAME: &'static str = "result store";
}

/// The fleet-reading ports ([`ServiceTasks`], [`GpuUtilization`]).
#[derive(Debug, Clone, Copy)]
pub struct FleetPort;
impl PortName for FleetPort {
    const NAME: &'static str = "fleet readings";
}

/// The API-key store port ([`KeyStore`]).
#[derive(Debug, Clone, Copy)]
pub struct KeyStorePort;
impl PortName for KeyStorePort {
    const NAME: &'static str = "API key store";
}

pub type StoreError = PortError<StorePort>;
pub type FleetError = PortError<FleetPort>;
pub type KeyStoreError = PortError<KeyStorePort>;

#[derive(Debug, Clone, thiserror::Error)]
pub enum QueueError {
    /// Retry later: the call failed.
    #[error(transparent)]
    Unavailable(PortError<QueuePort>),
    #[error("receipt handle is no longer valid (the message was deleted or received again)")]
    ReceiptExpired,
}

impl QueueError {
    pub fn unavailable(context: impl Into<String>) -> Self {
        QueueError::Unavailable(PortError::unavailable(context))
    }

    pub(crate) fn caused(context: &str, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        QueueError::Unavailable(PortError::caused(context, source))
    }
}
