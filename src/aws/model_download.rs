//! Model download: an S3 prefix to a local folder with parallel ranged GETs across and within files,
//! resumable per part, verified by size and (for single-part uploads) by the ETag's MD5.

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use aws_sdk_s3::error::ProvideErrorMetadata;
use md5::{Digest, Md5};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::aws::s3::S3Location;
use crate::infra::error_chain::describe;

/// How a download runs.
#[derive(Debug, Clone)]
pub struct FetchConfig {
    /// Ranged GETs in flight at once, across all files.
    pub concurrency: usize,
    /// Bytes per ranged GET.
    pub part_size: u64,
    /// Report progress on a terminal line (else a log line every `log_every`).
    pub interactive: bool,
    pub log_every: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("bucket {0} does not exist (check MODEL_S3_PATH)")]
    NoSuchBucket(String),
    #[error("nothing under s3://{0}/{1} (check MODEL_S3_PATH; it should end in the model's folder)")]
    EmptyPrefix(String, String),
    #[error(
        "access denied to s3://{0}/{1}: the task role needs s3:ListBucket on the bucket and s3:GetObject on the prefix"
    )]
    AccessDenied(String, String),
    #[error("{0}: {1}")]
    S3(String, String),
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("{path}: downloaded {got} bytes, S3 says {expected}")]
    SizeMismatch { path: PathBuf, got: u64, expected: u64 },
    #[error("{path}: MD5 {got} does not match the ETag {expected}; the partial file was removed, run again")]
    ChecksumMismatch { path: PathBuf, got: String, expected: String },
}

/// One object to bring down.
#[derive(Debug, Clone)]
struct RemoteFile {
    key: String,
    relative: String,
    size: u64,
    etag: Option<String>,
}

/// What a finished download did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FetchSummary {
    pub(crate) files: usize,
    pub(crate) skipped: usize,
    pub bytes_downloaded: u64,
}

/// Downloads every object under `source` into `dest`, keeping the layout below the prefix.
pub async fn fetch(
    client: &Client,
    source: &S3Location,
    dest: &Path,
    config: &FetchConfig,
) -> Result<FetchSummary, FetchError> {
    let files = list(client, source).await?;
    let total: u64 = files.iter().map(|f| f.size).sum();
    let mut summary = FetchSummary { files: files.len(), ..FetchSummary::default() };
    let mut pending = Vec::new();
    for file in files {
        if is_complete(&dest.join(&file.relative), file.size) {
            summary.skipped += 1;
        } else {
            pending.push(file);
        }
    }
    let progress = Progress::new(total, config);
    let skipped_bytes = total - pending.iter().map(|f| f.size).sum::<u64>();
    progress.done.fetch_add(skipped_bytes, Ordering::Relaxed);
    let slots = Arc::new(Semaphore::new(config.concurrency.max(1)));
    let reporter = progress.spawn_reporter();
    let mut downloads = JoinSet::new();
    for file in pending {
        let (client, source, dest) = (client.clone(), source.clone(), dest.to_owned());
        let (slots, progress, part_size) = (Arc::clone(&slots), progress.clone(), config.part_size.max(1));
        downloads
            .spawn(async move { download(&client, &source.bucket, &file, &dest, part_size, slots, progress).await });
    }
    let mut first_error = None;
    while let Some(joined) = downloads.join_next().await {
        match joined {
            Ok(Ok(bytes)) => summary.bytes_downloaded += bytes,
            Ok(Err(error)) => {
                downloads.abort_all();
                first_error.get_or_insert(error);
            }
            Err(join) if join.is_cancelled() => {}
            Err(join) => {
                first_error.get_or_insert(FetchError::Io(dest.to_owned(), std::io::Error::other(join.to_string())));
            }
        }
    }
    reporter.abort();
    progress.finish();
    first_error.map_or(Ok(summary), Err)
}

