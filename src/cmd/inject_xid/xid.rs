//! Synthetic NVIDIA XIDs through the host's own DCGM: which XIDs ECS auto-repair acts on, the dcgmi command
//! lines (pure), reading `dcgmi discovery -l`, the checks that the host's DCGM is reachable, and the one shell-out.

use std::fmt::Write as _;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// DCGM field id of a GPU's XID errors (`DCGM_FI_DEV_XID_ERRORS`): injecting a value there is an XID.
pub(crate) const XID_FIELD_ID: u32 = 230;

/// XIDs that ECS Managed Instances treats as a GPU impairment and repairs by replacing the instance: the table
/// "Monitored XID error codes" of the ECS Developer Guide's "GPU auto repair for Amazon ECS managed instances"
/// (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/managed-instances-gpu-auto-repair.html), the 18
/// the AWS sample lists too. The meanings are NVIDIA's XID catalog's
/// (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html).
pub const CRITICAL_XIDS: [(u32, &str); 18] = [
    (46, "GPU stopped processing"),
    (48, "Double Bit ECC Error"),
    (54, "Auxiliary power is not connected to the GPU board"),
    (62, "Internal micro-controller halt"),
    (64, "GPU memory remapping failure"),
    (74, "NVLink Error"),
    (79, "GPU has fallen off the bus"),
    (95, "Uncontained memory error"),
    (109, "Context Switch Timeout Error"),
    (110, "Security Fault Error"),
    (136, "Link Training Failed"),
    (140, "ECC Unrecovered Error"),
    (142, "NVENC3 Error"),
    (143, "GPU Initialization Error"),
    (151, "Key rotation Error"),
    (155, "NVLink: SW Defined Error"),
    (156, "Resource Retirement Event"),
    (158, "GPU Fatal Timeout"),
];

/// Longest wait for one dcgmi run (it hangs when nv-hostengine accepts but never answers).
const DCGMI_TIMEOUT: Duration = Duration::from_secs(60);

/// The critical XIDs as a list for messages: "46, 48, 54, …".
pub fn critical_xid_list() -> String {
    CRITICAL_XIDS.iter().map(|(xid, _)| xid.to_string()).collect::<Vec<_>>().join(", ")
}

/// What `xid` means, if ECS auto-repair acts on it.
pub(crate) fn critical_xid(xid: u32) -> Option<&'static str> {
    CRITICAL_XIDS.iter().find(|(critical, _)| *critical == xid).map(|(_, meaning)| *meaning)
}

#[derive(Debug, thiserror::Error)]
pub enum XidError {
    #[error("XID {0} is not one ECS auto-repair acts on ({list}); pass --force to inject it anyway", list = critical_xid_list())]
    NotCritical(u32),
    #[error("{flag} must be an absolute path inside the host root, got {path}")]
    NotAbsolute { flag: &'static str, path: PathBuf },
    #[error("GPU {gpu} is not one DCGM lists (it lists: {listed}); pick one with --gpu")]
    UnknownGpu { gpu: u32, listed: String },
    #[error(
        "cannot reach the host root {0} ({1}): run the task with pidMode host and privileged, or point --host-root \
         at the host's /"
    )]
    HostRootMissing(PathBuf, std::io::Error),
    #[error("cannot enter the host root {0}: {1} (the task must be privileged and run as root, user 0)")]
    CannotEnter(PathBuf, std::io::Error),
    #[error(
        "dcgmi not found at {dcgmi} in the host root {host_root}: install DCGM on the host, or set its path with --dcgmi"
    )]
    DcgmiMissing { host_root: PathBuf, dcgmi: PathBuf },
    #[error("cannot run `{command}`: {source}")]
    CannotRun { command: String, source: std::io::Error },
    #[error(
        "nv-hostengine socket not found at {socket} in the host root {host_root}: is DCGM's nv-hostengine running \
         (systemd unit nvidia-dcgm)? On the host, `ss -xlp | grep nv-hostengine` shows its socket; --socket sets the \
         path"
    )]
    SocketMissing { host_root: PathBuf, socket: PathBuf },
    #[error("{socket} in the host root {host_root} is not a unix socket: point --socket at nv-hostengine's socket")]
    NotASocket { host_root: PathBuf, socket: PathBuf },
    #[error("`{command}` failed ({status}): {output}")]
    DcgmiFailed { command: String, status: String, output: String },
}

impl XidError {
    /// The process exit status for this error; `gpuinfer inject-xid --help` lists them.
    pub fn exit_code(&self) -> u8 {
        match self {
            XidError::DcgmiFailed { .. } => 1,
            XidError::NotCritical(_) | XidError::NotAbsolute { .. } | XidError::UnknownGpu { .. } => 2,
            XidError::HostRootMissing(..) | XidError::CannotEnter(..) => 3,
            XidError::DcgmiMissing { .. } | XidError::CannotRun { .. } => 4,
            XidError::SocketMissing { .. } | XidError::NotASocket { .. } => 5,
        }
    }
}

