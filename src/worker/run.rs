//! The worker's run, from the engine's first answer to the drain: the jobs it starts (the engine watch, the limit
//! loop, the saturation report, the cancel watch) around the receive loop.

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::callbacks::webhook::DRAIN_GRACE;
use crate::ports::{Engine, Queue, ResultStore};
use crate::worker::assembly::{Stopped, Worker};
use crate::worker::engine_watch::wait_until_healthy;
use crate::worker::receive_loop::ReceiveLoop;
use crate::worker::saturation_report;

impl<Q, S, E> Worker<Q, S, E>
where
    Q: Queue + ?Sized + 'static,
    S: ResultStore + ?Sized + 'static,
    E: Engine + ?Sized + 'static,
{
    /// Runs until `shutdown` (then stops receiving and finishes the requests in flight, giving back what is
    /// unfinished after the drain timeout) or until the engine is lost (then stops receiving and gives back every
    /// message it holds).
    pub async fn run(self, shutdown: CancellationToken) -> Stopped {
        let Worker { lanes, parts } = self;
        let config = &parts.config;
        let tier = config.tier;
        let answered = tokio::select! {
            answered = wait_until_healthy(parts.engine.as_ref(), tier, config.health.interval, &shutdown) => answered,
            () = parts.engine_watch.gone() => {
                tracing::error!(%tier, "engine process exited before the worker started");
                return Stopped::EngineLost { given_back: 0 };
            }
        };
        if !answered {
            return Stopped::Drained;
        }
        parts.endings.cold_start.engine_healthy();
        if config.adaptive {
            parts.limit.first_limit(parts.engine.as_ref()).await;
        }
        let ceiling = config.concurrency;
        tracing::info!(%tier, in_flight_limit = parts.limit.slots().limit(), ceiling, "worker polling");
        // Read before anything is received: a cancel after this is a change of the mark.
        let mark = parts.store.cancel_mark().await.unwrap_or_else(|error| {
            tracing::warn!(%tier, %error, "cannot read the cancel mark; the next poll reads it again");
            None
        });
        let parts = Arc::new(parts);
        // Receiving stops when this is cancelled: by shutdown (its parent), or by the engine watch on engine loss.
        let receiving = shutdown.child_token();
        let (answering_tx, answering) = watch::channel(true);
        // Jobs the drain still needs (the engine watch, the cancel watch), and jobs it does not.
        let watches = [
            spawn_with(&parts, {
                let receiving = receiving.clone();
                move |w| async move { w.engine_watch.watch(w.engine.as_ref(), &w.config, answering_tx, receiving).await }
            }),
            spawn_with(&parts, move |w| async move {
                w.cancels.run(w.store.as_ref(), w.config.cancel_poll, mark).await;
            }),
        ];
        let filling = [
            parts
                .config
                .adaptive
                .then(|| spawn_with(&parts, |w| async move { w.limit.adapt(w.engine.as_ref()).await })),
            Some(tokio::spawn(saturation_report::run(
                Arc::clone(parts.limit.slots()),
                parts.config.task.service.clone(),
                parts.endings.metrics.clone(),
            ))),
        ];
        let mut receive_loop = ReceiveLoop::new(lanes, &parts, receiving, answering);
        receive_loop.run().await;
        filling.into_iter().flatten().for_each(|job| job.abort());
        let given_back = receive_loop.drain().await;
        watches.into_iter().for_each(|job| job.abort());
        if let Some(webhooks) = &parts.endings.webhooks {
            webhooks.finish(DRAIN_GRACE).await;
        }
        if let Some(events) = &parts.endings.events {
            events.finish(DRAIN_GRACE).await;
        }
        if parts.engine_watch.is_lost() {
            tracing::error!(%tier, given_back, "worker stopped: engine lost; its messages are back in the queue");
            Stopped::EngineLost { given_back }
        } else {
            tracing::info!(%tier, "worker stopped");
            Stopped::Drained
        }
    }
}

/// Spawns one of the worker's jobs on a handle of its own to the parts.
fn spawn_with<W, F, Fut>(parts: &Arc<W>, job: F) -> tokio::task::JoinHandle<()>
where
    W: Send + Sync + 'static + ?Sized,
    F: FnOnce(Arc<W>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(job(Arc::clone(parts)))
}
