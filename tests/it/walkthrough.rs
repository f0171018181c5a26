//! The walkthroughs as a user pastes them: every shell block of docs/from-the-aws-sample.md's walkthrough, and
//! docs/deploy.md's quick path, run in order in one shell on a terminal (destroy.sh asks there, and is answered
//! `yes`), against the AWS CLI stand-in (tests/support/aws-cli), a docker stand-in (tests/support/docker-cli), and
//! the stack's API as a SigV4-checking stand-in in front of `gpuinfer dev` on the engine simulator, whose results
//! folder is the results bucket. A command that fails, a variable never set, an unsigned request: the test fails.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::deploy_journey::Journey;
use crate::docs::section;
use crate::support::dev::Dev;
use crate::support::engine_process::EngineProcess;
use crate::support::free_port;
use crate::support::signed_api::{Credentials, SignedApi};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const REQUEST_ID: &str = "550e8400-e29b-41d4-a716-446655440000";
/// What the shell prints when a command fails (its ERR trap, inherited by functions and substitutions).
const FAILED: &str = "walkthrough: failed";

/// The ```sh blocks of `doc`'s section under `heading`, in order.
fn shell_blocks(doc: &str, heading: &str) -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(ROOT).join(doc)).unwrap();
    let blocks = section(&text, heading).split("```sh\n").skip(1);
    blocks.map(|block| block.split("```").next().unwrap().to_owned()).collect()
}

/// Runs `blocks` as one pasted session in `dir`, on a terminal, with `PATH` putting the stand-ins first; what the
/// terminal showed.
async fn paste(journey: &Journey, blocks: &[String]) -> String {
    let script = journey.root().join("pasted.sh");
    let mut text = format!("set -E\ntrap 'echo \"{FAILED} ($?): $BASH_COMMAND\"' ERR\n");
    for (n, block) in blocks.iter().enumerate() {
        text.push_str(&format!("echo '--- block {}'\n{block}", n + 1));
    }
    std::fs::write(&script, text).unwrap();
    let path = format!(
        "{}:{ROOT}/tests/support/docker-cli:{ROOT}/tests/support/aws-cli:{}",
        journey.root().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = tokio::process::Command::new("python3");
    command.arg(format!("{ROOT}/tests/support/terminal.py")).args(["Type yes to go on: ", "yes", "--", "bash"]);
    command.arg(&script).current_dir(journey.root()).kill_on_drop(true);
    for (name, _) in std::env::vars().filter(|(k, _)| k.starts_with("AWS_") || k.starts_with("GIT_")) {
        command.env_remove(name);
    }
    let out = command
        .env("PATH", path)
        .env("GPUINFER_AWS_STANDIN_STATE", journey.state_path())
        .env("GPUINFER_AWS_STANDIN_LOG", journey.log_path())
        .env("GPUINFER_DOCKER_STANDIN_LOG", journey.root().join("docker.log"))
        .env("GPUINFER_DEPLOY_POLL_SECONDS", "0")
        .output();
    let out = tokio::time::timeout(Duration::from_secs(300), out).await.expect("the walkthrough ends in 5 minutes");
    let shown = String::from_utf8_lossy(&out.unwrap().stdout).replace('\r', "");
    assert!(!shown.contains(FAILED), "a pasted command failed:\n{shown}");
    shown
}

/// A checkout named gpuinfer (the walkthrough's `cd gpuinfer`) for the AWS CLI stand-in with `seed`.
fn checkout(seed: Value) -> Journey {
    let journey = Journey::new(seed);
    std::os::unix::fs::symlink(journey.repo(), journey.root().join("gpuinfer")).unwrap();
    journey
}

#[tokio::test]
async fn the_aws_samples_walkthrough_runs_as_written() {
    let engine = EngineProcess::start(&[]);
    let data = tempfile::tempdir().unwrap();
    let dev = Dev::start(data.path(), free_port(), &engine.url, &[]);
    dev.ready(&reqwest::Client::new()).await;
    let credentials = Credentials {
        access_key_id: "ASIAWALKTHROUGH00001".into(),
        secret_access_key: "walkthrough/secret/key".into(),
        session_token: "walkthrough-session-token".into(),
        region: "us-west-2".into(),
    };
    let api = SignedApi::start(credentials.clone(), &dev.url).await;
    let journey = checkout(json!({
        "credentials": { "AccessKeyId": credentials.access_key_id, "SecretAccessKey": credentials.secret_access_key,
                         "SessionToken": credentials.session_token },
        "api_url": api.url,
        "results_dir": data.path(),
        "cli_binary": env!("CARGO_BIN_EXE_gpuinfer"),
    }));
    let blocks = shell_blocks("docs/from-the-aws-sample.md", "## Following the AWS sample's walkthrough");
    assert!(blocks.len() >= 7, "{blocks:?}");
    let shown = paste(&journey, &blocks).await;

    // Step 2: deployed, then read back; Step 4: the local image pushed under both tags and deployed.
    assert!(shown.contains("UPDATE_COMPLETE"), "{shown}");
    let state = journey.state();
    let repository = state["repositories"].as_object().unwrap().values().next().unwrap();
    let tags: Vec<&str> = repository["images"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|i| i["imageTags"].as_array().unwrap())
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(tags.contains(&"v0.1.0-local1") && tags.contains(&"latest"), "pushed to ECR: {tags:?}");
    assert_eq!(state["stacks"][0]["Parameters"]["ImageTag"], "v0.1.0-local1", "the stack ran the local image");
    // Step 5: both services, as text.
    assert!(shown.contains("gpuinfer-small\t0") || shown.contains("gpuinfer-small\t1"), "{shown}");
    // Step 6: the signed request accepted, its result read through the API and from the bucket, the simulation.
    assert!(shown.contains(&format!("{{\"requestId\":\"{REQUEST_ID}\",\"tier\":\"small\"}}")), "{shown}");
    assert!(shown.contains(&format!(" {REQUEST_ID}.json")), "the bucket lists the result:\n{shown}");
    assert!(shown.matches(&format!("\"requestId\":\"{REQUEST_ID}\"")).count() >= 3, "{shown}");
    assert!(data.path().join("results").join(format!("{REQUEST_ID}.json")).exists());
    // Cleanup: asked, answered, deleted.
    assert!(shown.contains("Type yes to go on: yes"), "{shown}");
    let stacks = journey.state()["stacks"].as_array().unwrap().clone();
    assert!(stacks.iter().all(|s| s["StackStatus"] == "DELETE_COMPLETE"), "{stacks:?}");
}

#[tokio::test]
async fn the_quick_path_of_deploy_md_runs_as_written() {
    let journey = checkout(json!({}));
    let blocks = shell_blocks("docs/deploy.md", "### With the scripts");
    assert_eq!(blocks.len(), 1, "{blocks:?}");
    let mut pasted = vec!["cd gpuinfer\n".to_owned()];
    pasted.extend(blocks);
    let shown = paste(&journey, &pasted).await;
    assert!(shown.contains("Type yes to go on: yes"), "{shown}");
    let stacks = journey.state()["stacks"].as_array().unwrap().clone();
    assert_eq!(stacks.len(), 1, "{stacks:?}");
    assert_eq!(stacks[0]["StackName"], "gpuinfer");
    assert_eq!(stacks[0]["StackStatus"], "DELETE_COMPLETE");
}
