//! `gpuinfer inject-xid`: the dcgmi command lines and XID rules (pure), then the real binary against a fake
//! host root (a fake dcgmi that logs its arguments, a unix socket, a DMI asset tag) entered by a fake chroot.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::Output;

use axum::Json;
use axum::routing::get;
use gpuinfer::xid::{CRITICAL_XIDS, Gpu, Injection, XidError, discovery_args, parse_discovery, shell_words};
use serde_json::json;

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

const SOCKET_ARG: &str = "unix:///tmp/nv-hostengine";

fn args(words: &[&str]) -> Vec<String> {
    words.iter().map(|word| (*word).to_owned()).collect()
}

#[test]
fn the_critical_xids_run_as_is_and_others_only_forced() {
    assert_eq!(CRITICAL_XIDS.map(|(xid, _)| xid), [48, 74, 79, 95, 140]);
    for (xid, meaning) in CRITICAL_XIDS {
        assert_eq!(Injection::new(xid, 0, false).unwrap().meaning, Some(meaning));
    }
    let refused = Injection::new(13, 0, false).unwrap_err();
    assert_eq!(refused.exit_code(), 2);
    assert_eq!(
        refused.to_string(),
        "XID 13 is not one ECS auto-repair acts on (48, 74, 79, 95, 140); pass --force to inject it anyway"
    );
    assert_eq!(Injection::new(13, 0, true).unwrap(), Injection { xid: 13, gpu: 0, meaning: None });
}

#[test]
fn dcgmi_arguments_inject_field_230_through_the_unix_socket() {
    let socket = Path::new("/tmp/nv-hostengine");
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
        std::fs::create_dir_all(root.join("tmp")).unwrap();
        let socket = UnixListener::bind(root.join("tmp/nv-hostengine")).unwrap();
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
injected: ECS should mark the instance IMPAIRED within ~2 min and finish replacing it in ~8 min (watch it with \
         demos/gpu-auto-repair/observe.sh)
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
            "chroot /proc/1/root /usr/bin/dcgmi test --host unix:///tmp/nv-hostengine --inject --gpuid 2 -f 230 -v 140"
        ),
        "the defaults: the host's root through PID 1, DCGM's default socket"
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

    std::fs::write(host.root().join("tmp/not-a-socket"), "").unwrap();
    let cases = [
        (["--dcgmi", "/opt/dcgm/bin/dcgmi"], 4, "dcgmi not found at /opt/dcgm/bin/dcgmi in the host root"),
        (["--socket", "/run/dcgm.sock"], 5, "nv-hostengine socket not found at /run/dcgm.sock in the host root"),
        (["--socket", "/tmp/not-a-socket"], 5, "/tmp/not-a-socket in the host root"),
        (["--socket", "tmp/nv-hostengine"], 2, "--socket must be an absolute path inside the host root"),
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
        "/usr/bin/dcgmi test --host unix:///tmp/nv-hostengine --inject --gpuid 0 -f 230 -v 95` failed",
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

#[tokio::test]
async fn help_lists_every_exit_status() {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_gpuinfer"))
        .args(["inject-xid", "--help"])
        .output()
        .await
        .unwrap();
    let help = text(&output.stdout);
    for status in 0..=5 {
        assert!(help.contains(&format!("\n  {status}  ")), "exit status {status} in:\n{help}");
    }
}
