//! scripts/deploy.sh and scripts/destroy.sh for real, against a recording stand-in for the AWS CLI
//! (tests/support/aws-cli/aws, first on PATH): the calls of a first deploy in their order, what a failed image
//! build or stack update leaves switched off, a rerun that creates nothing and builds nothing for the same
//! source, the bucket rules, and destroy with and without --delete-data. Each test runs the scripts from a git
//! checkout of their own (a copy of the files they read), so edits elsewhere in the tree do not move the image
//! tag under a test.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const ACCOUNT: &str = "123456789012";
const REGION: &str = "us-west-2";
/// What deploy.sh creates when no bucket is named: <stack>-artifacts-<account>-<region>, in the account
/// regional namespace (suffix -an), which only this account can create names in (S3 User Guide, "Namespaces
/// for general purpose buckets").
const BUCKET: &str = "gpuinfer-artifacts-123456789012-us-west-2-an";
const SOURCE_FILES: &[&str] =
    &["scripts/deploy.sh", "scripts/destroy.sh", "template.yaml", "Cargo.toml", "buildspec.yml", "Dockerfile"];

/// vCPUs of running On-Demand G instances that fit one g6e.xlarge (4) and one g6e.48xlarge (192).
const ENOUGH_GPU_VCPUS: u32 = 196;

/// One recorded `aws` call.
#[derive(Debug, Clone)]
struct Call {
    argv: Vec<String>,
    env: serde_json::Map<String, Value>,
    exit: i64,
}

impl Call {
    fn is(&self, service: &str, operation: &str) -> bool {
        let words: Vec<&str> = self.positionals();
        words.first() == Some(&service) && words.get(1) == Some(&operation)
    }

    /// argv without the global options and their values.
    fn positionals(&self) -> Vec<&str> {
        let mut words = Vec::new();
        let mut args = self.argv.iter();
        while let Some(arg) = args.next() {
            if matches!(arg.as_str(), "--region" | "--profile" | "--output" | "--query") {
                args.next();
            } else if !arg.starts_with("--") {
                words.push(arg.as_str());
            } else {
                break;
            }
        }
        words
    }

    /// The values after `--name` (up to the next option).
    fn values(&self, name: &str) -> Vec<&str> {
        let flag = format!("--{name}");
        match self.argv.iter().position(|a| *a == flag) {
            Some(at) => self.argv[at + 1..].iter().take_while(|a| !a.starts_with("--")).map(String::as_str).collect(),
            None => Vec::new(),
        }
    }

    fn has(&self, flag: &str) -> bool {
        self.argv.iter().any(|a| a == flag)
    }

    fn opt(&self, name: &str) -> Option<&str> {
        self.values(name).first().copied()
    }

    fn overrides(&self) -> HashMap<&str, &str> {
        self.values("parameter-overrides").into_iter().filter_map(|kv| kv.split_once('=')).collect()
    }

    fn line(&self) -> String {
        format!("{} (exit {})", self.argv.join(" "), self.exit)
    }
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    calls: Vec<Call>,
}

impl Run {
    fn index(&self, what: &str, test: impl Fn(&Call) -> bool) -> usize {
        self.calls.iter().position(test).unwrap_or_else(|| panic!("no call {what} in:\n{}", self.transcript()))
    }

    fn all(&self, service: &str, operation: &str) -> Vec<&Call> {
        self.calls.iter().filter(|c| c.is(service, operation)).collect()
    }

    fn none(&self, service: &str, operation: &str) {
        assert!(self.all(service, operation).is_empty(), "unexpected {service} {operation}:\n{}", self.transcript());
    }

    fn transcript(&self) -> String {
        let calls: Vec<String> = self.calls.iter().map(Call::line).collect();
        format!("calls:\n{}\nstdout:\n{}\nstderr:\n{}", calls.join("\n"), self.stdout, self.stderr)
    }
}

/// A checkout of the files the scripts read, the stand-in's state and call log, and a bin folder that puts the
/// real python3 first on PATH (a version manager's shim would cost a third of a second per call).
pub(crate) struct Journey {
    dir: tempfile::TempDir,
}

impl Journey {
    pub(crate) fn new(seed: Value) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        for file in SOURCE_FILES {
            let target = repo.join(file);
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::copy(Path::new(ROOT).join(file), target).unwrap();
        }
        let journey = Journey { dir };
        journey.git(&["init", "-q"]);
        journey.git(&["add", "-A"]);
        journey.git(&["commit", "-q", "-m", "the source"]);
        let mut seed = seed;
        // An account whose GPU quota fits one task of each tier, unless the journey says otherwise.
        if seed.get("quotas").is_none() {
            seed["quotas"] = serde_json::json!({ "L-DB2E81BA": ENOUGH_GPU_VCPUS });
        }
        std::fs::write(journey.state_path(), serde_json::to_vec_pretty(&seed).unwrap()).unwrap();
        let bin = journey.dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let python = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output();
        let python = python.expect("python3 runs the AWS CLI stand-in");
        std::os::unix::fs::symlink(String::from_utf8(python.stdout).unwrap().trim(), bin.join("python3")).unwrap();
        journey
    }

    /// The folder holding the checkout (repo/), the stand-in's state and log, and bin/.
    pub(crate) fn root(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    pub(crate) fn state_path(&self) -> PathBuf {
        self.dir.path().join("state.json")
    }

    pub(crate) fn log_path(&self) -> PathBuf {
        self.dir.path().join("calls.jsonl")
    }

    fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(["-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "init.defaultBranch=main"])
            .args(args)
            .current_dir(self.repo())
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_INDEX_FILE")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    fn calls(&self) -> Vec<Call> {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        text.lines()
            .map(|line| {
                let v: Value = serde_json::from_str(line).unwrap();
                Call {
                    argv: v["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect(),
                    env: v["env"].as_object().unwrap().clone(),
                    exit: v["exit"].as_i64().unwrap(),
                }
            })
            .collect()
    }

    /// Runs scripts/<script> with AWS_* cleared (the test command sets AWS_REGION), no terminal on stdin,
    /// polls that do not wait, and the stand-in first on PATH; the calls it made.
    fn run(&self, script: &str, args: &[&str]) -> Run {
        self.run_with(script, args, &[])
    }

    fn run_with(&self, script: &str, args: &[&str], envs: &[(&str, &str)]) -> Run {
        let before = self.calls().len();
        let path = format!(
            "{}:{ROOT}/tests/support/aws-cli:{}",
            self.dir.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut command = Command::new(self.repo().join("scripts").join(script));
        for (name, _) in std::env::vars().filter(|(k, _)| k.starts_with("AWS_") || k.starts_with("GIT_")) {
            command.env_remove(name);
        }
        let out = command
            .args(args)
            .current_dir(self.dir.path())
            .env("PATH", path)
            .env("GPUINFER_AWS_STANDIN_STATE", self.state_path())
            .env("GPUINFER_AWS_STANDIN_LOG", self.log_path())
            .env("GPUINFER_DEPLOY_POLL_SECONDS", "0")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let run = Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            calls: self.calls().split_off(before),
        };
        // 252 is the CLI refusing its command line (an unknown operation or option): a typo in a script. The one
        // refusal a script expects is an older CLI's to --bucket-namespace, which it then does without.
        let refused: Vec<String> = run
            .calls
            .iter()
            .filter(|c| c.exit == 252 && !(c.is("s3api", "create-bucket") && c.opt("bucket-namespace").is_some()))
            .map(Call::line)
            .collect();
        assert!(refused.is_empty(), "the AWS CLI refused {refused:?}\n{}", run.transcript());
        run
    }

    fn deploy(&self, args: &[&str]) -> Run {
        let mut all = vec!["--stack", "gpuinfer", "--region", REGION];
        all.extend_from_slice(args);
        self.run("deploy.sh", &all)
    }

    pub(crate) fn state(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.state_path()).unwrap()).unwrap()
    }

    fn edit_state(&self, edit: impl FnOnce(&mut Value)) {
        let mut state = self.state();
        edit(&mut state);
        std::fs::write(self.state_path(), serde_json::to_vec(&state).unwrap()).unwrap();
    }

    fn stack(&self) -> Value {
        let stacks = self.state()["stacks"].as_array().unwrap().clone();
        assert_eq!(stacks.len(), 1, "one stack: {stacks:?}");
        stacks[0].clone()
    }

    /// The tag deploy.sh gives the image: v<Cargo.toml version>-<12 hex of the source tree>.
    fn image_tag(&self, tree: &str) -> String {
        let cargo = std::fs::read_to_string(self.repo().join("Cargo.toml")).unwrap();
        let version = cargo.lines().find_map(|l| l.strip_prefix("version = \"")).unwrap().trim_end_matches('"');
        format!("v{version}-{}", &tree[..12])
    }

    fn latest_version(&self, bucket: &str, key: &str) -> String {
        let state = self.state();
        let versions = state["buckets"][bucket]["versions"].as_array().unwrap();
        let latest = versions.iter().rev().find(|v| v["Key"] == key).unwrap_or_else(|| panic!("no {key} in {bucket}"));
        latest["VersionId"].as_str().unwrap().to_owned()
    }
}

