//! `gpuinfer inject-xid`: the dcgmi command lines and XID rules (pure), then the real binary against a fake
//! host root (a fake dcgmi that logs its arguments, a unix socket, a DMI asset tag) entered by a fake chroot.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::Output;

use axum::Json;
use axum::routing::get;
use gpuinfer::{
    xid::CRITICAL_XIDS, xid::Gpu, xid::Injection, xid::XidError, xid::critical_xid_list, xid::discovery_args,
    xid::parse_discovery, xid::shell_words,
};
use serde_json::{Value, json};

const DISCOVERY: &str = "\
2 GPUs found.
+--------+----------------------------------------------------------------------+
| GPU ID | Device Information                                                   |
+--------+----------------------------------------------------------------------+
| 0      | Name: NVIDIA L40S                                                    |
|        | PCI Bus ID: 00000000:30:00.0                                         |
|        | Device UUID: GPU-1c0a5a7e-7b3f-4c2e-9d55-0f9a1f0c2b11                |
+--------+----------------------------------------------------------------------+
| 1      | Name: NVIDIA L40S                                                    |
|        | PCI Bus ID: 00000000:31:00.0                                         |
|        | Device UUID: GPU-5e2d41c9-0a6b-4f1e-8c3d-7b9e2f4a6c80                |
+--------+----------------------------------------------------------------------+
2 NvSwitches found.
+-----------+
| Switch ID |
+-----------+
| 8         |
| 9         |
+-----------+
0 CPUs found.
";

const SOCKET: &str = "/run/nvidia-dcgm/nv-hostengine";
const SOCKET_ARG: &str = "unix:///run/nvidia-dcgm/nv-hostengine";

fn args(words: &[&str]) -> Vec<String> {
    words.iter().map(|word| (*word).to_owned()).collect()
}

/// The 18 XIDs of "Monitored XID error codes" in the ECS Developer Guide's "GPU auto repair for Amazon ECS managed
/// instances" (the list the AWS sample gives too): ECS marks the instance impaired and replaces it on each.
const ECS_REPAIRS: [u32; 18] = [46, 48, 54, 62, 64, 74, 79, 95, 109, 110, 136, 140, 142, 143, 151, 155, 156, 158];

#[test]
fn the_critical_xids_run_as_is_and_others_only_forced() {
    assert_eq!(CRITICAL_XIDS.map(|(xid, _)| xid), ECS_REPAIRS);
    for (xid, meaning) in CRITICAL_XIDS {
        assert_eq!(Injection::new(xid, 0, false).unwrap().meaning, Some(meaning));
    }
    let refused = Injection::new(13, 0, false).unwrap_err();
    assert_eq!(refused.exit_code(), 2);
    assert_eq!(
        refused.to_string(),
        "XID 13 is not one ECS auto-repair acts on (46, 48, 54, 62, 64, 74, 79, 95, 109, 110, 136, 140, 142, 143, \
         151, 155, 156, 158); pass --force to inject it anyway"
    );
    assert_eq!(Injection::new(13, 0, true).unwrap(), Injection { xid: 13, gpu: 0, meaning: None });
}

#[test]
fn dcgmi_arguments_inject_field_230_through_the_unix_socket() {
    let socket = Path::new(SOCKET);
    assert_eq!(
        Injection::new(79, 3, false).unwrap().dcgmi_args(socket),
        args(&["test", "--host", SOCKET_ARG, "--inject", "--gpuid", "3", "-f", "230", "-v", "79"])
    );
    assert_eq!(discovery_args(socket), args(&["discovery", "--host", SOCKET_ARG, "-l"]));
}

#[test]
fn discovery_output_yields_the_gpus_and_nothing_else() {
    let gpus = parse_discovery(DISCOVERY);
    assert_eq!(gpus.len(), 2, "switches are not GPUs: {gpus:?}");
    assert_eq!(
        gpus[1],
        Gpu {
            id: 1,
            name: Some("NVIDIA L40S".into()),
            pci_bus_id: Some("00000000:31:00.0".into()),
            uuid: Some("GPU-5e2d41c9-0a6b-4f1e-8c3d-7b9e2f4a6c80".into()),
        }
    );
    assert_eq!(
        gpus[0].to_string(),
        "GPU 0, NVIDIA L40S, PCI 00000000:30:00.0, GPU-1c0a5a7e-7b3f-4c2e-9d55-0f9a1f0c2b11"
    );
    assert!(parse_discovery("0 GPUs found.\n").is_empty());
}

#[test]
fn command_lines_quote_only_what_needs_it() {
    assert_eq!(
        shell_words(&args(&["dcgmi", "--host", "unix:///tmp/a b", "it's"])),
        r"dcgmi --host 'unix:///tmp/a b' 'it'\''s'"
    );
    assert_eq!(shell_words(&args(&["-v", ""])), "-v ''");
}

