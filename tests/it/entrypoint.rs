//! entrypoint.sh for real: engine (the engine simulator via ENGINE_CMD) + `gpuinfer worker`, supervised together, the
//! users it runs them as (started as root: uid 1000 after opening the shared-memory directory), and its cold start
//! reported once.

use std::fs::{self, Permissions};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::cold_start::{finished, one_document, one_report, read, reports};
use crate::support::{eventually, free_port, request_body};
use gpuinfer::{LocalBackends, Priority, Queue, ResultStore, Tier};

const ENTRYPOINT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/entrypoint.sh");
/// The user the image's processes run as (Dockerfile; entrypoint.sh's APP_UID). It need not exist in /etc/passwd:
/// setpriv takes numeric ids, and the entrypoint falls back to the same number for the group.
const ENGINE_UID: u32 = 1000;

/// A launcher that leaves a root process Docker's default capabilities and no other (moby's default set; ECS
/// starts a container with it when the task definition adds and drops none), as a container on ECS starts.
const DOCKER_DEFAULT_CAPABILITIES: [&str; 3] = [
    "setpriv",
    "--bounding-set=-all,+chown,+dac_override,+fowner,+fsetid,+kill,+setgid,+setuid,+setpcap,+net_bind_service,\
     +net_raw,+sys_chroot,+mknod,+audit_write,+setfcap",
    "--",
];

/// uid 1000's primary group, which the entrypoint drops to with it: from /etc/passwd, else the same number.
fn engine_gid() -> u32 {
    let output = Command::new("getent").args(["passwd", &ENGINE_UID.to_string()]).output().expect("run getent");
    let entry = String::from_utf8_lossy(&output.stdout).into_owned();
    entry.split(':').nth(3).and_then(|gid| gid.trim().parse().ok()).unwrap_or(ENGINE_UID)
}

fn current_uid() -> u32 {
    let output = Command::new("id").arg("-u").output().expect("run id -u");
    String::from_utf8_lossy(&output.stdout).trim().parse().expect("id -u prints a number")
}

fn running_as_root() -> bool {
    current_uid() == 0
}

/// A container's writable places, laid out in one temporary folder: `data/` (the local backends), `shm/` (the
/// shared-memory directory, root-owned 0755 when the test runs as root, like the large tier's ECS task volume),
/// and the paths of MODEL_DIR and HOME, which the entrypoint creates itself.
struct Container {
    dir: tempfile::TempDir,
}

impl Container {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        // tempdir() makes 0700; uid 1000, which the entrypoint drops to when started as root, must reach inside.
        fs::set_permissions(dir.path(), Permissions::from_mode(0o755)).unwrap();
        let container = Self { dir };
        fs::create_dir(container.data()).unwrap();
        // As the worker asks of its data folder: prompts and results are nobody else's to read.
        fs::set_permissions(container.data(), Permissions::from_mode(0o700)).unwrap();
        fs::create_dir(container.shm()).unwrap();
        fs::set_permissions(container.shm(), Permissions::from_mode(0o755)).unwrap();
        container
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn shm(&self) -> PathBuf {
        self.dir.path().join("shm")
    }