fn succeeded(run: &Run) {
    assert_eq!(run.code, 0, "the script failed\n{}", run.transcript());
}

#[test]
fn a_first_deploy_makes_the_bucket_then_the_stack_with_code_off_then_both_builds_then_switches_them_on() {
    let journey = Journey::new(json!({}));
    let run = journey.deploy(&[]);
    succeeded(&run);
    for call in &run.calls[1..] {
        // The Price List Query API answers at us-east-1 (and two other endpoints) for every Region.
        let region = if call.is("pricing", "get-products") { "us-east-1" } else { REGION };
        assert_eq!(call.opt("region"), Some(region), "every call names the Region: {}", call.line());
        assert_eq!(call.opt("profile"), None, "no profile was asked for: {}", call.line());
        // The CLI v2 pipes output through a pager on a terminal; the scripts turn it off.
        assert_eq!(call.env.get("AWS_PAGER"), Some(&json!("")), "no pager: {}", call.line());
    }
    let tag = journey.image_tag(&journey.git(&["rev-parse", "HEAD^{tree}"]));
    let zip_version = journey.latest_version(BUCKET, "gpuinfer/bootstrap.zip");

    let version = run.index("aws --version", |c| c.argv == ["--version"]);
    let identity = run.index("sts get-caller-identity", |c| c.is("sts", "get-caller-identity"));
    let head = run.index("head-bucket", |c| c.is("s3api", "head-bucket") && c.opt("bucket") == Some(BUCKET));
    let create = run.index("create-bucket", |c| c.is("s3api", "create-bucket"));
    let created = &run.calls[create];
    assert_eq!(created.opt("bucket"), Some(BUCKET));
    assert_eq!(created.opt("bucket-namespace"), Some("account-regional"));
    // Outside us-east-1, CreateBucket needs the Region as LocationConstraint.
    assert_eq!(created.opt("create-bucket-configuration"), Some("LocationConstraint=us-west-2"));
    let private = run.index("put-public-access-block", |c| c.is("s3api", "put-public-access-block"));
    let versioned = run.index("put-bucket-versioning", |c| {
        c.is("s3api", "put-bucket-versioning") && c.opt("versioning-configuration") == Some("Status=Enabled")
    });
    for call in [&run.calls[head], &run.calls[private], &run.calls[versioned]] {
        assert_eq!(call.opt("expected-bucket-owner"), Some(ACCOUNT), "{}", call.line());
    }
    let source = run.index("the source upload", |c| {
        c.is("s3api", "put-object") && c.opt("key") == Some("container-source.zip") && c.opt("bucket") == Some(BUCKET)
    });
    let deploys = run.all("cloudformation", "deploy");
    assert_eq!(deploys.len(), 2, "{}", run.transcript());
    let stack_create = run.index("the stack create", |c| c.is("cloudformation", "deploy"));
    let first = deploys[0].overrides();
    assert_eq!(first.get("RouterCodeBuilt"), Some(&"false"));
    assert_eq!(first.get("ImagePushed"), Some(&"false"));
    assert_eq!(first.get("ArtifactBucket"), Some(&BUCKET));
    assert_eq!(first.get("ModelName"), Some(&"TheBloke/Mistral-7B-Instruct-v0.2-AWQ"));
    assert_eq!(first.get("LargeModelName"), Some(&"TheBloke/Llama-2-70B-Chat-AWQ"));
    assert_eq!(first.get("LambdaArchitecture"), Some(&"x86_64"));
    // The template is over the 51,200 bytes CloudFormation takes inline: it goes through the bucket.
    assert_eq!(deploys[0].opt("s3-bucket"), Some(BUCKET));
    assert!(deploys[0].has("--no-fail-on-empty-changeset"));
    assert_eq!(deploys[0].values("capabilities"), ["CAPABILITY_NAMED_IAM"]);
    let router = run.index("the router build", |c| {
        c.is("codebuild", "start-build") && c.opt("project-name") == Some("gpuinfer-router-build")
    });
    let zip = run
        .index("the zip's version", |c| c.is("s3api", "head-object") && c.opt("key") == Some("gpuinfer/bootstrap.zip"));
    let lookup = run.index("the image lookup", |c| c.is("ecr", "describe-images"));
    assert_eq!(run.calls[lookup].opt("image-ids"), Some(format!("imageTag={tag}").as_str()));
    assert_eq!(run.calls[lookup].exit, 254, "ImageNotFoundException on a first deploy");
    let image = run.index("the image build", |c| {
        c.is("codebuild", "start-build") && c.opt("project-name") == Some("gpuinfer-build")
    });
    assert_eq!(
        run.calls[image].opt("environment-variables-override"),
        Some(format!("name=IMAGE_TAG,value={tag},type=PLAINTEXT").as_str())
    );
    let switch_on =
        stack_create + 1 + run.calls[stack_create + 1..].iter().position(|c| c.is("cloudformation", "deploy")).unwrap();
    let last = run.calls[switch_on].overrides();
    assert_eq!(last.get("RouterCodeBuilt"), Some(&"true"));
    assert_eq!(last.get("ImagePushed"), Some(&"true"));
    assert_eq!(last.get("ImageTag"), Some(&tag.as_str()));
    assert_eq!(last.get("RouterCodeVersion"), Some(&zip_version.as_str()));
    let order = [
        version,
        identity,
        head,
        create,
        private,
        versioned,
        source,
        stack_create,
        router,
        zip,
        lookup,
        image,
        switch_on,
    ];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "calls out of order {order:?}\n{}", run.transcript());

    let stack = journey.stack();
    assert_eq!(stack["StackStatus"], "UPDATE_COMPLETE");
    let bucket = &journey.state()["buckets"][BUCKET];
    assert_eq!(bucket["versioning"], "Enabled");
    for setting in ["BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets"] {
        assert_eq!(bucket["public_access_block"][setting], "true", "{setting}");
    }
    let outputs = &stack["Outputs"];
    let api = outputs["InferenceApiUrl"].as_str().unwrap();
    let results = outputs["ResultsApiUrl"].as_str().unwrap();
    // The CLI fetched for this machine when it runs the functions' architecture (x86_64 here), else installed.
    let cli = if std::env::consts::ARCH == "x86_64" { "dist/gpuinfer" } else { "gpuinfer" };
    for printed in [
        api.to_owned(),
        outputs["DashboardUrl"].as_str().unwrap().to_owned(),
        "eval \"$(aws configure export-credentials --format env)\"".to_owned(),
        format!("curl -s \"{api}\" --aws-sigv4 \"aws:amz:{REGION}:execute-api\""),
        "--user \"$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY\"".to_owned(),
        "${AWS_SESSION_TOKEN:+-H \"x-amz-security-token: $AWS_SESSION_TOKEN\"}".to_owned(),
        format!("curl -s \"{results}/<requestId>\""),
        format!("aws s3 cp \"s3://{}/results/<requestId>.json\" -", outputs["ResultsBucketName"].as_str().unwrap()),
        format!("GPUINFER_URL={} {cli} submit --sigv4 --wait", api.trim_end_matches("/infer")),
        format!(
            "{cli} api-key add --secret-id \"{}\" --project my-team",
            outputs["ApiKeysSecretArn"].as_str().unwrap()
        ),
        format!("OpenAI(base_url=\"{}\", api_key=\"sk-...\")", outputs["OpenAiBaseUrl"].as_str().unwrap()),
    ] {
        assert!(run.stdout.contains(&printed), "deploy prints {printed:?}\n{}", run.stdout);
    }
    for n in 1..=7 {
        assert!(run.stdout.contains(&format!("] {n}/7 ")), "a line for step {n}\n{}", run.stdout);
    }
}