#[test]
fn each_cause_has_its_own_exit_status() {
    let path = PathBuf::from("/x");
    let io = || std::io::Error::other("e");
    let cases = [
        (XidError::DcgmiFailed { command: String::new(), status: String::new(), output: String::new() }, 1),
        (XidError::NotCritical(1), 2),
        (XidError::UnknownGpu { gpu: 1, listed: String::new() }, 2),
        (XidError::NotAbsolute { flag: "--socket", path: path.clone() }, 2),
        (XidError::HostRootMissing(path.clone(), io()), 3),
        (XidError::CannotEnter(path.clone(), io()), 3),
        (XidError::DcgmiMissing { host_root: path.clone(), dcgmi: path.clone() }, 4),
        (XidError::CannotRun { command: String::new(), source: io() }, 4),
        (XidError::SocketMissing { host_root: path.clone(), socket: path.clone() }, 5),
        (XidError::NotASocket { host_root: path.clone(), socket: path.clone() }, 5),
    ];
    for (error, code) in cases {
        assert_eq!(error.exit_code(), code, "{error}");
    }
}

/// A host root with DCGM in a temp dir, and a stand-in for chroot(1) that runs `<root><program>`.
struct FakeHost {
    dir: tempfile::TempDir,
    _socket: UnixListener,
}

const FAKE_DCGMI: &str = r#"#!/bin/sh
echo "$*" >> "$FAKE_DCGMI_LOG"
case "$1" in
  discovery) cat "$FAKE_DCGMI_DISCOVERY" ;;
  test)
    if [ -n "$FAKE_DCGMI_REFUSE" ]; then echo "Error: $FAKE_DCGMI_REFUSE" >&2; exit 255; fi
    echo "Successfully injected field info." ;;
esac
"#;

const FAKE_CHROOT: &str = r#"#!/bin/sh
root="$1"; program="$2"; shift 2
exec "$root$program" "$@"
"#;

fn write_executable(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

impl FakeHost {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        write_executable(&root.join("usr/bin/dcgmi"), FAKE_DCGMI);
        write_executable(&dir.path().join("chroot"), FAKE_CHROOT);
        std::fs::write(dir.path().join("discovery.txt"), DISCOVERY).unwrap();
        let tag = root.join("sys/devices/virtual/dmi/id/board_asset_tag");
        std::fs::create_dir_all(tag.parent().unwrap()).unwrap();
        std::fs::write(tag, "i-0123456789abcdef0\n").unwrap();
        let socket = root.join(SOCKET.trim_start_matches('/'));
        std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
        let socket = UnixListener::bind(socket).unwrap();
        FakeHost { dir, _socket: socket }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn command(&self, flags: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_gpuinfer"));
        command
            .arg("inject-xid")
            .args(flags)
            .env("XID_HOST_ROOT", self.root())
            .env("XID_CHROOT_BIN", self.dir.path().join("chroot"))
            .env("FAKE_DCGMI_LOG", self.dir.path().join("dcgmi.log"))
            .env("FAKE_DCGMI_DISCOVERY", self.dir.path().join("discovery.txt"))
            .env_remove("ECS_CONTAINER_METADATA_URI_V4");
        command
    }

    async fn inject_xid(&self, flags: &[&str]) -> Output {
        self.command(flags).output().await.unwrap()
    }

    /// The argument lists the fake dcgmi was run with, in order.
    fn dcgmi_runs(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("dcgmi.log"))
            .map(|log| log.lines().map(str::to_owned).collect())
            .unwrap_or_default()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts the exit status and that stderr says `message`.
fn assert_fails(output: &Output, code: i32, message: &str) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "{stderr}");
    assert!(stderr.contains(message), "expected {message:?} in:\n{stderr}");
}

/// Serves an ECS task metadata (v4) `/task` document on a loopback port; returns the endpoint.
async fn task_metadata_endpoint() -> String {
    let task = json!({
        "Cluster": "arn:aws:ecs:us-east-1:111122223333:cluster/gpu-inference",
        "TaskARN": "arn:aws:ecs:us-east-1:111122223333:task/gpu-inference/0f1e2d3c4b5a",
        "Family": "gpuinfer-xid-inject",
        "AvailabilityZone": "us-east-1a",
        "LaunchType": "MANAGED_INSTANCES",
    });
    let app = axum::Router::new().route("/v4/meta/task", get(move || std::future::ready(Json(task.clone()))));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}/v4/meta", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    endpoint
}

#[tokio::test]
async fn a_critical_xid_is_injected_through_the_host_root_and_the_target_printed() {
    let host = FakeHost::new();
    let endpoint = task_metadata_endpoint().await;
    let output = host
        .command(&["--xid", "79", "--gpu", "1"])
        .env("ECS_CONTAINER_METADATA_URI_V4", endpoint)
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        host.dcgmi_runs(),
        [
            format!("discovery --host {SOCKET_ARG} -l"),
            format!("test --host {SOCKET_ARG} --inject --gpuid 1 -f 230 -v 79")
        ]
    );
    let chroot = host.dir.path().join("chroot");
    let root = host.root();
    let expected = format!(
        "inject-xid: XID 79 (GPU has fallen off the bus) on GPU 1, NVIDIA L40S, PCI 00000000:31:00.0, \
         GPU-5e2d41c9-0a6b-4f1e-8c3d-7b9e2f4a6c80
  task      arn:aws:ecs:us-east-1:111122223333:task/gpu-inference/0f1e2d3c4b5a (cluster \
         arn:aws:ecs:us-east-1:111122223333:cluster/gpu-inference, us-east-1a)
  instance  i-0123456789abcdef0
  command   {} {} /usr/bin/dcgmi test --host {SOCKET_ARG} --inject --gpuid 1 -f 230 -v 79
  dcgmi     Successfully injected field info.
injected: ECS should mark the instance IMPAIRED and replace it (the AWS sample, on a g6e.xlarge, saw IMPAIRED ~2 \
         min after injecting and the repair done ~8 min later); watch it with demos/gpu-auto-repair/observe.sh
",
        chroot.display(),
        root.display()
    );
    assert_eq!(text(&output.stdout), expected);
}