    fn model_dir(&self) -> PathBuf {
        self.dir.path().join("models/model")
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// The worker runs as uid 1000 once a root start has dropped privileges: the files the test's own backends
    /// created in `data/` (the queue database) become its, as the image's /models and HOME are. As root, SQLite
    /// gives the journal files it makes later to the database file's owner, so the test can keep writing.
    fn hand_data_to_engine_user(&self) {
        if running_as_root() {
            let owner = format!("{ENGINE_UID}:{}", engine_gid());
            let status = Command::new("chown").arg("-R").arg(owner).arg(self.data()).status().unwrap();
            assert!(status.success(), "chown -R {ENGINE_UID} {}", self.data().display());
        }
    }

    /// entrypoint.sh as the image runs it, with `engine` (the engine simulator, or a stand-in) answering on `port`.
    fn entrypoint(&self, port: u16, engine: &Path) -> Command {
        self.entrypoint_through(&[], port, engine)
    }

    /// The same, started through `launcher` (a program and its arguments, entrypoint.sh's path appended).
    fn entrypoint_through(&self, launcher: &[&str], port: u16, engine: &Path) -> Command {
        let mut command = match launcher.split_first() {
            Some((program, arguments)) => {
                let mut command = Command::new(program);
                command.args(arguments).arg(ENTRYPOINT);
                command
            }
            None => Command::new(ENTRYPOINT),
        };
        command
            .env("GPUINFER", env!("CARGO_BIN_EXE_gpuinfer"))
            .env("ENGINE_CMD", format!("{} --listen 127.0.0.1:{port} --latency-ms 300", engine.display()))
            .env("ENGINE_PORT", port.to_string())
            .env("MODEL_NAME", "simulator-model")
            .env("MODEL_S3_PATH", "s3://none/none/")
            .env("MODEL_DIR", self.model_dir())
            .env("SHARED_MEMORY_DIR", self.shm())
            .env("HOME", self.home())
            .env("GPUINFER_DATA_DIR", self.data())
            .env("GPUINFER_EMBEDDED_QUEUES", "true")
            .env("WAIT_TIME_SECONDS", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        command
    }
}

fn engine_simulator() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_engine-simulator"))
}

/// A running entrypoint.sh. A test that fails before it stops the container sends it SIGTERM on the way out, so the
/// engine and the worker it started do not outlive the test.
struct Running(Child);

impl Running {
    fn spawn(command: &mut Command) -> Self {
        Self(command.spawn().expect("run entrypoint.sh"))
    }

    fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status();
        }
    }
}

fn start(container: &Container, port: u16) -> Running {
    container.hand_data_to_engine_user();
    Running::spawn(&mut container.entrypoint(port, engine_simulator()))
}

async fn exit_within(running: &mut Running, limit: Duration) -> ExitStatus {
    eventually(limit, "entrypoint.sh to exit", || std::future::ready(running.0.try_wait().unwrap())).await
}

fn signal(signal: &str, target: &str) {
    let status = Command::new("pkill").args([signal, "-f", target]).status().unwrap();
    assert!(status.success(), "pkill {signal} -f {target}");
}

async fn engine_answers(port: u16) {
    let health = format!("http://127.0.0.1:{port}/health");
    eventually(Duration::from_secs(20), "the engine to answer", || {
        let request = reqwest::get(health.clone());
        async move { request.await.ok().filter(|r| r.status().is_success()).map(|_| ()) }
    })
    .await;
}