/// One XID for one GPU, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Injection {
    pub xid: u32,
    pub gpu: u32,
    /// What the XID means; None for a non-critical one injected with `force`.
    pub meaning: Option<&'static str>,
}

impl Injection {
    /// A critical XID as is; any other only with `force` (it may not trigger a repair).
    pub fn new(xid: u32, gpu: u32, force: bool) -> Result<Self, XidError> {
        let meaning = critical_xid(xid);
        if meaning.is_none() && !force {
            return Err(XidError::NotCritical(xid));
        }
        Ok(Injection { xid, gpu, meaning })
    }

    /// `dcgmi` arguments that inject this XID through the nv-hostengine listening on `socket`.
    pub fn dcgmi_args(&self, socket: &Path) -> Vec<String> {
        let mut args = vec!["test".to_owned(), "--host".to_owned(), host_arg(socket), "--inject".to_owned()];
        for (flag, value) in [("--gpuid", self.gpu), ("-f", XID_FIELD_ID), ("-v", self.xid)] {
            args.extend([flag.to_owned(), value.to_string()]);
        }
        args
    }
}

/// `dcgmi` arguments that list the GPUs the nv-hostengine listening on `socket` sees.
pub fn discovery_args(socket: &Path) -> Vec<String> {
    vec!["discovery".to_owned(), "--host".to_owned(), host_arg(socket), "-l".to_owned()]
}

/// dcgmi's `--host` for a unix socket: the path prefixed with `unix://`.
fn host_arg(socket: &Path) -> String {
    format!("unix://{}", socket.display())
}

/// One GPU as `dcgmi discovery -l` lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gpu {
    pub id: u32,
    pub name: Option<String>,
    pub pci_bus_id: Option<String>,
    pub uuid: Option<String>,
}

impl std::fmt::Display for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GPU {}", self.id)?;
        for (label, value) in [("", &self.name), ("PCI ", &self.pci_bus_id), ("", &self.uuid)] {
            if let Some(value) = value {
                write!(f, ", {label}{value}")?;
            }
        }
        Ok(())
    }
}