#[test]
fn a_failed_image_build_stops_before_the_tiers_are_switched_on_and_prints_the_log_link() {
    // CodeBuild's build statuses: IN_PROGRESS, then one of SUCCEEDED, FAILED, FAULT, STOPPED, TIMED_OUT.
    let journey = Journey::new(json!({ "scenario": { "build_outcome": { "image": "FAILED" } } }));
    let run = journey.deploy(&[]);
    assert_eq!(run.code, 1, "{}", run.transcript());
    let image = run.index("the image build", |c| {
        c.is("codebuild", "start-build") && c.opt("project-name") == Some("gpuinfer-build")
    });
    assert!(
        run.calls[image..].iter().all(|c| !c.is("cloudformation", "deploy")),
        "no stack update after a failed image build\n{}",
        run.transcript()
    );
    assert!(run.all("cloudformation", "deploy").iter().all(|c| c.overrides().get("ImagePushed") != Some(&"true")));
    for printed in [
        "the image build ended FAILED",
        "phase BUILD · FAILED · COMMAND_EXECUTION_ERROR",
        "Build log: https://console.aws.amazon.com/cloudwatch/home?region=us-west-2#logsV2:log-groups/log-group//aws/codebuild/gpuinfer-build",
    ] {
        assert!(run.stderr.contains(printed), "prints {printed:?}\n{}", run.stderr);
    }
    let stack = journey.stack();
    assert_eq!(stack["Parameters"]["ImagePushed"], "false");
    assert_eq!(stack["Parameters"]["RouterCodeBuilt"], "false");
}

#[test]
fn a_failed_stack_update_prints_the_failing_resource_and_its_reason_and_rolls_back() {
    let reason = "Resource handler returned message: \"Invalid request provided: capacity provider is not ready\"";
    let journey = Journey::new(json!({ "scenario": { "stack_failure": {
        "when": { "ImagePushed": "true" }, "logical_id": "LargeService", "reason": reason } } }));
    let run = journey.deploy(&[]);
    assert_eq!(run.code, 1, "{}", run.transcript());
    let events = run.index("describe-stack-events", |c| c.is("cloudformation", "describe-stack-events"));
    assert!(run.calls[events].opt("query").unwrap().contains("ends_with(ResourceStatus, '_FAILED')"));
    assert!(run.stderr.contains(&format!("LargeService UPDATE_FAILED: {reason}")), "{}", run.stderr);
    assert!(run.stderr.contains("the stack update failed"), "{}", run.stderr);
    let stack = journey.stack();
    assert_eq!(stack["StackStatus"], "UPDATE_ROLLBACK_COMPLETE");
    assert_eq!(stack["Parameters"]["ImagePushed"], "false", "the rollback keeps the tiers off");
}

#[test]
fn a_rerun_creates_nothing_and_builds_nothing_for_the_same_source_and_a_change_ships_new_code_and_image() {
    let journey = Journey::new(json!({}));
    succeeded(&journey.deploy(&[]));
    let first = journey.stack();
    let tag = journey.image_tag(&journey.git(&["rev-parse", "HEAD^{tree}"]));

    let again = journey.deploy(&[]);
    succeeded(&again);
    again.none("s3api", "create-bucket");
    again.none("s3api", "put-bucket-versioning");
    // ECR's versioned tags are immutable: a second push of the tag would fail the build, so none is started.
    again.none("codebuild", "start-build");
    let lookup = again.index("the image lookup", |c| c.is("ecr", "describe-images"));
    assert_eq!(again.calls[lookup].exit, 0);
    let deploys = again.all("cloudformation", "deploy");
    let keep = deploys[0].overrides();
    assert_eq!(keep.get("RouterCodeBuilt"), Some(&"true"), "the update before the builds keeps the code on");
    assert_eq!(keep.get("ImagePushed"), Some(&"true"));
    assert_eq!(keep.get("ImageTag"), Some(&tag.as_str()));
    assert!(again.stdout.contains("No changes to deploy"), "{}", again.stdout);
    let second = journey.stack();
    assert_eq!(second["StackId"], first["StackId"], "the same stack, updated");
    assert_eq!(second["Parameters"], first["Parameters"]);

    // An uncommitted change to a tracked file ships: a new zip version and a new image tag.
    let buildspec = journey.repo().join("buildspec.yml");
    let mut text = std::fs::read_to_string(&buildspec).unwrap();
    text.push_str("# a change\n");
    std::fs::write(&buildspec, text).unwrap();
    let changed = journey.deploy(&[]);
    succeeded(&changed);
    changed.none("s3api", "create-bucket");
    assert!(changed.stdout.contains("with your uncommitted changes"), "{}", changed.stdout);
    let stash = journey.git(&["stash", "create"]);
    let new_tag = journey.image_tag(&journey.git(&["rev-parse", &format!("{stash}^{{tree}}")]));
    assert_ne!(new_tag, tag);
    let image = changed.index("the image build", |c| c.opt("project-name") == Some("gpuinfer-build"));
    assert_eq!(
        changed.calls[image].opt("environment-variables-override"),
        Some(format!("name=IMAGE_TAG,value={new_tag},type=PLAINTEXT").as_str())
    );
    changed.index("the router build", |c| c.opt("project-name") == Some("gpuinfer-router-build"));
    let third = journey.stack();
    assert_eq!(third["StackId"], first["StackId"]);
    assert_eq!(third["Parameters"]["ImageTag"], new_tag.as_str());
    assert_ne!(third["Parameters"]["RouterCodeVersion"], first["Parameters"]["RouterCodeVersion"]);
    assert_eq!(
        third["Parameters"]["RouterCodeVersion"],
        journey.latest_version(BUCKET, "gpuinfer/bootstrap.zip").as_str()
    );
}

/// A release rolls the GPU services once: an update that changes a task definition starts a rolling deployment
/// (ECS UpdateService: "a new deployment is triggered" by a new task definition), and so does a new image tag. On an
/// update deploy.sh builds the image on the stack's build project first, then applies template and tag in one
/// update; the switch after the zip build changes neither. A failed early build leaves the stack untouched and names
/// --template-first (the old order: the template before the builds) for a release that changes the build project.
#[test]
fn a_release_rolls_the_gpu_services_once_onto_template_and_image_together() {
    let journey = Journey::new(json!({}));
    succeeded(&journey.deploy(&[]));
    let release = |note: &str| {
        let cargo = std::fs::read_to_string(journey.repo().join("Cargo.toml")).unwrap();
        std::fs::write(journey.repo().join("Cargo.toml"), format!("{cargo}\n# {note}\n")).unwrap();
        let stash = journey.git(&["stash", "create"]);
        journey.image_tag(&journey.git(&["rev-parse", &format!("{stash}^{{tree}}")]))
    };
    let image_build = |c: &Call| c.opt("project-name") == Some("gpuinfer-build");

    let tag = release("a release");
    let run = journey.deploy(&[]);
    succeeded(&run);
    let built = run.index("the image build", image_build);
    let update = run.index("the update", |c| c.is("cloudformation", "deploy"));
    assert!(built < update, "the image is built before the update\n{}", run.transcript());
    let deploys = run.all("cloudformation", "deploy");
    assert_eq!(deploys[0].overrides().get("ImageTag"), Some(&tag.as_str()), "{}", deploys[0].line());
    assert_eq!(deploys.last().unwrap().overrides().get("ImageTag"), Some(&tag.as_str()), "the switch rolls nothing");
    assert_eq!(journey.stack()["Parameters"]["ImageTag"], tag.as_str());

    let before = journey.stack()["Parameters"].clone();
    let failing = release("a failing release");
    journey.edit_state(|state| state["scenario"]["build_outcome"] = json!({"image": "FAILED"}));
    let failed = journey.deploy(&[]);
    assert_eq!(failed.code, 1, "{}", failed.transcript());
    failed.none("cloudformation", "deploy");
    assert!(failed.stderr.contains("--template-first"), "{}", failed.stderr);
    assert_eq!(journey.stack()["Parameters"], before, "the stack is untouched");

    journey.edit_state(|state| state["scenario"]["build_outcome"] = json!({}));
    let run = journey.deploy(&["--template-first"]);
    succeeded(&run);
    let update = run.index("the update", |c| c.is("cloudformation", "deploy"));
    assert!(update < run.index("the image build", image_build), "--template-first: the old order");
    assert_eq!(run.all("cloudformation", "deploy")[0].overrides().get("ImageTag"), Some(&tag.as_str()));
    assert_eq!(journey.stack()["Parameters"]["ImageTag"], failing.as_str());
}

