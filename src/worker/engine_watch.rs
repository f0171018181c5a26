//! The worker's watch on its engine: waiting for it to answer before receiving, probing it all along, and
//! declaring it lost when it stays silent for the loss window (or its process is gone).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::contract::tier::Tier;
use crate::ports::Engine;
use crate::worker::config::WorkerConfig;

/// Whether the engine answers, and the signals that follow when it stops.
pub(super) struct EngineWatch {
    /// Cancelled when the engine is declared lost (then `give_back` is cancelled too, as its child).
    lost: CancellationToken,
    /// Cancelled when requests in flight must give their messages back at once: the engine was lost, or a drain
    /// reached its timeout.
    give_back: CancellationToken,
    /// Cancelled by whoever runs the engine when its process is known to be gone: the engine is then declared lost
    /// at once, without waiting for the loss window.
    gone: CancellationToken,
    /// Generations the engine completed: one completed since the last health probe means the engine answers, even
    /// when the probe itself timed out (an engine busy at its full batch, such as llama.cpp on a CPU).
    generations: AtomicU64,
}

impl EngineWatch {
    pub(super) fn new() -> Self {
        let lost = CancellationToken::new();
        EngineWatch { give_back: lost.child_token(), lost, gone: CancellationToken::new(), generations: 0.into() }
    }

    /// Declares the engine lost as soon as `gone` is cancelled (its process exited).
    pub(super) fn with_gone(mut self, gone: CancellationToken) -> Self {
        self.gone = gone;
        self
    }

    pub(super) fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// Cancelled when every request in flight must give its message back now.
    pub(super) fn give_back(&self) -> &CancellationToken {
        &self.give_back
    }

    /// Resolves when the engine's process is known to be gone.
    pub(super) async fn gone(&self) {
        self.gone.cancelled().await;
    }

    /// Counts a completed generation: proof the engine answers.
    pub(super) fn generation_done(&self) {
        self.generations.fetch_add(1, Ordering::Relaxed);
    }

    /// Probes the engine every health interval while the worker runs; publishes whether it answers (its probe, or a
    /// generation completed since the previous probe), and declares it lost (stops receiving, cancels `lost`) once
    /// it has failed for the whole loss window.
    pub(super) async fn watch<E: Engine + ?Sized>(
        &self,
        engine: &E,
        config: &WorkerConfig,
        answering: watch::Sender<bool>,
        receiving: CancellationToken,
    ) {
        let (tier, window) = (config.tier, config.health.loss_window);
        let mut failing_since: Option<Instant> = None;
        let mut generations_seen = 0;
        loop {
            tokio::select! {
                () = tokio::time::sleep(config.health.interval) => {}
                () = self.gone.cancelled() => {
                    tracing::error!(%tier, "engine process exited: giving back every unfinished message");
                    answering.send_replace(false);
                    receiving.cancel();
                    self.lost.cancel();
                    return;
                }
            }
            let probe_answered = engine.healthy().await;
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
                tracing::error!(%tier, loss_window_s = window.as_secs_f64(), "engine lost: stopping and giving back every unfinished message");
                // In this order: requests give their messages back only once nothing can receive them again.
                receiving.cancel();
                self.lost.cancel();
                return;
            }
        }
    }
}

/// Waits until the engine answers /health, probing every `interval`; false if `stop` is cancelled first.
pub(super) async fn wait_until_healthy<E: Engine + ?Sized>(
    engine: &E,
    tier: Tier,
    interval: Duration,
    stop: &CancellationToken,
) -> bool {
    let started = Instant::now();
    let mut last_log = started;
    loop {
        if engine.healthy().await {
            return true;
        }
        if last_log.elapsed() >= Duration::from_secs(30) || last_log == started {
            tracing::info!(%tier, waited_s = started.elapsed().as_secs(), "waiting for the engine to become healthy");
            last_log = Instant::now();
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = stop.cancelled() => return false,
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
