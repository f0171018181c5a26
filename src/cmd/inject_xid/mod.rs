//! `gpuinfer inject-xid`: inject a synthetic NVIDIA XID through the host's own DCGM (GPU auto-repair demo).

pub mod xid;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::bail;
use serde::Deserialize;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::cmd::inject_xid::xid::{HostDcgm, Injection, critical_xid_list, discovery_args, find_gpu};

/// The exit statuses `XidError::exit_code` gives, as `--help` shows them.
pub(crate) const EXIT_STATUS: &str = "\
Exit status:
  0  injected (with --dry-run: the commands printed, nothing run)
  1  dcgmi ran but failed: nv-hostengine refused the injection or did not answer
  2  bad arguments: a non-critical XID without --force, a GPU DCGM does not list, a relative --dcgmi or --socket
  3  the host root is missing or cannot be entered: run the task with pidMode host, privileged, as root
  4  dcgmi is not in the host root, or cannot run
  5  nv-hostengine's socket is not in the host root";

#[derive(Debug, clap::Args)]
#[command(after_help = EXIT_STATUS)]
pub struct Args {
    /// XID to inject. Critical (ECS replaces the instance): 46, 48, 54, 62, 64, 74, 79, 95, 109, 110, 136, 140, 142,
    /// 143, 151, 155, 156, 158 (79: the GPU has fallen off the bus).
    #[arg(long, env = "XID", value_parser = clap::value_parser!(u32).range(1..))]
    pub xid: u32,
    /// DCGM id of the GPU to inject it on (as `dcgmi discovery -l` lists them).
    #[arg(long, env = "XID_GPU", default_value_t = 0)]
    pub gpu: u32,
    /// Inject an XID outside the critical set anyway (DCGM records it; ECS may not repair the instance).
    #[arg(long, env = "XID_FORCE")]
    pub(crate) force: bool,
    /// Print the dcgmi commands instead of running them; touches nothing on the host.
    #[arg(long, env = "XID_DRY_RUN")]
    pub(crate) dry_run: bool,
    /// The host's root filesystem as this container sees it (with pidMode host, PID 1 is the host's init).
    #[arg(long, env = "XID_HOST_ROOT", default_value = "/proc/1/root")]
    pub(crate) host_root: PathBuf,
    /// dcgmi's path on the host.
    #[arg(long, env = "XID_DCGMI", default_value = "/usr/bin/dcgmi")]
    pub(crate) dcgmi: PathBuf,
    /// nv-hostengine's unix socket on the host.
    // On ECS Managed Instances the host's DCGM (systemd unit nvidia-dcgm, the nv-hostengine the ECS agent's GPU
    // health monitor reads) listens on the unix socket /run/nvidia-dcgm/nv-hostengine, not on TCP 5555: the AWS
    // sample found it there on a live g6e.xlarge. dcgmi reaches a unix socket with --host unix://<path>, and a
    // socket file is reachable from a task with its own network namespace.
    #[arg(long, env = "XID_HOSTENGINE_SOCKET", default_value = "/run/nvidia-dcgm/nv-hostengine")]
    pub(crate) socket: PathBuf,
    /// Then keep running this many seconds (until SIGTERM), so that `aws ecs execute-command` can run more
    /// `gpuinfer inject-xid` in this task; 0 exits at once.
    #[arg(long, env = "XID_STAY_SECONDS", default_value_t = 0)]
    pub(crate) stay_seconds: u64,
    /// ECS task metadata endpoint (ECS sets it), to print which task was the injector.
    #[arg(long, env = "ECS_CONTAINER_METADATA_URI_V4")]
    pub(crate) ecs_metadata_uri: Option<String>,
    /// Run `<program> <host root> <dcgmi> …` (like chroot(1)) instead of entering the host root in-process.
    #[arg(long, env = "XID_CHROOT_BIN", hide = true)]
    pub(crate) chroot_bin: Option<PathBuf>,
}

pub struct Config {
    injection: Injection,
    host: HostDcgm,
    dry_run: bool,
    stay: Duration,
    ecs_metadata_uri: Option<String>,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        Ok(Config {
            injection: Injection::new(self.xid, self.gpu, self.force)?,
            host: HostDcgm::new(self.host_root, self.dcgmi, self.socket, self.chroot_bin)?,
            dry_run: self.dry_run,
            stay: Duration::from_secs(self.stay_seconds),
            ecs_metadata_uri: self.ecs_metadata_uri,
        })
    }
}