async fn list(client: &Client, source: &S3Location) -> Result<Vec<RemoteFile>, FetchError> {
    let mut files = Vec::new();
    let mut pages = client.list_objects_v2().bucket(&source.bucket).prefix(&source.prefix).into_paginator().send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| match e.code() {
            Some("NoSuchBucket") => FetchError::NoSuchBucket(source.bucket.clone()),
            Some("AccessDenied") => FetchError::AccessDenied(source.bucket.clone(), source.prefix.clone()),
            _ => FetchError::S3(format!("listing s3://{}/{}", source.bucket, source.prefix), describe(&e)),
        })?;
        for object in page.contents.unwrap_or_default() {
            let Some(key) = object.key else { continue };
            let relative = key.strip_prefix(&source.prefix).unwrap_or(&key).trim_start_matches('/').to_owned();
            if relative.is_empty() || relative.ends_with('/') || relative.split('/').any(|part| part == "..") {
                continue;
            }
            let size = u64::try_from(object.size.unwrap_or(0)).unwrap_or(0);
            let etag = object.e_tag.map(|t| t.trim_matches('"').to_owned());
            files.push(RemoteFile { key, relative, size, etag });
        }
    }
    if files.is_empty() {
        return Err(FetchError::EmptyPrefix(source.bucket.clone(), source.prefix.clone()));
    }
    Ok(files)
}

fn is_complete(path: &Path, size: u64) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == size)
}

/// Where an unfinished file and its list of finished parts live, beside the final name.
fn partial_paths(target: &Path) -> (PathBuf, PathBuf) {
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    (target.with_file_name(format!("{name}.partial")), target.with_file_name(format!("{name}.partial.parts")))
}

/// Downloads the parts of one file not yet recorded as done, then verifies and renames it into place.
async fn download(
    client: &Client,
    bucket: &str,
    file: &RemoteFile,
    dest: &Path,
    part_size: u64,
    slots: Arc<Semaphore>,
    progress: Progress,
) -> Result<u64, FetchError> {
    let target = dest.join(&file.relative);
    let (partial, parts_log) = partial_paths(&target);
    let io = |path: &Path| {
        let path = path.to_owned();
        move |e| FetchError::Io(path, e)
    };
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    let done = finished_parts(&parts_log);
    let output = Arc::new(
        std::fs::OpenOptions::new().create(true).write(true).truncate(false).open(&partial).map_err(io(&partial))?,
    );
    output.set_len(file.size).map_err(io(&partial))?;
    let log = Arc::new(std::sync::Mutex::new(
        std::fs::OpenOptions::new().create(true).append(true).open(&parts_log).map_err(io(&parts_log))?,
    ));
    let part_count = file.size.div_ceil(part_size);
    let mut parts = JoinSet::new();
    let mut downloaded = 0;
    for index in (0..part_count).filter(|i| !done.contains(i)) {
        let start = index * part_size;
        let end = (start + part_size).min(file.size) - 1;
        downloaded += end - start + 1;
        let (client, bucket, key) = (client.clone(), bucket.to_owned(), file.key.clone());
        let (output, log, slots, progress, partial) =
            (Arc::clone(&output), Arc::clone(&log), Arc::clone(&slots), progress.clone(), partial.clone());
        parts.spawn(async move {
            let _slot =
                slots.acquire_owned().await.map_err(|e| FetchError::Io(partial.clone(), std::io::Error::other(e)))?;
            fetch_range(&client, &bucket, &key, start, end, &output, &progress, &partial).await?;
            let mut log = log.lock().map_err(|_| FetchError::Io(partial.clone(), std::io::Error::other("lock")))?;
            writeln!(log, "{index}").map_err(|e| FetchError::Io(partial.clone(), e))
        });
    }
    while let Some(joined) = parts.join_next().await {
        joined.map_err(|e| FetchError::Io(partial.clone(), std::io::Error::other(e.to_string())))??;
    }
    output.sync_all().map_err(io(&partial))?;
    if let Err(error) = verify(&partial, file) {
        let _ = std::fs::remove_file(&partial);
        let _ = std::fs::remove_file(&parts_log);
        return Err(error);
    }
    std::fs::rename(&partial, &target).map_err(io(&target))?;
    let _ = std::fs::remove_file(&parts_log);
    Ok(downloaded)
}