/// One field of /proc/<pid>/status ("Uid", "Gid", "Groups", "NoNewPrivs", "Name"), without its name.
fn proc_status(pid: u32, field: &str) -> String {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_else(|e| panic!("/proc/{pid}: {e}"));
    let prefix = format!("{field}:");
    let line = status.lines().find_map(|line| line.strip_prefix(&prefix)).unwrap_or_else(|| panic!("no {field}"));
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Waits until the `gpuinfer` worker `supervisor` started handles SIGTERM itself (its caught-signal mask holds it): a
/// SIGTERM that reaches it earlier, while it is still starting, ends it by the signal's default action (exit 143).
async fn worker_takes_sigterm(supervisor: u32) {
    eventually(Duration::from_secs(20), "the worker to handle SIGTERM", || {
        let caught = children(supervisor).into_iter().any(|(pid, name)| name == "gpuinfer" && catches_sigterm(pid));
        std::future::ready(caught.then_some(()))
    })
    .await;
}

/// Whether `pid` catches SIGTERM (signal 15: bit 14 of `SigCgt` in /proc/<pid>/status).
fn catches_sigterm(pid: u32) -> bool {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let mask = status.lines().find_map(|line| line.strip_prefix("SigCgt:")).map(str::trim).unwrap_or("0");
    u64::from_str_radix(mask, 16).is_ok_and(|mask| mask & (1 << 14) != 0)
}

/// The processes `pid` started: (pid, command name).
fn children(pid: u32) -> Vec<(u32, String)> {
    let output = Command::new("pgrep").args(["-P", &pid.to_string()]).output().unwrap();
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .map(|child| (child, proc_status(child, "Name")))
        .collect()
}

#[tokio::test]
async fn the_worker_serves_then_drains_on_sigterm_and_the_container_exits_zero() {
    let container = Container::new();
    let backends = LocalBackends::open(&container.data()).unwrap();
    let queue = backends.lane_queue(Tier::Small, Priority::Normal, Duration::from_secs(300), 3);
    let port = free_port();
    let mut entrypoint = start(&container, port);
    let (id, body) = request_body("served through the entrypoint");
    queue.send(&body).await.unwrap();
    let store = backends.store.clone();
    eventually(Duration::from_secs(30), "a result", || {
        let store = store.clone();
        async move { store.get(id).await.unwrap() }
    })
    .await;

    // SIGTERM while a slow request is in flight: the worker finishes it before anything stops.
    let (late, body) = request_body("in flight at SIGTERM");
    queue.send(&body).await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    Command::new("kill").args(["-TERM", &entrypoint.id().to_string()]).status().unwrap();
    let status = exit_within(&mut entrypoint, Duration::from_secs(20)).await;
    assert!(status.success(), "a drained container exits 0, got {status}");
    assert!(backends.store.get(late).await.unwrap().is_some(), "the request in flight finished before exit");
    let engine_gone = Command::new("pgrep").args(["-f", &format!("127.0.0.1:{port}")]).status().unwrap();
    assert!(!engine_gone.success(), "the engine was stopped too");
}

#[tokio::test]
async fn an_engine_crash_stops_the_worker_and_exits_non_zero() {
    let container = Container::new();
    let port = free_port();
    let mut entrypoint = start(&container, port);
    engine_answers(port).await;
    signal("-KILL", &format!("engine-simulator --listen 127.0.0.1:{port}"));
    let status = exit_within(&mut entrypoint, Duration::from_secs(20)).await;
    assert!(!status.success(), "an engine crash must fail the container so ECS replaces it, got {status}");
}

#[tokio::test]
async fn a_bad_model_path_is_refused_before_anything_starts() {
    let output = Command::new(ENTRYPOINT)
        .env("GPUINFER", env!("CARGO_BIN_EXE_gpuinfer"))
        .env("MODEL_NAME", "m")
        .env("MODEL_S3_PATH", "/local/path")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&output.stderr).contains("MODEL_S3_PATH must be an s3:// URI"));
    let output = Command::new(ENTRYPOINT).env_remove("MODEL_NAME").output().unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("MODEL_NAME must name the model"));
    let output = Command::new(ENTRYPOINT)
        .env("MODEL_NAME", "m")
        .env("MODEL_S3_PATH", "s3://none/none/")
        .env("TP_SIZE", "eight")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&output.stderr).contains("TP_SIZE must be a positive whole number"));
}