pub(crate) async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let stay = config.stay;
    // A staying injector ends when ECS stops its task: SIGTERM is listened to from here on, so one that comes
    // before `shutdown`'s own listener is in place still ends it cleanly (exit 0).
    let mut terminate = if stay.is_zero() { None } else { Some(signal(SignalKind::terminate())?) };
    inject_once(config, &shutdown).await?;
    if let Some(terminate) = &mut terminate {
        println!(
            "staying {} s for more injections: aws ecs execute-command --interactive --command \"gpuinfer inject-xid \
             --xid N\" (stop the task when done)",
            stay.as_secs()
        );
        tokio::select! {
            () = tokio::time::sleep(stay) => {}
            () = shutdown.cancelled() => {}
            _ = terminate.recv() => {}
        }
    }
    Ok(())
}

async fn inject_once(config: Config, shutdown: &CancellationToken) -> anyhow::Result<()> {
    let Config { injection, host, dry_run, ecs_metadata_uri, .. } = config;
    let xid = injection.xid;
    if injection.meaning.is_none() {
        tracing::warn!(
            xid,
            "XID {xid} is outside the critical set ({}): ECS may not repair the instance",
            critical_xid_list()
        );
    }
    let discover = discovery_args(&host.socket);
    let inject = injection.dcgmi_args(&host.socket);
    if dry_run {
        println!("{}", host.command_line(&discover));
        println!("{}", host.command_line(&inject));
        return Ok(());
    }
    let task = match ecs_metadata_uri {
        Some(uri) => injector_task(&uri).await,
        None => None,
    };
    let instance = instance_id(&host);
    let injected = async {
        let entered = host.enter()?;
        let gpu = find_gpu(&entered.dcgmi(&discover).await?, injection.gpu)?;
        println!("inject-xid: XID {xid} ({}) on {gpu}", injection.meaning.unwrap_or("not critical"));
        if let Some(task) = task {
            println!("  task      {} (cluster {}, {})", task.task_arn, task.cluster, task.availability_zone);
        }
        if let Some(instance) = instance {
            println!("  instance  {instance}");
        }
        println!("  command   {}", host.command_line(&inject));
        let answer = entered.dcgmi(&inject).await?;
        for line in answer.lines() {
            println!("  dcgmi     {line}");
        }
        anyhow::Ok(())
    };
    tokio::select! {
        done = injected => done?,
        () = shutdown.cancelled() => bail!("interrupted before the injection finished"),
    }
    if injection.meaning.is_some() {
        println!(
            "injected: ECS should mark the instance IMPAIRED and replace it (the AWS sample, on a g6e.xlarge, saw \
             IMPAIRED ~2 min after injecting and the repair done ~8 min later); watch it with \
             demos/gpu-auto-repair/observe.sh"
        );
    } else {
        println!("injected: XID {xid} is not critical, so ECS may leave the instance in service");
    }
    Ok(())
}

/// The parts of the ECS task metadata (v4) `/task` document printed as the injector's task.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct InjectorTask {
    cluster: String,
    #[serde(rename = "TaskARN")]
    task_arn: String,
    #[serde(default)]
    availability_zone: String,
}

/// The injector's own task, from the ECS task metadata endpoint; None (with a warning) if it does not answer.
async fn injector_task(metadata_uri: &str) -> Option<InjectorTask> {
    let url = format!("{}/task", metadata_uri.trim_end_matches('/'));
    let fetched = async {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?;
        http.get(&url).send().await?.error_for_status()?.json::<InjectorTask>().await
    };
    match fetched.await {
        Ok(task) => Some(task),
        Err(error) => {
            tracing::warn!(%url, %error, "no ECS task metadata; the target is printed without its task");
            None
        }
    }
}

/// The EC2 instance id: on Nitro instances the DMI board asset tag holds it.
fn instance_id(host: &HostDcgm) -> Option<String> {
    let tag = std::fs::read_to_string(host.on_host(Path::new("/sys/devices/virtual/dmi/id/board_asset_tag"))).ok()?;
    let tag = tag.trim();
    tag.starts_with("i-").then(|| tag.to_owned())
}