#[allow(clippy::too_many_arguments)]
async fn fetch_range(
    client: &Client,
    bucket: &str,
    key: &str,
    start: u64,
    end: u64,
    output: &std::fs::File,
    progress: &Progress,
    partial: &Path,
) -> Result<(), FetchError> {
    let object = client
        .get_object()
        .bucket(bucket)
        .key(key)
        .range(format!("bytes={start}-{end}"))
        .send()
        .await
        .map_err(|e| FetchError::S3(format!("GET s3://{bucket}/{key} bytes {start}-{end}"), describe(&e)))?;
    let mut body = object.body;
    let mut offset = start;
    while let Some(chunk) =
        body.try_next().await.map_err(|e| FetchError::S3(format!("reading s3://{bucket}/{key}"), e.to_string()))?
    {
        output.write_all_at(&chunk, offset).map_err(|e| FetchError::Io(partial.to_owned(), e))?;
        offset += chunk.len() as u64;
        progress.done.fetch_add(chunk.len() as u64, Ordering::Relaxed);
    }
    if offset != end + 1 {
        return Err(FetchError::SizeMismatch {
            path: partial.to_owned(),
            got: offset - start,
            expected: end - start + 1,
        });
    }
    Ok(())
}

fn finished_parts(parts_log: &Path) -> BTreeSet<u64> {
    std::fs::read_to_string(parts_log)
        .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// Size always; content too when the ETag is a plain MD5 (objects not uploaded in parts).
fn verify(path: &Path, file: &RemoteFile) -> Result<(), FetchError> {
    let got = std::fs::metadata(path).map_err(|e| FetchError::Io(path.to_owned(), e))?.len();
    if got != file.size {
        return Err(FetchError::SizeMismatch { path: path.to_owned(), got, expected: file.size });
    }
    let Some(expected) = file.etag.as_deref().filter(|e| e.len() == 32 && e.chars().all(|c| c.is_ascii_hexdigit()))
    else {
        return Ok(());
    };
    let got = md5_hex(path)?;
    if got != expected.to_ascii_lowercase() {
        return Err(FetchError::ChecksumMismatch { path: path.to_owned(), got, expected: expected.to_owned() });
    }
    Ok(())
}

fn md5_hex(path: &Path) -> Result<String, FetchError> {
    let mut file = std::fs::File::open(path).map_err(|e| FetchError::Io(path.to_owned(), e))?;
    let mut hasher = Md5::new();
    let mut buffer = vec![0; 1 << 20];
    loop {
        let read = std::io::Read::read(&mut file, &mut buffer).map_err(|e| FetchError::Io(path.to_owned(), e))?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Bytes done out of the total, shown on a terminal line or as periodic log lines.
#[derive(Debug, Clone)]
struct Progress {
    done: Arc<AtomicU64>,
    total: u64,
    started: Instant,
    interactive: bool,
    every: Duration,
}

impl Progress {
    fn new(total: u64, config: &FetchConfig) -> Self {
        Progress {
            done: Arc::new(AtomicU64::new(0)),
            total,
            started: Instant::now(),
            interactive: config.interactive,
            every: if config.interactive { Duration::from_millis(200) } else { config.log_every },
        }
    }

    fn spawn_reporter(&self) -> tokio::task::JoinHandle<()> {
        let progress = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(progress.every).await;
                progress.report();
            }
        })
    }

    fn line(&self) -> String {
        let done = self.done.load(Ordering::Relaxed);
        let seconds = self.started.elapsed().as_secs_f64().max(0.001);
        let percent = if self.total == 0 { 100.0 } else { done as f64 * 100.0 / self.total as f64 };
        format!(
            "{:.1} / {:.1} MiB ({percent:.0}%), {:.1} MiB/s",
            done as f64 / 1_048_576.0,
            self.total as f64 / 1_048_576.0,
            done as f64 / 1_048_576.0 / seconds
        )
    }

    fn report(&self) {
        if self.interactive {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\rfetch-model: {}   ", self.line());
            let _ = err.flush();
        } else {
            tracing::info!(progress = %self.line(), "fetching the model");
        }
    }

    fn finish(&self) {
        if self.interactive {
            let _ = writeln!(std::io::stderr().lock(), "\rfetch-model: {}   ", self.line());
        }
    }
}
