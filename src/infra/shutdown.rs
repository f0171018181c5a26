//! The shutdown signal: SIGTERM or Ctrl-C cancels a token every task watches; a second one exits at once.

use tokio_util::sync::CancellationToken;

/// A token cancelled on the first SIGTERM/SIGINT. A second signal ends the process with 130.
pub(crate) fn on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        signal().await;
        tracing::info!("shutdown requested: finishing work in flight (signal again to stop at once)");
        cancel.cancel();
        signal().await;
        tracing::warn!("second signal: stopping now");
        std::process::exit(130);
    });
    token
}

async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