#[tokio::test]
async fn dry_run_prints_the_exact_commands_and_runs_nothing() {
    let host = FakeHost::new();
    let output = host.inject_xid(&["--xid", "48", "--dry-run"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let prefix = format!("{} {} /usr/bin/dcgmi", host.dir.path().join("chroot").display(), host.root().display());
    assert_eq!(
        text(&output.stdout),
        format!(
            "{prefix} discovery --host {SOCKET_ARG} -l\n{prefix} test --host {SOCKET_ARG} --inject --gpuid 0 -f 230 -v 48\n"
        )
    );
    assert!(host.dcgmi_runs().is_empty());

    let default = tokio::process::Command::new(env!("CARGO_BIN_EXE_gpuinfer"))
        .args(["inject-xid", "--xid", "140", "--gpu", "2", "--dry-run"])
        .env_remove("XID_HOST_ROOT")
        .output()
        .await
        .unwrap();
    assert_eq!(
        text(&default.stdout).lines().last(),
        Some(
            "chroot /proc/1/root /usr/bin/dcgmi test --host unix:///run/nvidia-dcgm/nv-hostengine --inject --gpuid 2 \
             -f 230 -v 140"
        ),
        "the defaults: the host's root through PID 1, the socket of DCGM's systemd unit nvidia-dcgm"
    );
}

#[tokio::test]
async fn a_non_critical_xid_needs_force_and_then_warns() {
    let host = FakeHost::new();
    assert_fails(&host.inject_xid(&["--xid", "13"]).await, 2, "XID 13 is not one ECS auto-repair acts on");
    assert!(host.dcgmi_runs().is_empty(), "refused before touching the host");
    let forced = host.inject_xid(&["--xid", "13", "--force"]).await;
    assert_eq!(forced.status.code(), Some(0), "{}", text(&forced.stderr));
    assert!(text(&forced.stderr).contains("XID 13 is outside the critical set"), "{}", text(&forced.stderr));
    assert!(
        text(&forced.stdout).ends_with("injected: XID 13 is not critical, so ECS may leave the instance in service\n")
    );
    assert_eq!(host.dcgmi_runs().last().unwrap(), &format!("test --host {SOCKET_ARG} --inject --gpuid 0 -f 230 -v 13"));
}

#[tokio::test]
async fn a_missing_host_root_dcgmi_or_socket_each_exit_with_their_own_status() {
    let host = FakeHost::new();
    let missing_root = host.command(&["--xid", "79"]).arg("--host-root").arg(host.dir.path().join("nowhere")).output();
    assert_fails(&missing_root.await.unwrap(), 3, "run the task with pidMode host and privileged");

    std::fs::write(host.root().join("run/not-a-socket"), "").unwrap();
    let cases = [
        (["--dcgmi", "/opt/dcgm/bin/dcgmi"], 4, "dcgmi not found at /opt/dcgm/bin/dcgmi in the host root"),
        (["--socket", "/run/dcgm.sock"], 5, "nv-hostengine socket not found at /run/dcgm.sock in the host root"),
        (["--socket", "/run/not-a-socket"], 5, "/run/not-a-socket in the host root"),
        (["--socket", "run/nvidia-dcgm/nv-hostengine"], 2, "--socket must be an absolute path inside the host root"),
    ];
    for ([flag, value], code, message) in cases {
        assert_fails(&host.inject_xid(&["--xid", "79", flag, value]).await, code, message);
    }
    assert!(host.dcgmi_runs().is_empty(), "nothing ran");
}

#[tokio::test]
async fn a_gpu_dcgm_does_not_list_is_refused_before_injecting() {
    let host = FakeHost::new();
    assert_fails(
        &host.inject_xid(&["--xid", "79", "--gpu", "7"]).await,
        2,
        "GPU 7 is not one DCGM lists (it lists: 0, 1)",
    );
    assert_eq!(host.dcgmi_runs(), [format!("discovery --host {SOCKET_ARG} -l")]);
}

#[tokio::test]
async fn a_refused_injection_exits_1_with_dcgmi_s_own_words() {
    let host = FakeHost::new();
    let output = host.command(&["--xid", "95"]).env("FAKE_DCGMI_REFUSE", "Host engine connection invalid").output();
    let output = output.await.unwrap();
    assert_fails(&output, 1, "Error: Host engine connection invalid");
    assert_fails(
        &output,
        1,
        "/usr/bin/dcgmi test --host unix:///run/nvidia-dcgm/nv-hostengine --inject --gpuid 0 -f 230 -v 95` failed",
    );
}

#[tokio::test]
async fn without_task_metadata_the_injection_still_runs() {
    let host = FakeHost::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let output = host
        .command(&["--xid", "74"])
        .env("ECS_CONTAINER_METADATA_URI_V4", format!("http://127.0.0.1:{port}/v4"))
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(text(&output.stderr).contains("no ECS task metadata"), "{}", text(&output.stderr));
    assert!(!text(&output.stdout).contains("  task "), "{}", text(&output.stdout));
    assert_eq!(host.dcgmi_runs().len(), 2);
}

#[tokio::test]
async fn a_dcgmi_that_cannot_start_exits_4() {
    let host = FakeHost::new();
    let output = host.command(&["--xid", "79", "--chroot-bin", "/nonexistent/chroot"]).output().await.unwrap();
    assert_fails(&output, 4, "cannot run `/nonexistent/chroot ");
}

async fn help() -> String {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_gpuinfer"))
        .args(["inject-xid", "--help"])
        .output()
        .await
        .unwrap();
    text(&output.stdout)
}

#[tokio::test]
async fn help_lists_every_exit_status_and_every_critical_xid() {
    let help = help().await;
    for status in 0..=5 {
        assert!(help.contains(&format!("\n  {status}  ")), "exit status {status} in:\n{help}");
    }
    let words = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(words.contains(&critical_xid_list()), "the critical XIDs in:\n{help}");
}

/// With `--stay-seconds` the task outlives the injection (here a dry run), so that `aws ecs execute-command` can
/// run more `gpuinfer inject-xid` in it; SIGTERM (ECS stopping the task) ends it at once, exit 0.
#[tokio::test]
async fn stay_seconds_keeps_the_injector_running_until_sigterm() {
    use tokio::io::AsyncBufReadExt;
    let host = FakeHost::new();
    let mut child = host
        .command(&["--xid", "79", "--dry-run", "--stay-seconds", "600"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let staying = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with("staying 600 s") {
                return line;
            }
        }
        panic!("inject-xid ended without staying")
    });
    assert!(staying.await.unwrap().contains("aws ecs execute-command"));
    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(host.dcgmi_runs().is_empty(), "a dry run runs nothing");
}

// ---- demos/gpu-auto-repair against template.yaml: the names the demo relies on are the ones the stack has.

fn demo_file(name: &str) -> String {
    let path = format!("{}/demos/gpu-auto-repair/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn injector_definition() -> Value {
    serde_json::from_str(&demo_file("task-definition.json")).unwrap()
}

/// The scripts' text (stack.sh is sourced by both).
fn demo_scripts() -> Vec<(&'static str, String)> {
    ["run.sh", "observe.sh", "stack.sh"].map(|name| (name, demo_file(name))).into()
}

/// The template's ECS task definitions (both tiers), as (logical id, Properties).
fn tier_definitions(template: &Value) -> Vec<(String, Value)> {
    let definitions: Vec<_> = crate::support::cfn::of_type(template, "AWS::ECS::TaskDefinition")
        .map(|(id, resource)| (id.clone(), resource["Properties"].clone()))
        .collect();
    assert_eq!(definitions.len(), 2, "the small and the large tier");
    definitions
}

/// The image carries the container's build (`--no-default-features`, src/cli.rs `CONTAINER_COMMANDS`): every
/// gpuinfer subcommand the image is asked to run (entrypoint.sh, the Dockerfile's and the template's health checks,
/// the XID injector's task definition) must be one it keeps, or the container fails at that step. Amazon ECS
/// developer guide, "Determine Amazon ECS task health using container health checks": the task definition's health
/// check command runs inside the container, and a service's task reported unhealthy is stopped and replaced — a
/// container build without `healthcheck` would have every worker task replaced in a loop.
#[test]
fn every_command_the_image_runs_is_kept_by_the_container_build() {
    let root = env!("CARGO_MANIFEST_DIR");
    let read = |name: &str| std::fs::read_to_string(format!("{root}/{name}")).unwrap();
    let mut run: Vec<String> = Vec::new();
    for text in [read("Dockerfile"), read("template.yaml")] {
        let mut words = text.split(|c: char| c.is_whitespace() || "[],\"".contains(c)).filter(|w| !w.is_empty());
        while let Some(word) = words.next() {
            if word == "/usr/local/bin/gpuinfer"
                && let Some(command) =
                    words.next().filter(|next| next.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
            {
                run.push(command.to_owned());
            }
        }
    }
    let entrypoint = read("entrypoint.sh");
    run.extend(
        entrypoint.split("\"$GPUINFER\" ").skip(1).map(|rest| rest.split_whitespace().next().unwrap().to_owned()),
    );
    run.push(injector_definition()["containerDefinitions"][0]["command"][0].as_str().unwrap().to_owned());
    for expected in ["healthcheck", "fetch-model", "worker", "inject-xid"] {
        assert!(run.iter().any(|command| command == expected), "{expected} not found among {run:?}");
    }
    for command in &run {
        assert!(gpuinfer::CONTAINER_COMMANDS.contains(&command.as_str()), "the image runs `gpuinfer {command}`");
    }
}

/// The image's ENTRYPOINT starts the engine (MODEL_NAME required): the injector must name the gpuinfer binary
/// itself, or its command is ignored. The command it carries and every flag run.sh adds are inject-xid's own.
#[tokio::test]
async fn the_injector_runs_the_gpuinfer_binary_privileged_as_root_in_the_hosts_pid_namespace() {
    let dockerfile = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Dockerfile")).unwrap();
    assert!(dockerfile.contains("COPY --from=build /gpuinfer-container /usr/local/bin/gpuinfer"));
    assert!(dockerfile.contains(r#"ENTRYPOINT ["/usr/local/bin/entrypoint.sh"]"#));
    // The image starts as root only for its entrypoint, which drops to uid 1000; the injector skips that entrypoint
    // and needs root itself, so it says so (below) rather than lean on the image's start user.

    let definition = injector_definition();
    let container = &definition["containerDefinitions"][0];
    assert_eq!(definition["containerDefinitions"].as_array().unwrap().len(), 1);
    assert_eq!(container["entryPoint"], json!(["/usr/local/bin/gpuinfer"]));
    assert_eq!(container["user"], "0", "chroot(2) into the host root needs root");
    assert_eq!(container["privileged"], true);
    assert_eq!(definition["pidMode"], "host", "/proc/1/root is the host's root only in the host's PID namespace");
    assert_eq!(definition["requiresCompatibilities"], json!(["MANAGED_INSTANCES"]));
    assert!(container.get("resourceRequirements").is_none(), "no GPU: it runs beside a tier's task");

    let command: Vec<String> =
        container["command"].as_array().unwrap().iter().map(|w| w.as_str().unwrap().to_owned()).collect();
    assert_eq!(command[0], "inject-xid");
    let dry_run = tokio::process::Command::new(env!("CARGO_BIN_EXE_gpuinfer"))
        .args(&command)
        .arg("--dry-run")
        .env_remove("XID_HOST_ROOT")
        .output()
        .await
        .unwrap();
    assert_eq!(dry_run.status.code(), Some(0), "{}", text(&dry_run.stderr));
    assert!(text(&dry_run.stdout).contains(&format!("--host {SOCKET_ARG} --inject --gpuid 0 -f 230 -v 79")));

    let run = demo_file("run.sh");
    let name = container["name"].as_str().unwrap();
    assert!(run.contains(&format!(r#"\"name\":\"{name}\""#)), "run.sh overrides the command of {name}");
    assert!(run.contains(&format!("--container {name} ")), "run.sh execs into {name}");
    let help = help().await;
    let flags = run
        .lines()
        .filter(|line| line.contains("inject_args") || line.contains("json_words"))
        .flat_map(|line| line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')))
        .filter(|word| word.starts_with("--") && word.len() > 2)
        .collect::<std::collections::BTreeSet<_>>();
    for flag in ["--xid", "--gpu", "--force", "--dry-run", "--dcgmi", "--socket", "--stay-seconds"] {
        assert!(flags.contains(flag), "run.sh passes {flag}: {flags:?}");
    }
    for flag in flags {
        assert!(help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")), "inject-xid has no {flag}");
    }
}

/// run.sh takes the image, execution role and log group from the tier's container by name: the name it looks for
/// by default is the one both of the template's task definitions give their container.
#[test]
fn the_demo_looks_for_the_container_the_template_names() {
    let run = demo_file("run.sh");
    let default = run
        .split(r#"CONTAINER="${CONTAINER:-"#)
        .nth(1)
        .and_then(|rest| rest.split('}').next())
        .expect("run.sh sets CONTAINER=\"${CONTAINER:-<name>}\"");
    for (id, definition) in tier_definitions(&crate::support::cfn::template()) {
        let names: Vec<_> = definition["ContainerDefinitions"].as_array().unwrap().iter().map(|c| &c["Name"]).collect();
        assert_eq!(names, [default], "{id}: run.sh looks for a container named {default}");
    }
    assert!(run.contains("containerDefinitions[?name=='$CONTAINER'] | [0].image"));
}

/// The injector writes to the log group of the tier's own container, which the stack creates (`/ecs/<stack>/small`
/// or `/large`) and the tier's execution role (AmazonECSTaskExecutionRolePolicy: CreateLogStream and PutLogEvents,
/// not CreateLogGroup) writes to already; it asks for no log group to be created.
#[test]
fn the_injector_logs_to_a_log_group_the_stack_creates_with_the_tiers_execution_role() {
    let definition = injector_definition();
    assert_eq!(definition["executionRoleArn"], "__EXECUTION_ROLE_ARN__");
    let logging = &definition["containerDefinitions"][0]["logConfiguration"];
    assert_eq!(logging["logDriver"], "awslogs");
    assert_eq!(logging["options"]["awslogs-group"], "__LOG_GROUP__");
    assert_eq!(logging["options"]["awslogs-stream-prefix"], "xid");
    assert!(logging["options"].get("awslogs-create-group").is_none(), "the execution role may not create groups");

    let run = demo_file("run.sh");
    for needed in [
        r#"-e "s|__LOG_GROUP__|$log_group|""#,
        r#"-e "s|__EXECUTION_ROLE_ARN__|$execution_role|""#,
        r#"containerDefinitions[?name=='$CONTAINER'] | [0].logConfiguration.options.\"awslogs-group\""#,
        "taskDefinition.[executionRoleArn,",
    ] {
        assert!(run.contains(needed), "run.sh fills the placeholders from the tier's task definition: {needed}");
    }

    let template = crate::support::cfn::template();
    let stack = crate::support::cfn::Stack::new("demo", &[]);
    let mut groups = Vec::new();
    for (id, definition) in tier_definitions(&template) {
        let container = &definition["ContainerDefinitions"][0];
        let group = container["LogConfiguration"]["Options"]["awslogs-group"]["Ref"].as_str().unwrap();
        assert_eq!(template["Resources"][group]["Type"], "AWS::Logs::LogGroup", "{id}: the stack creates {group}");
        groups.push(stack.physical_name(group));
        assert_eq!(definition["ExecutionRoleArn"], json!({"Fn::GetAtt": ["TaskExecutionRole", "Arn"]}), "{id}");
    }
    groups.sort();
    assert_eq!(groups, ["/ecs/demo/large", "/ecs/demo/small"]);
    let managed = &template["Resources"]["TaskExecutionRole"]["Properties"]["ManagedPolicyArns"];
    assert!(managed.to_string().contains("service-role/AmazonECSTaskExecutionRolePolicy"), "{managed}");
    for (name, script) in demo_scripts().into_iter().chain([("README.md", demo_file("README.md"))]) {
        for stale in ["awslogs-create-group", "create-log-group", "/ecs/xid-inject", "/tmp/nv-hostengine"] {
            assert!(!script.contains(stale), "{name} still mentions {stale}");
        }
    }
}

/// Every stack output the scripts read (`output <Name>`) is one template.yaml has, with the meaning the scripts
/// give it. EXEC=1 runs the injector with the task role of output XidInjectTaskRoleArn: a role ECS tasks assume that
/// may open ECS Exec's Session Manager channels, and nothing else. observe.sh's health events come from the
/// stack's InstanceHealthRule into the log group of output ContainerInstanceHealthLogGroup.
#[test]
fn the_stack_outputs_the_demo_reads_exist_with_the_meaning_it_gives_them() {
    let mut read = std::collections::BTreeSet::new();
    for (_, script) in demo_scripts() {
        for rest in script.split("$(output ").skip(1) {
            let name = rest.split(|c: char| !c.is_ascii_alphanumeric()).next().unwrap();
            read.insert(name.to_owned());
        }
    }
    let expected = [
        "ClusterName",
        "ContainerInstanceHealthLogGroup",
        "LargeModelServiceName",
        "SmallModelServiceName",
        "XidInjectTaskRoleArn",
    ];
    assert_eq!(read.iter().map(String::as_str).collect::<Vec<_>>(), expected);

    let template = crate::support::cfn::template();
    let outputs = &template["Outputs"];
    let missing: Vec<_> = expected.iter().filter(|name| outputs.get(**name).is_none()).collect();
    assert!(missing.is_empty(), "template.yaml has no output {missing:?}, which the demo's scripts read");
    let value = |name: &str| outputs[name]["Value"].clone();
    assert_eq!(value("ClusterName"), json!({"Ref": "Cluster"}));
    assert_eq!(value("SmallModelServiceName"), json!({"Fn::GetAtt": ["SmallService", "Name"]}));
    assert_eq!(value("LargeModelServiceName"), json!({"Fn::GetAtt": ["LargeService", "Name"]}));
    assert_eq!(value("ContainerInstanceHealthLogGroup"), json!({"Ref": "InstanceHealthLogGroup"}));
    let targets = template["Resources"]["InstanceHealthRule"]["Properties"]["Targets"].to_string();
    assert!(targets.contains("${InstanceHealthLogGroup}"), "the rule writes to the output's log group: {targets}");

    assert_eq!(value("XidInjectTaskRoleArn"), json!({"Fn::GetAtt": ["XidInjectTaskRole", "Arn"]}));
    let role = &template["Resources"]["XidInjectTaskRole"];
    assert_eq!(role["Type"], "AWS::IAM::Role");
    let trust = &role["Properties"]["AssumeRolePolicyDocument"]["Statement"];
    assert_eq!(trust.as_array().unwrap().len(), 1);
    assert_eq!(trust[0]["Principal"], json!({"Service": "ecs-tasks.amazonaws.com"}));
    assert!(role["Properties"].get("ManagedPolicyArns").is_none(), "the injector's role grants ECS Exec only");
    let statements = crate::support::cfn::statements(role);
    let mut actions: Vec<_> = statements
        .iter()
        .flat_map(|statement| {
            assert_eq!(statement["Effect"], "Allow");
            assert_eq!(statement["Resource"], "*", "ssmmessages has no resource-level permissions");
            match &statement["Action"] {
                Value::Array(actions) => actions.iter().map(|a| a.as_str().unwrap()).collect::<Vec<_>>(),
                action => vec![action.as_str().unwrap()],
            }
        })
        .collect();
    actions.sort_unstable();
    assert_eq!(
        actions,
        [
            "ssmmessages:CreateControlChannel",
            "ssmmessages:CreateDataChannel",
            "ssmmessages:OpenControlChannel",
            "ssmmessages:OpenDataChannel"
        ]
    );
}

/// The demo's README lists the XIDs ECS repairs, with their meanings: the binary's list, in its order.
#[test]
fn the_readme_lists_the_xids_the_binary_injects_without_force() {
    let readme = demo_file("README.md");
    let listed: Vec<(u32, String)> = readme
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let [_, xid, meaning, _] = cells.as_slice() else { return None };
            Some((xid.parse().ok()?, (*meaning).to_owned()))
        })
        .collect();
    let binary: Vec<(u32, String)> = CRITICAL_XIDS.iter().map(|(xid, meaning)| (*xid, (*meaning).to_owned())).collect();
    assert_eq!(listed, binary);
}

// ---- run.sh and observe.sh for real, against a stand-in aws CLI: the AWS sample's positional arguments.

/// A stand-in for the AWS CLI: logs each call (its arguments, space-separated, one line) to `$FAKE_AWS_LOG` and
/// answers the calls run.sh and observe.sh make as a stack `demo` with one running small-tier task would.
const FAKE_AWS: &str = r#"#!/usr/bin/env bash
printf '%s\n' "$*" >>"$FAKE_AWS_LOG"
query="" previous=""
for arg in "$@"; do
  if [[ $previous == --query ]]; then query=$arg; fi
  previous=$arg
done
case "$1 $2" in
  "cloudformation describe-stacks")
    printf 'ClusterName\tdemo-cluster\nSmallModelServiceName\tdemo-small\nLargeModelServiceName\tdemo-large\n' ;;
  "ecs list-tasks") echo arn:aws:ecs:us-east-1:111122223333:task/demo-cluster/tier0task ;;
  "ecs describe-tasks")
    case "$query" in
      *taskDefinitionArn*) printf 'arn:aws:ecs:us-east-1:111122223333:container-instance/ci0\tarn:aws:ecs:us-east-1:111122223333:task-definition/demo-small:1\tsubnet-a\n' ;;
      *exitCode*) echo 0 ;;
      *containerInstanceArn*) echo arn:aws:ecs:us-east-1:111122223333:container-instance/ci0 ;;
      *) echo None ;;
    esac ;;
  "ecs describe-container-instances")
    case "$query" in
      *instance-type*) printf 'i-0123456789abcdef0\tg6e.xlarge\n' ;;
      *) echo i-0123456789abcdef0 ;;
    esac ;;
  "ecs list-container-instances") ;;
  "ecs describe-task-definition")
    printf 'arn:aws:iam::111122223333:role/exec\t111122223333.dkr.ecr.us-east-1.amazonaws.com/demo:v0.1.0\t/ecs/demo/small\n' ;;
  "ecs describe-services")
    case "$query" in
      *capacityProviderStrategy*) echo '[{"capacityProvider":"demo-small-cp","weight":1}]' ;;
      *) printf 'subnet-a,subnet-b\tsg-0\n' ;;
    esac ;;
  "ecs register-task-definition") echo arn:aws:ecs:us-east-1:111122223333:task-definition/gpuinfer-xid-inject:1 ;;
  "ecs run-task") printf 'arn:aws:ecs:us-east-1:111122223333:task/demo-cluster/injector1\tNone\n' ;;
  "ecs wait" | "logs tail") ;;
  *) echo "stand-in aws: unexpected call: $*" >&2; exit 1 ;;
