//! `gpuinfer fetch-model` against moto S3: layout, parallel parts, skip, resume, verification, clear errors.

use std::process::Command;
use std::time::Duration;

use crate::support::moto;
use gpuinfer::{FetchConfig, FetchError, S3Location, fetch_model};

/// Deterministic bytes, different for every file and offset.
fn content(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[i % 4] ^ seed).collect()
}

async fn upload(bucket: &str, files: &[(&str, Vec<u8>)]) {
    let s3 = moto::s3().await;
    for (key, bytes) in files {
        s3.put_object().bucket(bucket).key(*key).body(bytes.clone().into()).send().await.unwrap();
    }
}

fn config(part_size: u64) -> FetchConfig {
    FetchConfig { concurrency: 8, part_size, interactive: false, log_every: Duration::from_secs(60) }
}

#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn the_cli_downloads_a_prefix_in_parts_and_skips_what_is_complete() {
    let bucket = moto::bucket(&moto::unique("models")).await;
    let files = [
        ("mistral/config.json", content(1, 700)),
        ("mistral/weights/model-00001.safetensors", content(2, 5 * 1024 * 1024 + 123)),
        ("mistral/weights/model-00002.safetensors", content(3, 2 * 1024 * 1024)),
        ("mistral/empty.txt", Vec::new()),
        ("other/not-this.bin", content(4, 10)),
    ];
    upload(&bucket, &files).await;
    let dest = tempfile::tempdir().unwrap();
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_gpuinfer"))
            .args([
                "fetch-model",
                &format!("s3://{bucket}/mistral/"),
                dest.path().to_str().unwrap(),
                "--part-size-mib",
                "1",
            ])
            .envs(moto::child_env())
            .output()
            .unwrap()
    };
    let first = run();
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    for (key, bytes) in &files[..4] {
        let local = dest.path().join(key.strip_prefix("mistral/").unwrap());
        assert_eq!(&std::fs::read(&local).unwrap(), bytes, "{key}");
    }
    assert!(!dest.path().join("not-this.bin").exists() && !dest.path().join("other").exists());
    let leftovers: Vec<_> = walk(dest.path()).into_iter().filter(|p| p.contains(".partial")).collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    let weights = dest.path().join("weights/model-00001.safetensors");
    let modified = std::fs::metadata(&weights).unwrap().modified().unwrap();
    let second = run();
    assert!(second.status.success());
    assert_eq!(
        std::fs::metadata(&weights).unwrap().modified().unwrap(),
        modified,
        "complete files are not fetched again"
    );
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("skipped=4"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flat_map(|entry| {
            let path = entry.unwrap().path();
            if path.is_dir() { walk(&path) } else { vec![path.display().to_string()] }
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn an_interrupted_download_resumes_from_its_finished_parts() {
    let bucket = moto::bucket(&moto::unique("resume")).await;
    let bytes = content(9, 4 * 1024 * 1024);
    upload(&bucket, &[("m/w.bin", bytes.clone())]).await;
    let dest = tempfile::tempdir().unwrap();
    // Parts 0 and 2 finished before the interruption; 1 and 3 never arrived (zeros on disk).
    let mut partial = vec![0u8; bytes.len()];
    let mib = 1024 * 1024;
    partial[..mib].copy_from_slice(&bytes[..mib]);
    partial[2 * mib..3 * mib].copy_from_slice(&bytes[2 * mib..3 * mib]);
    std::fs::write(dest.path().join("w.bin.partial"), &partial).unwrap();
    std::fs::write(dest.path().join("w.bin.partial.parts"), "0\n2\n").unwrap();
    let source = S3Location::parse(&format!("s3://{bucket}/m/")).unwrap();
    let summary = fetch_model(&moto::s3().await, &source, dest.path(), &config(mib as u64)).await.unwrap();
    assert_eq!(summary.bytes_downloaded, 2 * mib as u64, "only the two missing parts were fetched");
    assert_eq!(std::fs::read(dest.path().join("w.bin")).unwrap(), bytes);
    assert!(!dest.path().join("w.bin.partial.parts").exists());
}

#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn corrupt_parts_fail_the_md5_check_and_are_discarded() {
    let bucket = moto::bucket(&moto::unique("corrupt")).await;
    let bytes = content(5, 2 * 1024 * 1024);
    upload(&bucket, &[("m/w.bin", bytes.clone())]).await;
    let dest = tempfile::tempdir().unwrap();
    std::fs::write(dest.path().join("w.bin.partial"), vec![7u8; bytes.len()]).unwrap();
    std::fs::write(dest.path().join("w.bin.partial.parts"), "0\n").unwrap();
    let source = S3Location::parse(&format!("s3://{bucket}/m/")).unwrap();
    let error = fetch_model(&moto::s3().await, &source, dest.path(), &config(1024 * 1024)).await.unwrap_err();
    assert!(matches!(error, FetchError::ChecksumMismatch { .. }), "{error}");
    assert!(!dest.path().join("w.bin").exists() && !dest.path().join("w.bin.partial").exists());
    let again = fetch_model(&moto::s3().await, &source, dest.path(), &config(1024 * 1024)).await.unwrap();
    assert_eq!(again.bytes_downloaded, bytes.len() as u64);
    assert_eq!(std::fs::read(dest.path().join("w.bin")).unwrap(), bytes);
}

#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn missing_buckets_and_empty_prefixes_say_what_to_check() {
    let dest = tempfile::tempdir().unwrap();
    let s3 = moto::s3().await;
    let missing = S3Location::parse(&format!("s3://{}/m/", moto::unique("absent"))).unwrap();
    let error = fetch_model(&s3, &missing, dest.path(), &config(1024)).await.unwrap_err();
    assert!(matches!(error, FetchError::NoSuchBucket(_)), "{error}");
    assert!(error.to_string().contains("does not exist (check MODEL_S3_PATH)"));
    let bucket = moto::bucket(&moto::unique("empty")).await;
    let empty = S3Location::parse(&format!("s3://{bucket}/nothing/")).unwrap();
    let error = fetch_model(&s3, &empty, dest.path(), &config(1024)).await.unwrap_err();
    assert!(error.to_string().starts_with(&format!("nothing under s3://{bucket}/nothing/")), "{error}");

    let cli = Command::new(env!("CARGO_BIN_EXE_gpuinfer"))
        .args(["fetch-model", "not-a-uri", "/tmp/x"])
        .envs(moto::child_env())
        .output()
        .unwrap();
    assert!(!cli.status.success());
    assert!(String::from_utf8_lossy(&cli.stderr).contains("an S3 destination starts with s3://"));
}