/// The large tier as ECS Managed Instances start it: its /dev/shm is a task volume with no host path, which Docker
/// creates root-owned 0755 (ECS Developer Guide, "Bind mounts": "By default, the volume permissions are set to 0755
/// and the owner as root"), and the container starts as the image's user, root, since the task definition names no
/// `user`. The engine stand-in creates a file in the shared-memory directory, as vLLM's tensor-parallel message
/// queue does, and records its uid there: the file must be uid 1000's, every process the entrypoint leaves
/// running must be uid 1000 with its own group and no other, the worker must still serve, the health check (run
/// as root, as ECS runs it inside the container) must pass, and SIGTERM must still drain to exit 0.
#[tokio::test]
#[ignore = "needs root, as the container starts (CI runs as root): scripts/test.sh"]
async fn started_as_root_the_engine_creates_shared_memory_and_every_process_runs_as_uid_1000() {
    assert!(running_as_root(), "this test starts entrypoint.sh as root; run it as root (CI does)");
    let container = Container::new();
    let probe = container.shm().join("engine-shm-probe");
    // The stand-in: create a file where vLLM creates its shared memory, write the uid, then be the engine simulator.
    let engine = container.dir.path().join("engine.sh");
    let script = format!(
        "#!/bin/sh\nid -u > \"$SHARED_MEMORY_DIR/engine-shm-probe\" || exit 71\nexec {} \"$@\"\n",
        engine_simulator().display()
    );
    fs::write(&engine, script).unwrap();
    fs::set_permissions(&engine, Permissions::from_mode(0o755)).unwrap();
    let before = fs::metadata(container.shm()).unwrap();
    let before = (before.uid(), before.mode() & 0o7777);
    assert_eq!(before, (0, 0o755), "the shared-memory directory starts as ECS makes it");

    let backends = LocalBackends::open(&container.data()).unwrap();
    let queue = backends.lane_queue(Tier::Small, Priority::Normal, Duration::from_secs(300), 3);
    container.hand_data_to_engine_user();
    let port = free_port();
    // Started with Docker's default capabilities only (what ECS gives a container that adds none, the tiers' case):
    // the root step must need no more.
    let mut command = container.entrypoint_through(&DOCKER_DEFAULT_CAPABILITIES, port, &engine);
    let mut entrypoint = Running::spawn(command.env("TP_SIZE", "8"));
    let (id, body) = request_body("served by an engine running as uid 1000");
    queue.send(&body).await.unwrap();
    let store = backends.store.clone();
    eventually(Duration::from_secs(30), "a result from the worker", || {
        let store = store.clone();
        async move { store.get(id).await.unwrap() }
    })
    .await;

    let shm = fs::metadata(container.shm()).unwrap();
    assert_eq!(shm.mode() & 0o7777, 0o1777, "the entrypoint opened the shared-memory directory as /dev/shm is");
    let file = fs::metadata(&probe).unwrap_or_else(|e| panic!("the engine created no file in the shared memory: {e}"));
    assert_eq!(file.uid(), ENGINE_UID, "the engine's shared-memory file belongs to uid 1000");
    assert_eq!(fs::read_to_string(&probe).unwrap().trim(), ENGINE_UID.to_string(), "the engine ran as uid 1000");
    for (what, path) in [("MODEL_DIR", container.model_dir()), ("HOME", container.home())] {
        assert_eq!(fs::metadata(&path).unwrap().uid(), ENGINE_UID, "{what} belongs to uid 1000");
    }

    let supervisor = entrypoint.id();
    let processes = eventually(Duration::from_secs(10), "the engine and the worker", || {
        let found = children(supervisor);
        std::future::ready((found.len() == 2).then_some(found))
    })
    .await;
    let mut names: Vec<&str> = processes.iter().map(|(_, name)| name.as_str()).collect();
    names.sort_unstable();
    // A process's name is its executable's, cut to the kernel's 15 characters (TASK_COMM_LEN).
    assert_eq!(names, ["engine-simulato", "gpuinfer"], "the engine and the worker, nothing in between");
    for (pid, name) in processes.iter().cloned().chain([(supervisor, "entrypoint.sh".to_owned())]) {
        // Real, effective, saved and filesystem ids: nothing is left to switch back to root with.
        assert_eq!(proc_status(pid, "Uid"), "1000 1000 1000 1000", "{name} (pid {pid}) runs as uid 1000");
        let gid = engine_gid();
        assert_eq!(proc_status(pid, "Gid"), format!("{gid} {gid} {gid} {gid}"), "{name} (pid {pid}): uid 1000's group");
        assert_eq!(proc_status(pid, "Groups"), "", "{name} (pid {pid}) keeps no supplementary group");
        assert_eq!(proc_status(pid, "NoNewPrivs"), "1", "{name} (pid {pid}) cannot regain root through setuid");
        assert_eq!(proc_status(pid, "CapEff"), "0000000000000000", "{name} (pid {pid}) holds no capability");
    }

    let health = Command::new(env!("CARGO_BIN_EXE_gpuinfer"))
        .arg("healthcheck")
        .env("ENGINE_URL", format!("http://127.0.0.1:{port}"))
        .output()
        .unwrap();
    assert!(health.status.success(), "the health check passes: {}", String::from_utf8_lossy(&health.stderr));

    worker_takes_sigterm(supervisor).await;
    Command::new("kill").args(["-TERM", &supervisor.to_string()]).status().unwrap();
    let status = exit_within(&mut entrypoint, Duration::from_secs(20)).await;
    assert!(status.success(), "SIGTERM still drains the worker, then stops the engine: exit 0, got {status}");
}