esac
"#;

/// A stand-in for sleep(1) that logs its argument and fails, which ends observe.sh's loop (set -e) after one round.
const FAKE_SLEEP: &str = r#"#!/bin/sh
echo "$*" >>"$FAKE_SLEEP_LOG"
exit 1
"#;

/// A folder with the stand-ins, put first on PATH for a demo script.
struct FakeAws {
    dir: tempfile::TempDir,
}

impl FakeAws {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        write_executable(&dir.path().join("bin/aws"), FAKE_AWS);
        write_executable(&dir.path().join("bin/sleep"), FAKE_SLEEP);
        FakeAws { dir }
    }

    /// Runs demos/gpu-auto-repair/`script` with `args` as for the stack `demo`; `env` adds to (or replaces) the
    /// environment, whose demo settings are otherwise cleared.
    fn run(&self, script: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
        let path = format!("{}/bin:{}", self.dir.path().display(), std::env::var("PATH").unwrap_or_default());
        let mut command =
            std::process::Command::new(format!("{}/demos/gpu-auto-repair/{script}", env!("CARGO_MANIFEST_DIR")));
        command.args(args).env("PATH", path).env("STACK_NAME", "demo").env("AWS_REGION", "us-east-1");
        for name in ["XID", "GPU", "TIER", "CLUSTER", "SERVICE", "HEALTH_LOG_GROUP", "EXEC", "FORCE", "INTERVAL"] {
            command.env_remove(name);
        }
        command.env("FAKE_AWS_LOG", self.log("aws")).env("FAKE_SLEEP_LOG", self.log("sleep"));
        command.envs(env.iter().copied());
        command.output().unwrap()
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.log"))
    }

    /// The lines the stand-in `name` logged, and forgets them.
    fn take_calls(&self, name: &str) -> Vec<String> {
        let calls = std::fs::read_to_string(self.log(name)).unwrap_or_default();
        let _ = std::fs::remove_file(self.log(name));
        calls.lines().map(str::to_owned).collect()
    }

    /// The command run.sh gave the injector: the run-task call's container override.
    fn injector_command(&self) -> Value {
        let calls = self.take_calls("aws");
        let run_task = calls.iter().find(|call| call.starts_with("ecs run-task ")).expect("run.sh ran the injector");
        let overrides = run_task.split("--overrides ").nth(1).unwrap().split(" --").next().unwrap();
        let overrides: Value = serde_json::from_str(overrides).unwrap();
        overrides["containerOverrides"][0]["command"].clone()
    }
}

