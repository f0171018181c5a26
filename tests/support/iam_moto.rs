//! A moto server of a test's own that enforces IAM: a user per role under test, holding that role's policies.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use serde_json::{Value, json};

use super::process::ChildProcess;
use super::{eventually, free_port};

/// The user that creates the fixtures (queues, buckets, the ECS cluster): allowed everything.
pub(crate) const ADMIN: &str = "admin";

#[derive(Debug)]
struct AccessKey {
    id: String,
    secret: String,
}

/// A running moto that checks every request's signature and the signer's policies.
pub(crate) struct IamMoto {
    url: String,
    keys: Vec<(String, AccessKey)>,
    _process: ChildProcess,
}

impl IamMoto {
    /// Starts moto, creates `admin` and each of `users` (name, its policies as (name, document)) with an
    /// access key, and checks that moto then refuses a key it does not know. moto answers the first
    /// INITIAL_NO_AUTH_ACTION_COUNT actions without looking at credentials and enforces IAM from then on, so
    /// the count is exactly the bootstrap's calls: per user CreateUser, one PutUserPolicy per policy and
    /// CreateAccessKey.
    pub(crate) async fn start(users: &[(&str, Vec<(String, Value)>)], log: &Path) -> Self {
        let everything =
            json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]});
        let admin = (ADMIN, vec![("everything".to_owned(), everything)]);
        let all: Vec<(&str, &[(String, Value)])> =
            std::iter::once(&admin).chain(users).map(|(name, policies)| (*name, &policies[..])).collect();
        let calls: usize = all.iter().map(|(_, policies)| policies.len() + 2).sum();

        let server = std::env::var_os("GPUINFER_TEST_MOTO_SERVER").unwrap_or_else(|| {
            panic!(
                "this test needs moto's server binary: run scripts/test.sh, or `scripts/aws-emulator.sh start` and set \
                 GPUINFER_TEST_MOTO_SERVER=~/.cache/gpuinfer/moto-venv/bin/moto_server"
            )
        });
        let port = free_port().to_string();
        let process = ChildProcess::spawn(
            Command::new(server)
                .args(["-H", "127.0.0.1", "-p", &port])
                .env("INITIAL_NO_AUTH_ACTION_COUNT", calls.to_string()),
            log,
        );
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        eventually(Duration::from_secs(30), "the IAM-enforcing moto to answer", || {
            let request = http.get(format!("{url}/moto-api/")).send();
            async move { request.await.ok().filter(|r| r.status().is_success()).map(|_| ()) }
        })
        .await;

        let mut keys = Vec::new();
        for (user, policies) in all {
            unauthenticated_iam(&http, &url, &[("Action", "CreateUser"), ("UserName", user)]).await;
            for (name, document) in policies {
                let document = document.to_string();
                let put = [
                    ("Action", "PutUserPolicy"),
                    ("UserName", user),
                    ("PolicyName", name),
                    ("PolicyDocument", &document),
                ];
                unauthenticated_iam(&http, &url, &put).await;
            }
            let created = unauthenticated_iam(&http, &url, &[("Action", "CreateAccessKey"), ("UserName", user)]).await;
            let key = AccessKey { id: element(&created, "AccessKeyId"), secret: element(&created, "SecretAccessKey") };
            keys.push((user.to_owned(), key));
        }
        let moto = IamMoto { url, keys, _process: process };

        let unknown = aws_sdk_sqs::Client::new(&moto.sdk_signed_by("test", "test").await).list_queues().send().await;
        let status = unknown.as_ref().err().and_then(|e| e.raw_response()).map(|r| r.status().as_u16());
        assert_eq!(
            status,
            Some(403),
            "after {calls} unauthenticated actions moto must refuse an unknown key: {unknown:?}"
        );
        moto
    }

    fn key(&self, user: &str) -> &AccessKey {
        self.keys.iter().find(|(name, _)| name == user).map(|(_, key)| key).unwrap_or_else(|| panic!("no user {user}"))
    }

    /// The access key id `user` signs with.
    pub(crate) fn key_id(&self, user: &str) -> &str {
        &self.key(user).id
    }

    /// SDK configuration signing as `user`.
    pub(crate) async fn sdk(&self, user: &str) -> SdkConfig {
        let key = self.key(user);
        self.sdk_signed_by(&key.id, &key.secret).await
    }

    async fn sdk_signed_by(&self, id: &str, secret: &str) -> SdkConfig {
        aws_config::defaults(BehaviorVersion::latest())
            .endpoint_url(&self.url)
            .region(Region::new(super::cfn::REGION))
            .credentials_provider(aws_sdk_sqs::config::Credentials::new(id, secret, None, None, "iam-moto"))
            .load()
            .await
    }

    pub(crate) async fn s3(&self, user: &str) -> aws_sdk_s3::Client {
        let config = aws_sdk_s3::config::Builder::from(&self.sdk(user).await).force_path_style(true).build();
        aws_sdk_s3::Client::from_conf(config)
    }

    /// Environment of a gpuinfer process signing as `user` (and never reaching AWS).
    pub(crate) fn child_env(&self, user: &str) -> Vec<(String, String)> {
        let key = self.key(user);
        [
            ("AWS_ENDPOINT_URL", self.url.clone()),
            ("AWS_ACCESS_KEY_ID", key.id.clone()),
            ("AWS_SECRET_ACCESS_KEY", key.secret.clone()),
            ("AWS_REGION", super::cfn::REGION.to_owned()),
            ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

/// A policy as moto must hold it to decide as AWS does. AWS authorizes SendMessageBatch, DeleteMessageBatch
/// and ChangeMessageVisibilityBatch as their single actions, moto by their own names: they are added beside
/// the single ones. moto authorizes every ECS and Secrets Manager call against the resource `*`: a statement of one
/// of those services' actions whose resources cover every ARN of that service in `arns` (the ECS services and the
/// secrets the process reads) gets the resource `*`; whether it grants another resource only its document says.
pub(crate) fn as_moto_decides(policy: &Value, arns: &[String]) -> Value {
    let mut policy = policy.clone();
    let statements = match &mut policy["Statement"] {
        Value::Array(statements) => statements.as_mut_slice(),
        single => std::slice::from_mut(single),
    };
    for statement in statements.iter_mut().filter(|s| s.get("Action").is_some()) {
        let mut actions = strings(&statement["Action"]);
        for single in ["sqs:SendMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"] {
            if actions.iter().any(|a| a == single) {
                actions.push(format!("{single}Batch"));
            }
        }
        let resources = strings(&statement["Resource"]);
        let covers = |arn: &&String| resources.iter().any(|pattern| glob_matches(pattern, arn));
        for service in ["ecs", "secretsmanager"] {
            let read: Vec<&String> =
                arns.iter().filter(|arn| arn.starts_with(&format!("arn:aws:{service}:"))).collect();
            let of_service = actions.iter().all(|a| a.starts_with(&format!("{service}:")));
            if of_service && !read.is_empty() && read.iter().all(covers) {
                statement["Resource"] = json!("*");
            }
        }
        statement["Action"] = json!(actions);
    }
    policy
}

/// Whether `policy` lets `action` on `resource` through: an Allow statement names both (IAM wildcards), no
/// Deny statement does, and neither carries a Condition this check would have to evaluate.
pub(crate) fn allows(policy: &Value, action: &str, resource: &str) -> bool {
    let statements = match &policy["Statement"] {
        Value::Array(statements) => statements.clone(),
        single => vec![single.clone()],
    };
    let names = |statement: &Value, effect: &str| {
        let matching = |key: &str, value: &str| strings(&statement[key]).iter().any(|p| glob_matches(p, value));
        let named = statement["Effect"] == effect && matching("Action", action) && matching("Resource", resource);
        assert!(!named || statement.get("Condition").is_none(), "a conditional statement: {statement}");
        named
    };
    statements.iter().any(|s| names(s, "Allow")) && !statements.iter().any(|s| names(s, "Deny"))
}

fn strings(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
        _ => Vec::new(),
    }
}

/// IAM's wildcards: `*` any run of characters, `?` one.
fn glob_matches(pattern: &str, text: &str) -> bool {
    match pattern.chars().next() {
        None => text.is_empty(),
        Some('*') => {
            (0..=text.len()).filter(|&i| text.is_char_boundary(i)).any(|i| glob_matches(&pattern[1..], &text[i..]))
        }
        Some(p) => text
            .chars()
            .next()
            .is_some_and(|t| (p == '?' || p == t) && glob_matches(&pattern[p.len_utf8()..], &text[t.len_utf8()..])),
    }
}

/// One call of moto's IAM query API before enforcement starts; the XML answer. moto routes a request by the
/// service its Authorization header's credential scope names and, until then, checks nothing else.
async fn unauthenticated_iam(http: &reqwest::Client, url: &str, params: &[(&str, &str)]) -> String {
    let body: Vec<String> =
        params.iter().chain(&[("Version", "2010-05-08")]).map(|(k, v)| format!("{k}={}", encode(v))).collect();
    let response = http
        .post(format!("{url}/"))
        .header(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=bootstrap/20260101/us-east-1/iam/aws4_request, Signature=-",
        )
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body.join("&"))
        .send()
        .await
        .expect("moto's IAM API");
    let status = response.status();
    let text = response.text().await.expect("moto's IAM answer");
    assert!(status.is_success(), "IAM {params:?}: {status} {text}");
    text
}

/// Percent-encoding of a form value.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The text of the first `<name>` element.
fn element(xml: &str, name: &str) -> String {
    let open = format!("<{name}>");
    let start = xml.find(&open).unwrap_or_else(|| panic!("no <{name}> in {xml}")) + open.len();
    xml[start..start + xml[start..].find('<').unwrap()].to_owned()
}