/// A new --lambda-architecture on a live stack changes nothing the functions run until their zip for it is built:
/// the update before the builds keeps the stack's architecture (AWS::Lambda::Function Architectures and Code are one
/// pair: a zip of the other architecture does not start), the zip is built natively on a CodeBuild host of the new
/// one (StartBuild environmentTypeOverride, imageOverride: template.yaml's RouterBuild environments), and the switch
/// sets architecture and zip version together. A failed zip build leaves the stack on its old pair.
#[test]
fn a_new_lambda_architecture_reaches_the_functions_only_with_its_zip() {
    let journey = Journey::new(json!({}));
    succeeded(&journey.deploy(&[]));
    let first = journey.stack();
    assert_eq!(first["Parameters"]["LambdaArchitecture"], "x86_64");
    std::fs::write(journey.repo().join("Cargo.toml"), read_root("Cargo.toml") + "\n# arm64 now\n").unwrap();
    journey.edit_state(|state| state["scenario"]["build_outcome"] = json!({"router": "FAILED"}));
    let failed = journey.deploy(&["--lambda-architecture", "arm64"]);
    assert_eq!(failed.code, 1, "{}", failed.transcript());
    let update = &failed.all("cloudformation", "deploy")[0];
    assert_eq!(update.overrides().get("LambdaArchitecture"), None, "{}", update.line());
    let stack = journey.stack();
    assert_eq!(
        (&stack["Parameters"]["LambdaArchitecture"], &stack["Parameters"]["RouterCodeVersion"]),
        (&first["Parameters"]["LambdaArchitecture"], &first["Parameters"]["RouterCodeVersion"]),
        "the functions keep the pair they ran"
    );

    journey.edit_state(|state| state["scenario"]["build_outcome"] = json!({}));
    let run = journey.deploy(&["--lambda-architecture", "arm64"]);
    succeeded(&run);
    let build = &run.calls[run.index("the zip build", |c| c.opt("project-name") == Some("gpuinfer-router-build"))];
    let template = read_root("template.yaml");
    for flag in ["environment-type-override", "image-override"] {
        let value = build.opt(flag).unwrap_or_else(|| panic!("--{flag}: {}", build.line()));
        assert!(template.contains(value), "{value} is the RouterBuild environment template.yaml gives arm64");
    }
    assert_eq!(build.opt("environment-type-override"), Some("ARM_CONTAINER"));
    let deploys = run.all("cloudformation", "deploy");
    assert_eq!(deploys[0].overrides().get("LambdaArchitecture"), None, "{}", deploys[0].line());
    let switch = deploys.last().unwrap().overrides();
    assert_eq!(switch.get("LambdaArchitecture"), Some(&"arm64"));
    let stack = journey.stack();
    assert_eq!(stack["Parameters"]["LambdaArchitecture"], "arm64");
    assert_eq!(
        stack["Parameters"]["RouterCodeVersion"],
        journey.latest_version(BUCKET, "gpuinfer/bootstrap.zip").as_str()
    );
}

/// A user without Rust gets the gpuinfer CLI: the Lambda build's static binary (every subcommand) is also put at
/// `gpuinfer-cli/gpuinfer-linux-<arch>` in the artifact bucket, and deploy.sh fetches it to dist/gpuinfer on a
/// Linux machine of the functions' architecture, naming it in the closing commands (`api-key add`, `submit`);
/// elsewhere it prints the command that fetches it, and `cargo install`.
#[test]
fn a_deploy_leaves_the_gpuinfer_cli_for_this_machine() {
    let host = std::env::consts::ARCH.replace("aarch64", "arm64");
    let other = if host == "x86_64" { "arm64" } else { "x86_64" };
    let journey = Journey::new(json!({}));
    let run = journey.deploy(&["--lambda-architecture", &host]);
    succeeded(&run);
    let cli = journey.repo().join("dist/gpuinfer");
    let ran = Command::new(&cli).arg("--help").output().expect("dist/gpuinfer runs");
    assert_eq!(String::from_utf8_lossy(&ran.stdout), format!("gpuinfer for linux-{host} --help\n"));
    for line in ["dist/gpuinfer api-key add --secret-id", "dist/gpuinfer submit --sigv4"] {
        assert!(run.stdout.contains(line), "{line}\n{}", run.stdout);
    }

    let elsewhere = Journey::new(json!({}));
    let run = elsewhere.deploy(&["--lambda-architecture", other]);
    succeeded(&run);
    assert!(!elsewhere.repo().join("dist/gpuinfer").exists());
    for words in
        [format!("s3://{BUCKET}/gpuinfer-cli/gpuinfer-linux-{other}"), "cargo install --locked --path .".into()]
    {
        assert!(run.stdout.contains(&words), "{words}\n{}", run.stdout);
    }
}

fn read_root(file: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(file)).unwrap()
}

/// A tracked file whose stat data changed but whose content did not (a `touch`, an editor's save, a copied
/// checkout): git 2.47's `git stash create` exits 1 and prints nothing while the index still holds the old stat
/// data. deploy.sh refreshes the index first; what it ships is HEAD, with no uncommitted changes.
/// The GPU quota is read before anything is made (Service Quotas, GetServiceQuota: ec2, L-DB2E81BA "Running
/// On-Demand G and VT instances", in vCPUs): below one small task's g6e.xlarge the deploy stops naming the quota,
/// its value and the request that raises it; below one of each tier's it warns that large requests wait; a caller
/// the API refuses is told what to allow or to skip; --skip-quota-check reads nothing.
#[test]
fn the_gpu_quota_is_checked_before_anything_is_made() {
    let created =
        |run: &Run| run.calls.iter().any(|c| c.is("s3api", "create-bucket") || c.is("cloudformation", "deploy"));
    let zero = Journey::new(json!({"quotas": {"L-DB2E81BA": 0}}));
    let run = zero.deploy(&[]);
    assert_eq!(run.code, 1, "{}", run.transcript());
    assert!(!created(&run), "nothing is made: {}", run.transcript());
    for words in [
        "\"Running On-Demand G and VT instances\" (L-DB2E81BA) is 0 vCPUs in us-west-2",
        "aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-DB2E81BA --desired-value 196",
    ] {
        assert!(run.stderr.contains(words), "{words:?} in\n{}", run.stderr);
    }
    let asked = &run.calls[run.index("get-service-quota", |c| c.is("service-quotas", "get-service-quota"))];
    assert_eq!((asked.opt("service-code"), asked.opt("quota-code")), (Some("ec2"), Some("L-DB2E81BA")));

    let small_only = Journey::new(json!({"quotas": {"L-DB2E81BA": 64}}));
    let run = small_only.deploy(&[]);
    succeeded(&run);
    assert!(
        run.stdout.contains("warning: the GPU quota") && run.stdout.contains("large requests wait"),
        "{}",
        run.stdout
    );

    let denied = Journey::new(json!({"scenario": {"quotas_denied": true}}));
    let run = denied.deploy(&[]);
    assert_eq!(run.code, 1);
    assert!(!created(&run));
    assert!(
        run.stderr.contains("AccessDeniedException") && run.stderr.contains("--skip-quota-check"),
        "{}",
        run.stderr
    );
    let run = denied.deploy(&["--skip-quota-check"]);
    succeeded(&run);
    run.none("service-quotas", "get-service-quota");

    // A tier switched off (most tasks 0) needs no quota: 64 vCPUs are enough with the large tier off, and too few
    // with only the large tier on.
    let small_on = Journey::new(json!({"quotas": {"L-DB2E81BA": 64}}));
    let run = small_on.deploy(&["--parameter", "LargeModelMaxTaskCount=0"]);
    succeeded(&run);
    assert!(
        !run.stdout.contains("warning: the GPU quota") && run.stdout.contains("each tier on it takes 4"),
        "{}",
        run.stdout
    );
    let large_only = Journey::new(json!({"quotas": {"L-DB2E81BA": 64}}));
    let run = large_only.deploy(&["--parameter", "MaxTaskCount=0"]);
    assert_eq!(run.code, 1, "{}", run.transcript());
    assert!(run.stderr.contains("is 64 vCPUs in us-west-2: a tier on it could not start"), "{}", run.stderr);
}