/// Started as any user but root (a task definition `user`, `docker run --user`), the entrypoint touches no
/// permission and runs everything as that user, as before: with TP_SIZE > 1 and a shared-memory directory it cannot
/// write, it refuses before fetching weights or starting anything, and says what to change; with TP_SIZE=1 (the
/// small tier) it starts as usual.
#[tokio::test]
async fn started_as_another_user_it_changes_no_permission_and_refuses_tensor_parallelism_without_shared_memory() {
    let container = Container::new();
    fs::set_permissions(container.shm(), Permissions::from_mode(0o555)).unwrap();
    // As root, the test takes uid 1000 itself (as a task definition `user` would); as another user it stays that user.
    let launcher: &[&str] =
        if running_as_root() { &["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "--"] } else { &[] };
    let port = free_port();

    let refused = container
        .entrypoint_through(launcher, port, engine_simulator())
        .env("TP_SIZE", "2")
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(78), "refused as a configuration error: {said}");
    assert!(said.contains("TP_SIZE=2 needs shared memory"), "{said}");
    assert!(said.contains("start the container as root"), "the message says what to change: {said}");
    assert_eq!(fs::metadata(container.shm()).unwrap().mode() & 0o7777, 0o555, "no chmod was attempted");
    assert!(!container.model_dir().exists(), "refused before anything was prepared");

    container.hand_data_to_engine_user();
    let mut command = container.entrypoint_through(launcher, port, engine_simulator());
    let mut small = Running::spawn(command.env("TP_SIZE", "1"));
    engine_answers(port).await;
    let started_as = if running_as_root() { ENGINE_UID } else { current_uid() };
    assert_eq!(proc_status(small.id(), "Uid"), format!("{started_as} {started_as} {started_as} {started_as}"));
    assert_eq!(fs::metadata(container.shm()).unwrap().mode() & 0o7777, 0o555, "still no chmod");
    worker_takes_sigterm(small.id()).await;
    Command::new("kill").args(["-TERM", &small.id().to_string()]).status().unwrap();
    let status = exit_within(&mut small, Duration::from_secs(20)).await;
    assert!(status.success(), "a drained container exits 0, got {status}");
}

/// A stand-in for the ECS task metadata endpoint v4 answering `task` at /task; its base URL.
async fn metadata_endpoint(task: serde_json::Value) -> String {
    let app =
        axum::Router::new().route("/v4/task", axum::routing::get(move || std::future::ready(axum::Json(task.clone()))));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://127.0.0.1:{port}/v4")
}

/// On ECS the task metadata endpoint says when the image pull started and stopped (here a stand-in, the pull 5 s to
/// 3 s before the container starts): the cold start counts from the pull's start, has an image phase and, with no
/// MODEL_S3_PATH to fetch, no weights phase; it is logged in one line once, with the first result only, and
/// published as one EMF document under the tier. The task ARN still comes from the same endpoint.
#[tokio::test]
async fn the_container_reports_its_cold_start_once_counted_from_the_image_pull() {
    const TASK_ARN: &str = "arn:aws:ecs:us-east-1:123456789012:task/inference/0123456789abcdef";
    let container = Container::new();
    let backends = LocalBackends::open(&container.data()).unwrap();
    let queue = backends.lane_queue(Tier::Small, Priority::Normal, Duration::from_secs(300), 3);
    let now = chrono::Utc::now();
    let metadata = metadata_endpoint(serde_json::json!({
        "TaskARN": TASK_ARN,
        "KnownStatus": "RUNNING",
        "PullStartedAt": (now - chrono::Duration::seconds(5)).to_rfc3339(),
        "PullStoppedAt": (now - chrono::Duration::seconds(3)).to_rfc3339(),
    }))
    .await;
    let (log, emf) = (container.dir.path().join("log"), container.dir.path().join("emf"));
    container.hand_data_to_engine_user();
    let port = free_port();
    let mut command = container.entrypoint(port, engine_simulator());
    command
        .env("ECS_CONTAINER_METADATA_URI_V4", metadata)
        .env("AWS_LAMBDA_LOG_FORMAT", "json")
        .stdout(fs::File::create(&emf).unwrap())
        .stderr(fs::File::create(&log).unwrap());
    let mut entrypoint = Running::spawn(&mut command);

    let store = backends.store.clone();
    let result = |id| {
        let store = store.clone();
        eventually(Duration::from_secs(30), "a result", move || {
            let store = store.clone();
            async move { store.get(id).await.unwrap() }
        })
    };
    let (first, body) = request_body("the container's first request");
    queue.send(&body).await.unwrap();
    let document: serde_json::Value = serde_json::from_slice(&result(first).await).unwrap();
    assert_eq!(document["taskArn"], TASK_ARN);
    eventually(Duration::from_secs(10), "the cold-start line", || {
        std::future::ready((!reports(&read(&log)).is_empty()).then_some(()))
    })
    .await;
    let (second, body) = request_body("its second request");
    queue.send(&body).await.unwrap();
    result(second).await;
    finished(&log, &second.to_string()).await;
    worker_takes_sigterm(entrypoint.id()).await;
    Command::new("kill").args(["-TERM", &entrypoint.id().to_string()]).status().unwrap();
    let status = exit_within(&mut entrypoint, Duration::from_secs(20)).await;
    assert!(status.success(), "a drained container exits 0, got {status}");

    let phases = one_report(&read(&log), "small", "ecs image pull", [true, false]);
    assert_eq!(phases[0], Some(2.0), "the image phase is the pull's, to the millisecond");
    assert!(phases[5].unwrap() >= 5.0, "the total counts from the pull's start: {phases:?}");
    one_document(&read(&emf), "small", phases);
}

/// vLLM's "Tool Calling" page: `tool_choice: "auto"` needs `--enable-auto-tool-choice` and the `--tool-call-parser`
/// of the model's tool-call format, while `required` and a named function need neither. The entrypoint passes both
/// flags exactly when the tier names a parser (TOOL_CALL_PARSER, the template's `ToolCallParser`), and nothing for a
/// model without a format (the default models). A stand-in `vllm` on PATH exits at once; the line the entrypoint
/// logs before starting it shows the command line.
#[tokio::test]
async fn vllm_gets_auto_tool_choice_and_its_parser_only_when_the_tier_names_one() {
    for (parser, flags) in [("mistral", " --enable-auto-tool-choice --tool-call-parser mistral"), ("", "")] {
        let container = Container::new();
        let bin = container.dir.path().join("bin");
        fs::create_dir(&bin).unwrap();
        fs::write(bin.join("vllm"), "#!/bin/sh\nexit 3\n").unwrap();
        fs::set_permissions(&bin, Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(bin.join("vllm"), Permissions::from_mode(0o755)).unwrap();
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
        let output = container
            .entrypoint(free_port(), engine_simulator())
            .env_remove("ENGINE_CMD")
            .env("PATH", path)
            .env("TOOL_CALL_PARSER", parser)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert!(!output.status.success(), "the stand-in engine exited: so does the container");
        let log = String::from_utf8_lossy(&output.stderr);
        let started = log
            .lines()
            .find(|line| line.contains("starting the engine: vllm serve"))
            .unwrap_or_else(|| panic!("{log}"));
        assert!(
            started.ends_with(&format!("--tensor-parallel-size 1{flags}")),
            "TOOL_CALL_PARSER={parser:?}: {started}"
        );
    }
}
