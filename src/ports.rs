//! The traits the core is written against: queue, result store, object store, engine, classifier, API-key store,
//! fleet readings and the wake on arrival, each in its own file with the errors it answers. Only the methods we call.

pub(crate) mod classifier;
mod engine;
mod fleet;
mod key_store;
pub(crate) mod object_io;
mod port_error;
mod queue;
mod stores;

pub use classifier::{Classifier, ClassifyError};
pub(crate) use engine::Completion;
pub use engine::{Engine, EngineError};
pub(crate) use fleet::{ArrivalWake, FirstTask};
pub use fleet::{CapacityControl, GpuUtilization, Service, ServiceTasks, TaskAges, TaskCounts};
pub(crate) use fleet::{DEFAULT_CLUSTER_NAME, DEFAULT_SERVICE_NAME, START_FAILURES_TO_STOP};
pub use key_store::KeyStore;
pub use port_error::{FleetError, KeyStoreError, QueueError, StoreError};
pub(crate) use queue::{DEFAULT_MAX_RECEIVE_COUNT, MAX_RECEIVE_WAIT};
pub use queue::{MAX_MESSAGES_PER_CALL, Message, Queue, QueueCounts};
pub(crate) use stores::ByteChunks;
pub use stores::{ObjectStore, PutOutcome, ResultStore};