/// Spot instances count against a quota of their own, "All G and VT Spot Instance Requests" (Service Quotas, service
/// ec2, L-3819A6DF), not the On-Demand one: a tier on spot is checked against it, and refused below its instance's
/// vCPUs before anything is made; a tier on spot-with-fallback needs both, its On-Demand side only to fall back (a
/// shortfall there is a warning). `--capacity` sets each tier's choice.
#[test]
fn a_tier_on_spot_is_checked_against_the_spot_quota_and_its_fallback_against_on_demand() {
    let created =
        |run: &Run| run.calls.iter().any(|c| c.is("s3api", "create-bucket") || c.is("cloudformation", "deploy"));
    let no_spot = Journey::new(json!({"quotas": {"L-DB2E81BA": 196, "L-3819A6DF": 0}}));
    let run = no_spot.deploy(&["--capacity", "small=spot"]);
    assert_eq!(run.code, 1, "{}", run.transcript());
    assert!(!created(&run), "nothing is made: {}", run.transcript());
    assert!(run.stderr.contains("\"All G and VT Spot Instance Requests\" (L-3819A6DF) is 0 vCPUs"), "{}", run.stderr);
    assert!(run.stderr.contains("--quota-code L-3819A6DF --desired-value 4"), "{}", run.stderr);

    let spot_only = Journey::new(json!({"quotas": {"L-DB2E81BA": 0, "L-3819A6DF": 196}}));
    let run = spot_only.deploy(&["--capacity", "small=spot-with-fallback", "--capacity", "large=spot"]);
    succeeded(&run);
    assert!(run.stdout.contains("no On-Demand fallback can start"), "{}", run.stdout);
    let asked: Vec<&str> =
        run.all("service-quotas", "get-service-quota").iter().filter_map(|c| c.opt("quota-code")).collect();
    assert_eq!(asked, ["L-DB2E81BA", "L-3819A6DF"]);
    let stack = spot_only.stack();
    assert_eq!(
        (&stack["Parameters"]["SmallCapacity"], &stack["Parameters"]["LargeCapacity"]),
        (&json!("spot-with-fallback"), &json!("spot"))
    );

    let run = spot_only.deploy(&["--capacity", "medium=spot"]);
    assert_eq!(run.code, 2, "{}", run.transcript());
    assert!(run.stderr.contains("--capacity 'medium=spot'"), "{}", run.stderr);
}

/// Before anything is made, the deploy says what a tier costs while it runs: each tier's instance at its On-Demand
/// hourly price in the stack's Region, from the AWS Price List Query API (GetProducts, asked at us-east-1, one of its
/// three endpoints, for the product with the Region's code), and that a request to an idle tier starts one. A price
/// it cannot read is unknown, with the pricing page; the deploy goes on.
#[test]
fn the_deploy_says_what_each_tier_costs_while_it_runs() {
    let journey = Journey::new(json!({"prices": {"g6e.xlarge": "1.5", "g6e.48xlarge": "20.25"}}));
    let run = journey.deploy(&[]);
    succeeded(&run);
    for line in [
        "cost: a small-tier task runs on a g6e.xlarge, On-Demand $1.5/h in us-west-2 while it runs; a request to the idle tier starts one",
        "cost: a large-tier task runs on a g6e.48xlarge, On-Demand $20.25/h in us-west-2",
    ] {
        assert!(run.stdout.contains(line), "{line}\n{}", run.stdout);
    }
    let asked = run.all("pricing", "get-products");
    assert_eq!(asked.len(), 2);
    for call in &asked {
        assert_eq!(call.opt("region"), Some("us-east-1"), "{}", call.line());
        assert!(
            call.values("filters").contains(&"Type=TERM_MATCH,Field=regionCode,Value=us-west-2"),
            "{}",
            call.line()
        );
    }
    let creates = run.index("the stack's create", |c| c.is("cloudformation", "deploy"));
    let priced = run.calls.iter().rposition(|c| c.is("pricing", "get-products")).unwrap();
    assert!(priced < creates, "said before anything is made");

    let unknown = Journey::new(json!({}));
    let run = unknown.deploy(&[]);
    succeeded(&run);
    assert!(
        run.stdout.contains("On-Demand (price unknown: https://aws.amazon.com/ec2/pricing/on-demand/)"),
        "{}",
        run.stdout
    );
}

#[test]
fn a_touched_tracked_file_with_unchanged_content_does_not_stop_the_deploy_and_ships_head() {
    let journey = Journey::new(json!({}));
    let head = journey.git(&["rev-parse", "--short", "HEAD"]);
    let tree = journey.git(&["rev-parse", "HEAD^{tree}"]);
    // A day back: the index's mtime for the file no longer matches; its content does. No git command runs
    // between this and the deploy (git status would refresh the index).
    let file = std::fs::File::options().write(true).open(journey.repo().join("buildspec.yml")).unwrap();
    file.set_modified(SystemTime::now() - Duration::from_secs(86_400)).unwrap();
    drop(file);
    let run = journey.deploy(&[]);
    succeeded(&run);
    let uploaded = format!("container-source.zip: {head} (tree {})", &tree[..12]);
    assert!(run.stdout.contains(&uploaded), "ships HEAD as it is: {uploaded:?}\n{}", run.stdout);
    assert!(!run.stdout.contains("uncommitted changes"), "{}", run.stdout);
    let image = run.index("the image build", |c| c.opt("project-name") == Some("gpuinfer-build"));
    let tag = journey.image_tag(&tree);
    assert_eq!(
        run.calls[image].opt("environment-variables-override"),
        Some(format!("name=IMAGE_TAG,value={tag},type=PLAINTEXT").as_str())
    );
}

#[test]
fn a_bucket_name_another_account_owns_stops_the_deploy_before_anything_is_made() {
    let journey =
        Journey::new(json!({ "buckets": { "taken-artifacts": { "owner": "999999999999", "versions": [] } } }));
    let run = journey.deploy(&["--artifact-bucket", "taken-artifacts"]);
    assert_eq!(run.code, 1, "{}", run.transcript());
    // HeadBucket with --expected-bucket-owner answers 403 for a bucket of another account.
    let head = run.index("head-bucket", |c| c.is("s3api", "head-bucket"));
    assert_eq!(run.calls[head].opt("expected-bucket-owner"), Some(ACCOUNT));
    assert!(run.stderr.contains("taken by another account"), "{}", run.stderr);
    assert!(run.stderr.contains("Pass --artifact-bucket NAME"), "{}", run.stderr);
    run.none("s3api", "create-bucket");
    run.none("s3api", "put-object");
    run.none("cloudformation", "deploy");
}

#[test]
fn an_older_cli_gets_a_global_bucket_name_and_us_east_1_gets_no_location_constraint_and_a_profile_reaches_every_call() {
    let journey = Journey::new(json!({ "supports_bucket_namespace": false, "profiles": ["default", "dev"] }));
    let run = journey.run("deploy.sh", &["--region", "us-east-1", "--profile", "dev"]);
    succeeded(&run);
    let global = "gpuinfer-artifacts-123456789012-us-east-1";
    let creates = run.all("s3api", "create-bucket");
    assert_eq!(creates.len(), 2, "the account regional name first, then the global one\n{}", run.transcript());
    assert_eq!(creates[1].opt("bucket"), Some(global));
    // CreateBucket in us-east-1 takes no LocationConstraint (S3 refuses one).
    assert_eq!(creates[1].opt("create-bucket-configuration"), None);
    assert_eq!(creates[1].opt("bucket-namespace"), None);
    assert_eq!(journey.stack()["Parameters"]["ArtifactBucket"], global);
    for call in &run.calls[1..] {
        assert_eq!(call.opt("profile"), Some("dev"), "{}", call.line());
    }
    assert!(run.stdout.contains("aws configure export-credentials --profile dev --format env"), "{}", run.stdout);
    assert!(run.stdout.contains("AWS_PROFILE=dev AWS_REGION=us-east-1 GPUINFER_URL="), "{}", run.stdout);
}