/// The AWS sample's `run-injection.sh [XID_CODE] [GPU_ID]`: `run.sh 74 3` injects XID 74 on GPU 3 (here a dry run,
/// as DRY_RUN=1 asks), as `XID=74 GPU=3 run.sh` does; an argument takes the place of its variable.
#[test]
fn run_sh_takes_the_samples_xid_and_gpu_arguments() {
    let aws = FakeAws::new();
    let output = aws.run("run.sh", &["74", "3"], &[("DRY_RUN", "1")]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains("target: demo-small task tier0task on i-0123456789abcdef0 (GPU 3, XID 74)"),
        "{}",
        text(&output.stdout)
    );
    assert_eq!(aws.injector_command(), json!(["inject-xid", "--xid", "74", "--gpu", "3", "--dry-run"]));

    let output = aws.run("run.sh", &[], &[("XID", "74"), ("GPU", "3"), ("DRY_RUN", "1")]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(aws.injector_command(), json!(["inject-xid", "--xid", "74", "--gpu", "3", "--dry-run"]));

    let output = aws.run("run.sh", &["48"], &[("XID", "74"), ("GPU", "3")]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(aws.injector_command(), json!(["inject-xid", "--xid", "48", "--gpu", "3"]), "the argument wins");

    let output = aws.run("run.sh", &[], &[]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(aws.injector_command(), json!(["inject-xid", "--xid", "79", "--gpu", "0"]), "the defaults");
}

/// What run.sh cannot take is refused with its usage, exit 2, before any AWS call; --help prints the usage.
#[test]
fn run_sh_refuses_a_bad_argument_with_its_usage() {
    let aws = FakeAws::new();
    let usage = "usage: demos/gpu-auto-repair/run.sh [XID [GPU]]";
    for (args, says) in [
        (&["74", "three"][..], "XID and GPU are numbers, got three"),
        (&["seventy-four"][..], "XID and GPU are numbers, got seventy-four"),
        (&["74", "3", "1"][..], "at most two arguments, XID and GPU; got 3: 74 3 1"),
        (&["--xid", "74"][..], "unknown option --xid"),
    ] {
        let output = aws.run("run.sh", args, &[]);
        assert_fails(&output, 2, says);
        assert_fails(&output, 2, usage);
        assert!(aws.take_calls("aws").is_empty(), "{args:?}: refused before any AWS call");
    }
    let help = aws.run("run.sh", &["--help"], &[]);
    assert_eq!(help.status.code(), Some(0));
    assert!(text(&help.stdout).starts_with(usage), "{}", text(&help.stdout));
    assert!(aws.take_calls("aws").is_empty());
}

/// The AWS sample's `observe-repair.sh [INTERVAL_SECONDS]`: `observe.sh 7` looks every 7 s (the stand-in sleep
/// ends it after one round); a bad interval or a second argument is refused with the usage.
#[test]
fn observe_sh_takes_the_samples_interval_argument() {
    let aws = FakeAws::new();
    let output = aws.run("observe.sh", &["7"], &[("INTERVAL", "30")]);
    assert!(text(&output.stdout).contains("(no container instances"), "{}", text(&output.stdout));
    assert_eq!(aws.take_calls("sleep"), ["7"], "one round, then sleep 7: {}", text(&output.stderr));
    aws.run("observe.sh", &[], &[("INTERVAL", "30")]);
    assert_eq!(aws.take_calls("sleep"), ["30"], "the variable, without an argument");
    aws.run("observe.sh", &[], &[]);
    assert_eq!(aws.take_calls("sleep"), ["15"], "the default");
    aws.take_calls("aws");

    let usage = "usage: demos/gpu-auto-repair/observe.sh [INTERVAL]";
    for (args, says) in [
        (&["5s"][..], "INTERVAL is a whole number of seconds, got 5s"),
        (&["0"][..], "INTERVAL is a whole number of seconds, got 0"),
        (&["5", "6"][..], "at most one argument, INTERVAL; got 2: 5 6"),
        (&["--interval"][..], "unknown option --interval"),
    ] {
        let output = aws.run("observe.sh", args, &[]);
        assert_fails(&output, 2, says);
        assert_fails(&output, 2, usage);
        assert!(aws.take_calls("aws").is_empty(), "{args:?}: refused before any AWS call");
    }
    let help = aws.run("observe.sh", &["-h"], &[]);
    assert_eq!(help.status.code(), Some(0));
    assert!(text(&help.stdout).starts_with(usage), "{}", text(&help.stdout));
}
