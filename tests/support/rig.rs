//! A worker on every embedded lane and the file store of a temporary data directory, driving the engine simulator
//! through the real engine client; what the worker tests send, wait for and read back.

use std::sync::Arc;
use std::time::Duration;

use gpuinfer::{
    EngineClient, EngineConfig, HealthSettings, Lanes, LeaseSettings, LocalBackends, LocalQueue, Priority, Queue,
    QueueCounts, RequestId, ResultDocument, ResultStore, Stopped, Tier, WebhookConfig, Webhooks, Worker, WorkerConfig,
    metrics::Emf,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::faulty_store::FaultyStore;
use super::{SharedBuf, eventually, request_body};
use gpuinfer::{simulator::Behavior, simulator::EngineSimulator};

pub(crate) struct Rig {
    pub dir: tempfile::TempDir,
    pub backends: LocalBackends,
    pub lanes: Lanes<Arc<LocalQueue>>,
    /// The normal lane.
    pub queue: Arc<LocalQueue>,
    pub engine: EngineSimulator,
    /// The worker's result store (the file store), which a test can make refuse or stall.
    pub store: Arc<FaultyStore>,
    pub shutdown: CancellationToken,
    pub worker: tokio::task::JoinHandle<Stopped>,
    /// The worker's EMF lines.
    pub emf: SharedBuf,
}

/// The tests' worker: 4 slots, short waits and back-offs.
pub(crate) fn config() -> WorkerConfig {
    WorkerConfig {
        concurrency: 4,
        wait_time: Duration::from_millis(200),
        lease: LeaseSettings {
            visibility_timeout: Duration::from_secs(30),
            retry_base: Duration::from_millis(50),
            ..LeaseSettings::default()
        },
        health: HealthSettings { interval: Duration::from_millis(50), ..HealthSettings::default() },
        cancel_poll: Duration::from_millis(100),
        ..WorkerConfig::new(Tier::Small)
    }
}

pub(crate) async fn rig(behavior: Behavior, config: WorkerConfig) -> Rig {
    Rig::start(behavior, config, None, |_| async {}).await
}

impl Rig {
    /// A rig whose worker sends callbacks with `webhooks`; `before` runs on the lanes before the worker starts.
    pub(crate) async fn start<F, Fut>(
        behavior: Behavior,
        config: WorkerConfig,
        webhooks: Option<WebhookConfig>,
        before: F,
    ) -> Rig
    where
        F: FnOnce(Lanes<Arc<LocalQueue>>) -> Fut,
        Fut: Future<Output = ()>,
    {
        let dir = tempfile::tempdir().unwrap();
        let backends = LocalBackends::open(dir.path()).unwrap();
        let lanes = backends.tier_lanes(Tier::Small, config.lease.visibility_timeout, config.lease.max_receive_count);
        before(lanes.clone()).await;
        let engine = EngineSimulator::start(behavior).await;
        let client = EngineClient::new(&EngineConfig {
            base_url: format!("{}/v1/", engine.url),
            model: None,
            request_timeout: Duration::from_secs(30),
        })
        .unwrap();
        let emf = SharedBuf::default();
        let metrics = Emf::to_writer(emf.clone());
        let store = Arc::new(FaultyStore::new(backends.store.clone()));
        let mut worker = Worker::new(lanes.clone(), Arc::clone(&store), Arc::new(client), config, metrics.clone());
        if let Some(webhooks) = webhooks {
            worker = worker.with_webhooks(Webhooks::new(webhooks, metrics).unwrap());
        }
        let shutdown = CancellationToken::new();
        let worker = tokio::spawn(worker.run(shutdown.clone()));
        let queue = Arc::clone(&lanes.normal);
        Rig { dir, backends, lanes, queue, engine, store, shutdown, worker, emf }
    }

    /// Sends a fresh request for `prompt` to the normal lane.
    pub(crate) async fn send(&self, prompt: &str) -> RequestId {
        let (id, body) = request_body(prompt);
        self.queue.send(&body).await.unwrap();
        id
    }

    /// Sends a request body to one lane.
    pub(crate) async fn send_to(&self, lane: Priority, body: &Value) {
        self.lanes.get(lane).send(&body.to_string()).await.unwrap();
    }

    /// Cancels `id` the way DELETE /results/{id} does (a canceled document); returns the document.
    pub(crate) async fn cancel(&self, id: RequestId) -> Value {
        let canceled = gpuinfer::canceled_document(id);
        self.backends.store.put_if_absent(id, canceled.to_string().as_bytes()).await.unwrap();
        self.backends.store.mark_cancels().await.unwrap();
        canceled
    }

    /// The document stored for `id`, once there is one.
    pub(crate) async fn document(&self, id: RequestId) -> Value {
        let store = Arc::clone(&self.backends.store);
        eventually(Duration::from_secs(10), "a result document", || {
            let store = Arc::clone(&store);
            async move { store.get(id).await.unwrap().map(|bytes| serde_json::from_slice(&bytes).unwrap()) }
        })
        .await
    }

    /// The worker's document for `id`, once there is one.
    pub(crate) async fn result(&self, id: RequestId) -> ResultDocument {
        serde_json::from_value(self.document(id).await).unwrap()
    }

    /// Waits until every lane is empty.
    pub(crate) async fn drained(&self) {
        let lanes = self.lanes.clone();
        eventually(Duration::from_secs(10), "empty lanes", || {
            let lanes = lanes.clone();
            async move {
                let mut counts = QueueCounts::default();
                for lane in lanes.all() {
                    counts = counts + lane.counts().await.unwrap();
                }
                (counts == QueueCounts::default()).then_some(())
            }
        })
        .await;
    }

    /// Waits until the engine has received `calls` requests.
    pub(crate) async fn engine_called(&self, calls: u64) {
        let engine = &self.engine;
        eventually(Duration::from_secs(5), "requests in the engine", || async {
            (engine.calls() == calls).then_some(())
        })
        .await;
    }

    pub(crate) async fn stop(self) {
        self.shutdown.cancel();
        let stopped = tokio::time::timeout(Duration::from_secs(15), self.worker).await.expect("worker stops").unwrap();
        assert_eq!(stopped, Stopped::Drained);
    }
}