/// The GPUs of `dcgmi discovery -l` output: the table after "N GPUs found.", one `| id | Key: value |` row
/// per GPU followed by `|    | Key: value |` rows.
pub fn parse_discovery(output: &str) -> Vec<Gpu> {
    let mut gpus: Vec<Gpu> = Vec::new();
    let mut in_gpu_table = false;
    let mut in_gpu_row = false;
    for line in output.lines().map(str::trim) {
        if line.ends_with("found.") {
            in_gpu_table = line.contains("GPU");
            in_gpu_row = false;
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [_, first, info, ..] = cells.as_slice() else { continue };
        if !in_gpu_table {
            continue;
        }
        if let Ok(id) = first.parse() {
            gpus.push(Gpu { id, ..Gpu::default() });
            in_gpu_row = true;
        } else if !first.is_empty() {
            in_gpu_row = false;
        }
        let (Some(gpu), true) = (gpus.last_mut(), in_gpu_row) else { continue };
        let Some((key, value)) = info.split_once(':') else { continue };
        let value = Some(value.trim().to_owned());
        match key.trim() {
            "Name" => gpu.name = value,
            "PCI Bus ID" => gpu.pci_bus_id = value,
            "Device UUID" => gpu.uuid = value,
            _ => {}
        }
    }
    gpus
}

/// The GPU with id `gpu` in `dcgmi discovery -l` output.
pub(crate) fn find_gpu(discovery: &str, gpu: u32) -> Result<Gpu, XidError> {
    let gpus = parse_discovery(discovery);
    gpus.iter().find(|listed| listed.id == gpu).cloned().ok_or_else(|| XidError::UnknownGpu {
        gpu,
        listed: if gpus.is_empty() {
            "none".to_owned()
        } else {
            gpus.iter().map(|listed| listed.id.to_string()).collect::<Vec<_>>().join(", ")
        },
    })
}

/// The host's DCGM as seen from a container with the host's root filesystem at `host_root`.
#[derive(Debug, Clone)]
pub(crate) struct HostDcgm {
    /// The host's `/` (with pidMode host: `/proc/1/root`).
    pub(crate) host_root: PathBuf,
    /// dcgmi, as a path inside the host root.
    pub(crate) dcgmi: PathBuf,
    /// nv-hostengine's unix socket, as a path inside the host root.
    pub(crate) socket: PathBuf,
    /// How dcgmi runs in the host root: None → this process chroots into it (needs no `chroot` binary in
    /// the image); Some(program) → `program <host root> <dcgmi> …`, like chroot(1) (or a stand-in in tests).
    pub(crate) chroot_program: Option<PathBuf>,
}

impl HostDcgm {
    pub(crate) fn new(
        host_root: PathBuf,
        dcgmi: PathBuf,
        socket: PathBuf,
        chroot_program: Option<PathBuf>,
    ) -> Result<Self, XidError> {
        for (flag, path) in [("--dcgmi", &dcgmi), ("--socket", &socket)] {
            if !path.is_absolute() {
                return Err(XidError::NotAbsolute { flag, path: path.clone() });
            }
        }
        Ok(HostDcgm { host_root, dcgmi, socket, chroot_program })
    }

    /// The command that runs dcgmi with `args` in the host root, as one would type it.
    pub(crate) fn command_line(&self, args: &[String]) -> String {
        let chroot = self.chroot_program.as_deref().unwrap_or(Path::new("chroot"));
        let mut words = vec![chroot.display().to_string(), self.host_root.display().to_string()];
        words.push(self.dcgmi.display().to_string());
        words.extend(args.iter().cloned());
        shell_words(&words)
    }

    /// `path` (absolute inside the host root) as seen from here.
    pub(crate) fn on_host(&self, path: &Path) -> PathBuf {
        self.host_root.join(path.strip_prefix("/").unwrap_or(path))
    }

    /// Checks that the host root, dcgmi and nv-hostengine's socket are there, then enters the host root.
    pub(crate) fn enter(&self) -> Result<EnteredHost<'_>, XidError> {
        let root = &self.host_root;
        match std::fs::metadata(root) {
            Ok(found) if found.is_dir() => {}
            Ok(_) => return Err(XidError::HostRootMissing(root.clone(), std::io::Error::other("not a directory"))),
            Err(error) => return Err(XidError::HostRootMissing(root.clone(), error)),
        }
        // Inside the host root, absolute symlinks point elsewhere from here: the entry itself is what counts.
        if std::fs::symlink_metadata(self.on_host(&self.dcgmi)).is_err() {
            return Err(XidError::DcgmiMissing { host_root: root.clone(), dcgmi: self.dcgmi.clone() });
        }
        let socket = std::fs::symlink_metadata(self.on_host(&self.socket))
            .map_err(|_| XidError::SocketMissing { host_root: root.clone(), socket: self.socket.clone() })?;
        if !(socket.file_type().is_socket() || socket.file_type().is_symlink()) {
            return Err(XidError::NotASocket { host_root: root.clone(), socket: self.socket.clone() });
        }
        if self.chroot_program.is_none() {
            std::os::unix::fs::chroot(root)
                .and_then(|()| std::env::set_current_dir("/"))
                .map_err(|e| XidError::CannotEnter(root.clone(), e))?;
        }
        Ok(EnteredHost { host: self })
    }
}

/// The host's DCGM after [`HostDcgm::enter`]: dcgmi can run.
#[derive(Debug)]
pub(crate) struct EnteredHost<'a> {
    host: &'a HostDcgm,
}

impl EnteredHost<'_> {
    /// Runs dcgmi with `args` in the host root and returns what it printed; an error unless it exits 0.
    pub(crate) async fn dcgmi(&self, args: &[String]) -> Result<String, XidError> {
        let host = self.host;
        let command = host.command_line(args);
        let mut process = match &host.chroot_program {
            Some(chroot) => {
                let mut process = tokio::process::Command::new(chroot);
                process.arg(&host.host_root).arg(&host.dcgmi);
                process
            }
            None => tokio::process::Command::new(&host.dcgmi),
        };
        process.args(args).stdin(Stdio::null()).kill_on_drop(true);
        let output = match tokio::time::timeout(DCGMI_TIMEOUT, process.output()).await {
            Ok(Ok(output)) => output,
            Ok(Err(source)) => return Err(XidError::CannotRun { command, source }),
            Err(_) => {
                let status = format!("no answer within {} s", DCGMI_TIMEOUT.as_secs());
                return Err(XidError::DcgmiFailed { command, status, output: String::new() });
            }
        };
        let printed = [&output.stdout, &output.stderr]
            .map(|bytes| String::from_utf8_lossy(bytes).trim().to_owned())
            .into_iter()
            .filter(|text| !text.is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        if output.status.success() {
            Ok(printed)
        } else {
            Err(XidError::DcgmiFailed { command, status: output.status.to_string(), output: printed })
        }
    }
}

/// Joins `words` into one shell command line, quoting those that need it.
pub fn shell_words(words: &[String]) -> String {
    let mut line = String::new();
    for word in words {
        if !line.is_empty() {
            line.push(' ');
        }
        let plain = !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c));
        if plain {
            line.push_str(word);
        } else {
            let _ = write!(line, "'{}'", word.replace('\'', r"'\''"));
        }
    }
    line
}
