//! The guard that stops an engine with gpuinfer dev.

use super::guarded;

#[tokio::test]
async fn the_guarded_shell_passes_the_engines_exit_status_on() {
    // In a group of its own, and with its stdin held open: the guard kills its group when stdin closes.
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(guarded("sleep 0.2; exit 7"))
        .process_group(0)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let _stdin = child.stdin.take();
    assert_eq!(child.wait().await.unwrap().code(), Some(7));
}