#[test]
fn a_stack_left_in_rollback_complete_is_reported_and_not_touched() {
    // A stack whose first create rolled back (ROLLBACK_COMPLETE) cannot be updated, only deleted: deploy.sh
    // leaves that to destroy.sh, which asks first.
    let stack_id = "arn:aws:cloudformation:us-west-2:123456789012:stack/gpuinfer/1";
    let reason = "Resource handler returned message: \"The maximum number of VPCs has been reached.\"";
    let journey = Journey::new(json!({ "stacks": [{
        "StackName": "gpuinfer", "StackId": stack_id, "StackStatus": "ROLLBACK_COMPLETE",
        "CreationTime": "2026-01-01T00:00:00Z", "Parameters": {}, "Resources": {}, "Outputs": {},
        "Events": [{ "StackId": stack_id, "EventId": "1", "StackName": "gpuinfer", "LogicalResourceId": "Vpc",
                     "ResourceType": "AWS::EC2::VPC", "Timestamp": "2026-01-01T00:01:00Z",
                     "ResourceStatus": "CREATE_FAILED", "ResourceStatusReason": reason }] }] }));
    let run = journey.deploy(&[]);
    assert_eq!(run.code, 1, "{}", run.transcript());
    assert!(run.stderr.contains(&format!("Vpc CREATE_FAILED: {reason}")), "{}", run.stderr);
    assert!(run.stderr.contains("scripts/destroy.sh --stack gpuinfer --region us-west-2"), "{}", run.stderr);
    run.none("s3api", "create-bucket");
    run.none("cloudformation", "deploy");
    run.none("cloudformation", "delete-stack");
    assert_eq!(journey.stack()["StackStatus"], "ROLLBACK_COMPLETE");
}

/// A stack with more than 50 events. deploy.sh reads its failed events with `describe-stack-events --max-items
/// 50 --output text --query …`; when --max-items leaves events out, the AWS CLI ends its text output with the
/// resume token: run through --query, a line `None` (aws/aws-cli issues 7277 and 10449), or as it is,
/// `NEXTTOKEN<tab><token>` (CLIs with aws/aws-cli pull request 10486). The stand-in prints either; the list
/// holds the failed resource and nothing else.
#[test]
fn deploy_lists_the_failed_resource_of_a_stack_with_more_than_50_events_and_no_pagination_line() {
    let stack_id = "arn:aws:cloudformation:us-west-2:123456789012:stack/gpuinfer/1";
    let reason = "Resource handler returned message: \"The maximum number of VPCs has been reached.\"";
    let rollback = "The following resource(s) failed to create: [Vpc]. ";
    let mut events = created_events(stack_id, 30);
    for (logical, kind, status, why) in [
        ("Vpc", "AWS::EC2::VPC", "CREATE_FAILED", reason),
        ("gpuinfer", "AWS::CloudFormation::Stack", "ROLLBACK_IN_PROGRESS", rollback),
        ("gpuinfer", "AWS::CloudFormation::Stack", "ROLLBACK_COMPLETE", ""),
    ] {
        events.push(event(stack_id, events.len(), logical, kind, status, why));
    }
    assert!(events.len() > 50);
    for hint in ["queried", "raw"] {
        let journey = Journey::new(json!({ "resume_hint": hint, "stacks": [{
            "StackName": "gpuinfer", "StackId": stack_id, "StackStatus": "ROLLBACK_COMPLETE",
            "CreationTime": "2026-01-01T00:00:00Z", "Parameters": {}, "Resources": {}, "Outputs": {},
            "Events": events }] }));
        let run = journey.deploy(&[]);
        assert_eq!(run.code, 1, "{}", run.transcript());
        let listed = failed_events(&run.stderr);
        assert_eq!(listed, [format!("  Vpc CREATE_FAILED: {reason}")], "resume hint {hint}\n{}", run.stderr);
        assert!(run.stderr.contains("Failed stack events (newest first):"), "{}", run.stderr);
        run.none("cloudformation", "deploy");
    }
}

/// What the stand-in keeps of a stack whose `resources` resources were each created (CREATE_IN_PROGRESS, then
/// CREATE_COMPLETE), oldest first: 2 × resources + 1 events with the stack's own CREATE_IN_PROGRESS.
fn created_events(stack_id: &str, resources: usize) -> Vec<Value> {
    let mut events =
        vec![event(stack_id, 0, "gpuinfer", "AWS::CloudFormation::Stack", "CREATE_IN_PROGRESS", "User Initiated")];
    for i in 0..resources {
        for status in ["CREATE_IN_PROGRESS", "CREATE_COMPLETE"] {
            events.push(event(stack_id, events.len(), &format!("Resource{i}"), "AWS::SSM::Parameter", status, ""));
        }
    }
    events
}

/// One stack event as DescribeStackEvents answers it (no ResourceStatusReason when `reason` is empty).
fn event(stack_id: &str, n: usize, logical: &str, kind: &str, status: &str, reason: &str) -> Value {
    let mut event = json!({ "StackId": stack_id, "EventId": format!("event-{n}"), "StackName": "gpuinfer",
                            "LogicalResourceId": logical, "ResourceType": kind,
                            "Timestamp": format!("2026-01-01T00:{:02}:{:02}Z", n / 60 % 60, n % 60),
                            "ResourceStatus": status });
    if !reason.is_empty() {
        event["ResourceStatusReason"] = json!(reason);
    }
    event
}

/// The failed-events lines a script printed: indented by two spaces (a step's details are indented by four).
fn failed_events(stderr: &str) -> Vec<String> {
    stderr.lines().filter(|l| l.starts_with("  ") && !l.starts_with("   ")).map(str::to_owned).collect()
}

