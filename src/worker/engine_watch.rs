//! The worker's watch on its engine: waiting for it to answer before receiving, probing it all along, and
//! declaring it lost when it stays silent for the loss window (or its process is gone).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::ports::{Engine, Queue, ResultStore};

use super::Worker;

impl<Q, S, E> Worker<Q, S, E>
where
    Q: Queue + ?Sized + 'static,
    S: ResultStore + ?Sized + 'static,
    E: Engine + ?Sized + 'static,
{
    /// Probes the engine every health interval while the worker runs; publishes whether it answers (its probe, or a
    /// generation completed since the previous probe), and declares it lost (cancels `engine_lost`, stops
    /// receiving) once it has failed for the whole loss window.
    pub(super) async fn watch_engine(self: Arc<Self>, answering: watch::Sender<bool>, receiving: CancellationToken) {
        let tier = self.config.tier;
        let window = self.config.engine_loss_window;
        let mut failing_since: Option<Instant> = None;
        let mut generations_seen = 0;
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.config.health_interval) => {}
                () = self.engine_gone.cancelled() => {
                    tracing::error!(%tier, "engine process exited: releasing every unfinished message");
                    answering.send_replace(false);
                    receiving.cancel();
                    self.engine_lost.cancel();
                    return;
                }
            }
            let probe_answered = self.engine.healthy().await;
            let generations = self.generations.load(Ordering::Relaxed);
            let answers = probe_answered || generations > generations_seen;
            generations_seen = generations;
            if answers {
                if failing_since.take().is_some() {
                    tracing::info!(%tier, "engine answers again");
                }
                answering.send_replace(true);
                continue;
            }
            let since = *failing_since.get_or_insert_with(|| {
                tracing::warn!(%tier, loss_window_s = window.as_secs_f64(), "engine not answering its health probe: receiving paused");
                Instant::now()
            });
            answering.send_replace(false);
            if since.elapsed() >= window {
                tracing::error!(%tier, loss_window_s = window.as_secs_f64(), "engine lost: stopping and releasing every unfinished message");
                // In this order: requests hand their messages back only once nothing can receive them again.
                receiving.cancel();
                self.engine_lost.cancel();
                return;
            }
        }
    }

    /// Waits until the engine answers /health; false if `stop` is cancelled first.
    pub(super) async fn wait_for_engine(&self, stop: &CancellationToken) -> bool {
        let started = Instant::now();
        let mut last_log = started;
        loop {
            if self.engine.healthy().await {
                return true;
            }
            if last_log.elapsed() >= Duration::from_secs(30) || last_log == started {
                tracing::info!(tier = %self.config.tier, waited_s = started.elapsed().as_secs(), "waiting for the engine to become healthy");
                last_log = Instant::now();
            }
            tokio::select! {
                () = tokio::time::sleep(self.config.health_interval) => {}
                () = stop.cancelled() => return false,
            }
        }
    }
}

/// Waits while the engine fails its health probes; false once receiving stops.
pub(super) async fn wait_until_answering(answering: &mut watch::Receiver<bool>, receiving: &CancellationToken) -> bool {
    tokio::select! {
        biased;
        () = receiving.cancelled() => false,
        answered = answering.wait_for(|answering| *answering) => answered.is_ok(),
    }
}