#[test]
fn bad_command_lines_are_refused_with_usage_before_any_aws_call() {
    let journey = Journey::new(json!({}));
    for args in [
        &["--bogus"][..],
        &["--lambda-architecture", "sparc"],
        &["--parameter", "ImagePushed=true"],
        &["--parameter", "not-a-pair"],
        // S3 bucket names: 3-63 lower-case letters, digits, dots and hyphens.
        &["--artifact-bucket", "Not_A_Bucket"],
        &["--stack", "9lives"],
        &["--region"],
    ] {
        let run = journey.run("deploy.sh", args);
        assert_eq!(run.code, 2, "deploy.sh {args:?}\n{}", run.transcript());
        assert!(run.stderr.contains("Usage: scripts/deploy.sh"), "{args:?}: {}", run.stderr);
        assert!(run.calls.is_empty(), "{args:?}\n{}", run.transcript());
    }
    let run = journey.run("destroy.sh", &["--bogus"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("Usage: scripts/destroy.sh"), "{}", run.stderr);

    let help = journey.run("deploy.sh", &["--help"]);
    assert_eq!(help.code, 0);
    for flag in [
        "--stack",
        "--region",
        "--profile",
        "--model",
        "--large-model",
        "--alarm-email",
        "--lambda-architecture",
        "--artifact-bucket",
        "--parameter",
        "GPUINFER_DEPLOY_POLL_SECONDS",
    ] {
        assert!(help.stdout.contains(flag), "--help explains {flag}");
    }

    // No Region anywhere: not from a flag, the environment or the profile.
    let run = journey.run("deploy.sh", &[]);
    assert_eq!(run.code, 2, "{}", run.transcript());
    assert!(run.stderr.contains("pass --region"), "{}", run.stderr);
    run.none("sts", "get-caller-identity");
}

/// `cloudformation deploy` builds the change set's parameters from the template's and drops any override the
/// template does not declare, without a word (merge_parameters in the AWS CLI's
/// awscli/customizations/cloudformation/deploy.py; the stand-in does the same): a misspelt --parameter would
/// deploy as if it were not given. deploy.sh checks every key it would pass, the user's and its own, against
/// template.yaml's Parameters before any AWS call.
#[test]
fn an_unknown_parameter_key_is_refused_with_the_close_names_before_any_aws_call() {
    let journey = Journey::new(json!({}));
    let run = journey.deploy(&["--parameter", "MaxTaskCont=4"]);
    assert_eq!(run.code, 2, "{}", run.transcript());
    assert!(run.calls.is_empty(), "{}", run.transcript());
    for printed in [
        "deploy: --parameter MaxTaskCont=4: template.yaml has no parameter MaxTaskCont",
        "(did you mean MaxTaskCount or MinTaskCount?)",
        "cloudformation deploy would drop it without a word",
        "Usage: scripts/deploy.sh",
    ] {
        assert!(run.stderr.contains(printed), "prints {printed:?}\n{}", run.stderr);
    }

    // Every parameter the template declares and deploy.sh does not set itself is taken (at its Default here).
    let script = std::fs::read_to_string(Path::new(ROOT).join("scripts/deploy.sh")).unwrap();
    let managed = script.lines().find_map(|l| l.strip_prefix("MANAGED_PARAMETERS=\"")).expect("MANAGED_PARAMETERS=");
    let managed: Vec<&str> = managed.trim_end_matches('"').split_whitespace().collect();
    let template = crate::support::cfn::template();
    let declared = template["Parameters"].as_object().unwrap();
    for key in &managed {
        assert!(declared.contains_key(*key), "deploy.sh sets {key}, which template.yaml does not declare");
    }
    let mut args = Vec::new();
    for (key, spec) in declared.iter().filter(|(key, _)| !managed.contains(&key.as_str())) {
        let default = match &spec["Default"] {
            Value::String(s) => s.clone(),
            Value::Null => continue,
            other => other.to_string(),
        };
        args.push("--parameter".to_owned());
        args.push(format!("{key}={default}"));
    }
    assert!(args.len() > 40, "{args:?}");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    succeeded(&journey.deploy(&args));

    // A template without a parameter deploy.sh sets: the script and the template disagree; nothing is called.
    let other = Journey::new(json!({}));
    let path = other.repo().join("template.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut kept = Vec::new();
    let mut skipping = false;
    for line in text.lines() {
        skipping = line == "  AlarmEmail:" || (skipping && (line.starts_with("    ") || line.is_empty()));
        if !skipping {
            kept.push(line);
        }
    }
    std::fs::write(&path, kept.join("\n") + "\n").unwrap();
    let run = other.deploy(&[]);
    assert_eq!(run.code, 1, "{}", run.transcript());
    assert!(run.calls.is_empty(), "{}", run.transcript());
    assert!(run.stderr.contains("template.yaml has no parameter AlarmEmail"), "{}", run.stderr);
}

#[test]
fn destroy_without_delete_data_deletes_the_stack_only_and_lists_what_is_kept() {
    let journey = Journey::new(json!({}));
    succeeded(&journey.deploy(&[]));
    let kept = journey.stack()["Resources"].clone();
    let results = kept["ResultsBucket"]["id"].as_str().unwrap().to_owned();
    journey.edit_state(|state| add_versions(state, &results, 3, 1));

    // Not on a terminal and no --yes: nothing is deleted.
    let refused = journey.run("destroy.sh", &["--region", REGION]);
    assert_eq!(refused.code, 2, "{}", refused.transcript());
    assert!(refused.stderr.contains("pass --yes"), "{}", refused.stderr);
    refused.none("cloudformation", "delete-stack");

    let run = journey.run("destroy.sh", &["--region", REGION, "--yes"]);
    succeeded(&run);
    let delete = run.index("delete-stack", |c| c.is("cloudformation", "delete-stack"));
    let reads = run.all("cloudformation", "describe-stack-resources");
    assert_eq!(reads.len(), 7, "one read per retained resource, the cluster and its services\n{}", run.transcript());
    let last_read = run.calls.iter().rposition(|c| c.is("cloudformation", "describe-stack-resources")).unwrap();
    assert!(last_read < delete, "the retained resources' ids are read before the delete");
    for (service, operation) in [
        ("s3api", "delete-objects"),
        ("s3api", "delete-bucket"),
        ("ecr", "delete-repository"),
        ("kms", "schedule-key-deletion"),
    ] {
        run.none(service, operation);
    }
    let state = journey.state();
    assert_eq!(state["stacks"][0]["StackStatus"], "DELETE_COMPLETE");
    assert_eq!(state["buckets"][&results]["versions"].as_array().unwrap().len(), 4, "the results are kept");
    let report = run.stdout.split("kept, and still billed").nth(1).expect("a list of what is kept");
    for id in ["ResultsBucket", "AccessLogsBucket", "Repository", "LogsKey"] {
        assert!(report.contains(kept[id]["id"].as_str().unwrap()), "lists {id}\n{report}");
    }
    let cluster = kept["Cluster"]["id"].as_str().unwrap();
    assert!(report.contains(&format!("/aws/ecs/containerinsights/{cluster}/performance")), "{report}");
    for printed in [
        format!("s3://{results}: 3 object versions, 300 bytes, 1 delete markers"),
        format!("s3://{BUCKET} (made by deploy.sh)"),
        "1 images, up to 9.2 GiB".to_owned(),
        "$1/month".to_owned(),
        "https://aws.amazon.com/kms/pricing/, read 2026-12-02".to_owned(),
        "https://aws.amazon.com/s3/pricing/".to_owned(),
        "https://aws.amazon.com/ecr/pricing/".to_owned(),
        "--delete-data".to_owned(),
    ] {
        assert!(report.contains(&printed), "prints {printed:?}\n{report}");
    }
}

#[test]
fn destroy_with_delete_data_deletes_every_version_a_thousand_at_a_time_and_schedules_the_key() {
    let journey = Journey::new(json!({}));
    succeeded(&journey.deploy(&[]));
    let kept = journey.stack()["Resources"].clone();
    let results = kept["ResultsBucket"]["id"].as_str().unwrap().to_owned();
    let logs = kept["AccessLogsBucket"]["id"].as_str().unwrap().to_owned();
    journey.edit_state(|state| {
        add_versions(state, &results, 2300, 5);
        add_versions(state, &logs, 10, 0);
    });
    let run = journey.run("destroy.sh", &["--stack", "gpuinfer", "--region", REGION, "--yes", "--delete-data"]);
    succeeded(&run);
    let delete_stack = run.index("delete-stack", |c| c.is("cloudformation", "delete-stack"));
    let batches: Vec<&Call> =
        run.all("s3api", "delete-objects").into_iter().filter(|c| c.opt("bucket") == Some(&results)).collect();
    // 2,305 versions and delete markers; DeleteObjects takes up to 1,000 keys a request (the stand-in refuses
    // more with MalformedXML, as S3 does).
    assert_eq!(batches.len(), 3, "{}", run.transcript());
    let first_batch = run.index("a delete-objects", |c| c.is("s3api", "delete-objects"));
    assert!(delete_stack < first_batch, "the stack goes first");
    for listing in
        run.all("s3api", "list-object-versions").iter().filter(|c| c.opt("query").unwrap().contains("Objects"))
    {
        assert!(listing.has("--no-paginate") && listing.opt("max-keys") == Some("1000"));
    }
    // ScheduleKeyDeletion takes a waiting period of 7 to 30 days (the stand-in refuses others, as KMS does).
    let key = run.index("schedule-key-deletion", |c| c.is("kms", "schedule-key-deletion"));
    assert_eq!(run.calls[key].opt("pending-window-in-days"), Some("7"));
    assert_eq!(run.calls[key].opt("key-id"), kept["LogsKey"]["id"].as_str());
    let repository = run.index("delete-repository", |c| c.is("ecr", "delete-repository"));
    assert!(run.calls[repository].has("--force"));

    let state = journey.state();
    assert_eq!(state["buckets"], json!({}), "results, access-log and artifact buckets are gone");
    assert_eq!(state["repositories"], json!({}));
    let key_state = &state["keys"][kept["LogsKey"]["id"].as_str().unwrap()];
    assert_eq!(key_state["KeyState"], "PendingDeletion");
    let date = key_state["DeletionDate"].as_str().unwrap();
    assert!(run.stdout.contains(&format!("KMS deletes it on {date}")), "{}", run.stdout);
    assert!(run.stdout.contains("nothing of stack gpuinfer is left"), "{}", run.stdout);

    // Again, later: the stack and its data are gone, so there is nothing to do.
    let again = journey.run("destroy.sh", &["--region", REGION, "--yes", "--delete-data"]);
    succeeded(&again);
    again.none("s3api", "delete-objects");
    again.none("kms", "schedule-key-deletion");
}

/// A stack whose GPU tiers run: ECS cannot take a capacity provider with Managed Instances registered off its
/// cluster (PutClusterCapacityProviders: ResourceInUseException), so a delete made at once fails on the stack's
/// ClusterCapacity. destroy.sh first caps each tier's scaling target at 0 (RegisterScalableTarget, so a queued
/// message cannot scale it up again), sets each service to 0 tasks (UpdateService), and waits until
/// ListContainerInstances finds none; then the delete succeeds. With --delete-data, the Container Insights
/// performance log group ECS made for the cluster (which the stack does not own) goes too.
#[test]
fn destroy_stops_the_gpu_tiers_and_waits_for_their_instances_before_the_delete() {
    let journey = Journey::new(json!({"scenario": {"gpu_instances": 2, "wake_during_drain": 1}}));
    succeeded(&journey.deploy(&[]));
    let kept = journey.stack()["Resources"].clone();
    let cluster = kept["Cluster"]["id"].as_str().unwrap().to_owned();
    let run = journey.run("destroy.sh", &["--region", REGION, "--yes", "--delete-data"]);
    succeeded(&run);
    let delete = run.index("delete-stack", |c| c.is("cloudformation", "delete-stack"));
    for service in ["SmallService", "LargeService"] {
        let arn = kept[service]["id"].as_str().unwrap();
        let name = arn.rsplit('/').next().unwrap();
        let capped = run.index("the scaling target capped", |c| {
            c.is("application-autoscaling", "register-scalable-target")
                && c.opt("resource-id") == Some(&format!("service/{cluster}/{name}"))
        });
        let target = &run.calls[capped];
        assert_eq!((target.opt("min-capacity"), target.opt("max-capacity")), (Some("0"), Some("0")));
        let stopped = run.index("the service at 0", |c| c.is("ecs", "update-service") && c.opt("service") == Some(arn));
        assert_eq!(run.calls[stopped].opt("desired-count"), Some("0"));
        assert!(capped < stopped && stopped < delete, "{}", run.transcript());
    }
    // The router's wake set a tier back to 1 during the wait: each look stops both services again.
    let listings = run.all("ecs", "list-container-instances");
    assert_eq!(listings.len(), 2, "two instances leave, one a listing, the woken tier stopped again");
    assert_eq!(run.all("ecs", "update-service").len(), 2 * listings.len(), "{}", run.transcript());
    let last_listing = run.calls.iter().rposition(|c| c.is("ecs", "list-container-instances")).unwrap();
    assert!(last_listing < delete);
    let group = format!("/aws/ecs/containerinsights/{cluster}/performance");
    let deleted = run.index("the log group", |c| c.is("logs", "delete-log-group"));
    assert_eq!(run.calls[deleted].opt("log-group-name"), Some(group.as_str()));
    assert_eq!(journey.state()["log_groups"], json!({}), "no log group of the stack is left");
    assert!(run.stdout.contains("nothing of stack gpuinfer is left"), "{}", run.stdout);

    // The same stack deleted at once: the delete fails on the capacity providers, and says so.
    let hasty = Journey::new(json!({"scenario": {"gpu_instances": 2}}));
    succeeded(&hasty.deploy(&[]));
    let run = hasty.run_with("destroy.sh", &["--region", REGION, "--yes"], &[("GPUINFER_DESTROY_DRAIN_SECONDS", "0")]);
    assert_eq!(run.code, 1, "{}", run.transcript());
    assert!(run.stderr.contains("ClusterCapacity DELETE_FAILED") && run.stderr.contains("in use"), "{}", run.stderr);
}

/// A stack with more than 50 events whose delete fails: destroy.sh lists the failed events from
/// `describe-stack-events --max-items 50 --output text --query …`, whose output ends with the CLI's resume token
/// when events were left out (a `None` line through --query, aws/aws-cli issues 7277 and 10449; or
/// `NEXTTOKEN<tab><token>`, aws/aws-cli pull request 10486). The list holds the failed resource, the stack's own
/// DELETE_FAILED, and nothing else.
#[test]
fn destroy_lists_the_failed_resources_of_a_stack_with_more_than_50_events_and_no_pagination_line() {
    let reason = "Resource handler returned message: \"resource sg-0123456789abcdef0 has a dependent object \
                  (Service: Ec2, Status Code: 400, Request ID: 5e2b0c55-0000-4000-8000-000000000000)\"";
    for hint in ["queried", "raw"] {
        let journey = Journey::new(json!({ "resume_hint": hint }));
        succeeded(&journey.deploy(&[]));
        journey.edit_state(|state| {
            let stack = &mut state["stacks"][0];
            let stack_id = stack["StackId"].as_str().unwrap().to_owned();
            let events = stack["Events"].as_array_mut().unwrap();
            let older = created_events(&stack_id, 30);
            events.splice(0..0, older);
            state["scenario"]["delete_failure"] = json!({ "logical_id": "TaskSecurityGroup", "reason": reason });
        });
        assert!(journey.stack()["Events"].as_array().unwrap().len() > 50);
        let run = journey.run("destroy.sh", &["--region", REGION, "--yes"]);
        assert_eq!(run.code, 1, "{}", run.transcript());
        assert_eq!(
            failed_events(&run.stderr),
            [
                "  gpuinfer DELETE_FAILED: The following resource(s) failed to delete: [TaskSecurityGroup]. "
                    .to_owned(),
                format!("  TaskSecurityGroup DELETE_FAILED: {reason}"),
            ],
            "resume hint {hint}\n{}",
            run.stderr
        );
        assert!(run.stderr.contains("deleting stack gpuinfer failed; no data was deleted"), "{}", run.stderr);
        assert_eq!(journey.stack()["StackStatus"], "DELETE_FAILED");
    }
}

#[test]
fn destroy_handles_every_resource_the_template_retains() {
    let template = crate::support::cfn::template();
    let mut retained: Vec<String> = crate::support::cfn::resources(&template)
        .filter(|(_, r)| r["DeletionPolicy"] == "Retain")
        .map(|(id, _)| id.clone())
        .collect();
    retained.sort();
    let script = std::fs::read_to_string(Path::new(ROOT).join("scripts/destroy.sh")).unwrap();
    let line = script.lines().find_map(|l| l.strip_prefix("RETAINED=(")).expect("RETAINED=(…) in destroy.sh");
    let mut handled: Vec<String> = line.trim_end_matches(')').split_whitespace().map(str::to_owned).collect();
    handled.sort();
    assert_eq!(handled, retained, "destroy.sh must read, report and delete every DeletionPolicy: Retain resource");
}

#[test]
fn the_stand_in_refuses_what_the_cli_refuses() {
    let journey = Journey::new(json!({}));
    let aws = format!("{ROOT}/tests/support/aws-cli/aws");
    let run = |args: &[&str]| {
        let mut command = Command::new(&aws);
        for (name, _) in std::env::vars().filter(|(k, _)| k.starts_with("AWS_")) {
            command.env_remove(name);
        }
        command
            .args(args)
            .env("GPUINFER_AWS_STANDIN_STATE", journey.state_path())
            .env("GPUINFER_AWS_STANDIN_LOG", journey.log_path())
            .output()
            .unwrap()
    };
    let typo = run(&["--region", REGION, "s3api", "head-buckets", "--bucket", "b"]);
    assert_eq!(typo.status.code(), Some(252));
    assert!(String::from_utf8_lossy(&typo.stderr).contains("argument operation: Invalid choice"));
    let option = run(&["--region", REGION, "s3api", "head-bucket", "--bukcet", "b"]);
    assert_eq!(option.status.code(), Some(252));
    assert!(String::from_utf8_lossy(&option.stderr).contains("Unknown options: --bukcet"));
    let service = run(&["--region", REGION, "ec2", "describe-vpcs"]);
    assert_eq!(service.status.code(), Some(252));
    let missing = run(&["--region", REGION, "s3api", "head-bucket", "--bucket", "nobody-has-this"]);
    assert_eq!(missing.status.code(), Some(254));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("(404) when calling the HeadBucket operation"));
    let no_region = run(&["sts", "get-caller-identity"]);
    assert_eq!(no_region.status.code(), Some(253));
    // --max-items and --starting-token drive the CLI's own paginator, which --no-paginate turns off.
    let paging = run(&[
        "--region",
        REGION,
        "--no-paginate",
        "cloudformation",
        "describe-stack-events",
        "--stack-name",
        "gpuinfer",
        "--max-items",
        "50",
    ]);
    assert_eq!(paging.status.code(), Some(252));
    assert!(
        String::from_utf8_lossy(&paging.stderr)
            .contains("Cannot specify --no-paginate along with pagination arguments: --max-items")
    );
    assert_eq!(journey.calls().len(), 6, "every call is recorded, refused ones too");
}

/// Adds `versions` object versions of 100 bytes and `markers` delete markers to a bucket of the stand-in.
fn add_versions(state: &mut Value, bucket: &str, versions: usize, markers: usize) {
    let list = state["buckets"][bucket]["versions"].as_array_mut().unwrap();
    for i in 0..versions {
        list.push(json!({ "Key": format!("results/{i}.json"), "VersionId": format!("v{i}"), "IsLatest": true,
                          "Size": 100, "ETag": "\"0\"", "LastModified": "2026-01-01T00:00:00Z" }));
    }
    for i in 0..markers {
        list.push(json!({ "Key": format!("results/{i}.json"), "VersionId": format!("m{i}"), "IsLatest": true,
                          "LastModified": "2026-01-02T00:00:00Z", "DeleteMarker": true }));
    }
}
