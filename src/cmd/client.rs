//! The HTTP client behind `gpuinfer submit` and `gpuinfer get`: sends requests to a router (SigV4-signed for an
//! API Gateway with IAM authorization), reads result documents and waits for one with back-off. Its errors
//! carry the exit status the commands document.

use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::Credentials;
use aws_credential_types::provider::ProvideCredentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use reqwest::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode};
use serde_json::Value;

/// First wait between two looks for a result; it grows by half up to [`MAX_POLL`].
pub(crate) const FIRST_POLL: Duration = Duration::from_millis(500);
pub(crate) const MAX_POLL: Duration = Duration::from_secs(5);

/// Why a command failed, by what the caller can do about it; each has its exit status.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The router refused the request (4xx): fix the request.
    #[error("request refused (HTTP {status}): {message}")]
    Refused { status: u16, message: String },
    /// The request was accepted but ended in an error document.
    #[error("request {request_id} ended in error: {code}: {message}")]
    Failed { request_id: String, code: String, message: String },
    /// No document within the wait.
    #[error(
        "no result for {request_id} after {waited_s} s (still pending; `gpuinfer get {request_id} --wait` waits again)"
    )]
    TimedOut { request_id: String, waited_s: u64 },
    /// Anything else: unreachable router, a 5xx, an answer that is not JSON, no AWS credentials.
    #[error("{0}")]
    Other(String),
}

impl ClientError {
    /// 2 request refused, 3 pipeline error, 4 timeout, 1 anything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Refused { .. } => 2,
            ClientError::Failed { .. } => 3,
            ClientError::TimedOut { .. } => 4,
            ClientError::Other(_) => 1,
        }
    }

    /// The error a finished document stands for, if it is an error document.
    pub(crate) fn from_document(document: &Value) -> Option<Self> {
        (document["status"] != "success").then(|| ClientError::Failed {
            request_id: document["requestId"].as_str().unwrap_or_default().to_owned(),
            code: document["error"]["code"].as_str().unwrap_or("unknown").to_owned(),
            message: document["error"]["message"].as_str().unwrap_or_default().to_owned(),
        })
    }
}

/// Signs requests for API Gateway (`execute-api`) with credentials and region from the AWS chain.
#[derive(Debug, Clone)]
pub struct Signer {
    credentials: Credentials,
    region: String,
}

impl Signer {
    /// Reads credentials and region the standard way (environment, profile, SSO, container, instance).
    pub(crate) async fn from_environment() -> Result<Self, ClientError> {
        let sdk = crate::aws::sdk_config(None).await;
        let region = sdk
            .region()
            .map(|r| r.to_string())
            .ok_or_else(|| ClientError::Other("--sigv4 needs a region: set AWS_REGION or a profile's region".into()))?;
        let provider = sdk
            .credentials_provider()
            .ok_or_else(|| ClientError::Other("--sigv4 needs AWS credentials and none are configured".into()))?;
        let credentials = provider
            .provide_credentials()
            .await
            .map_err(|e| ClientError::Other(format!("--sigv4: cannot load AWS credentials: {e}")))?;
        Ok(Signer { credentials, region })
    }

    /// Adds the SigV4 headers (`authorization`, `x-amz-date`, and `x-amz-security-token` for session credentials).
    pub fn sign(&self, request: &mut reqwest::Request) -> Result<(), ClientError> {
        let failed = |e: &dyn std::fmt::Display| ClientError::Other(format!("SigV4 signing failed: {e}"));
        let identity: Identity = self.credentials.clone().into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("execute-api")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| failed(&e))?
            .into();
        let headers: Vec<(&str, &str)> =
            request.headers().iter().filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?))).collect();
        let body = request.body().and_then(reqwest::Body::as_bytes).unwrap_or_default();
        let signable = SignableRequest::new(
            request.method().as_str(),
            request.url().as_str(),
            headers.into_iter(),
            SignableBody::Bytes(body),
        )
        .map_err(|e| failed(&e))?;
        let (instructions, _signature) = sign(signable, &params).map_err(|e| failed(&e))?.into_parts();
        let (signed, _) = instructions.into_parts();
        for header in signed {
            let name = HeaderName::from_bytes(header.name().as_bytes()).map_err(|e| failed(&e))?;
            let value = HeaderValue::from_str(header.value()).map_err(|e| failed(&e))?;
            request.headers_mut().insert(name, value);
        }
        Ok(())
    }
}

/// A router's HTTP API.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    signer: Option<Signer>,
    api_key: Option<String>,
}

impl Client {
    /// Sends `api_key` as a bearer token with every request (a router started with --api-key).
    pub(crate) fn with_api_key(self, api_key: Option<String>) -> Self {
        Client { api_key, ..self }
    }

    /// `base` is the router's URL (e.g. `http://127.0.0.1:8080` or an API Gateway stage URL).
    pub fn new(base: &str, signer: Option<Signer>) -> Result<Self, ClientError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| ClientError::Other(format!("cannot build the HTTP client: {e}")))?;
        Ok(Client { http, base: base.trim_end_matches('/').to_owned(), signer, api_key: None })
    }

    /// POST /infer: the router's 202 answer (`requestId`, `tier`).
    pub(crate) async fn submit(&self, request: &Value) -> Result<Value, ClientError> {
        let (status, answer) = self.call(Method::POST, "/infer", Some(request.to_string())).await?;
        match status {
            StatusCode::ACCEPTED => Ok(answer),
            other => Err(refusal(other, &answer)),
        }
    }

    /// GET /results/{id}: the document, or None while it is pending.
    pub async fn result(&self, request_id: &str) -> Result<Option<Value>, ClientError> {
        let (status, answer) = self.call(Method::GET, &format!("/results/{request_id}"), None).await?;
        match status {
            StatusCode::OK => Ok(Some(answer)),
            StatusCode::NOT_FOUND if answer["status"] == "pending" => Ok(None),
            other => Err(refusal(other, &answer)),
        }
    }

    /// Looks for the document until it exists or `timeout` passes, waiting 0.5 s, 0.75 s, … up to 5 s between
    /// looks.
    pub(crate) async fn wait(&self, request_id: &str, timeout: Duration) -> Result<Value, ClientError> {
        let started = Instant::now();
        let mut pause = FIRST_POLL;
        loop {
            if let Some(document) = self.result(request_id).await? {
                return Ok(document);
            }
            let left = timeout.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(ClientError::TimedOut {
                    request_id: request_id.to_owned(),
                    waited_s: started.elapsed().as_secs(),
                });
            }
            tokio::time::sleep(pause.min(left)).await;
            pause = pause.mul_f64(1.5).min(MAX_POLL);
        }
    }

    async fn call(&self, method: Method, path: &str, body: Option<String>) -> Result<(StatusCode, Value), ClientError> {
        let url = format!("{}{path}", self.base);
        let mut builder = self.http.request(method, &url);
        if let Some(body) = body {
            builder = builder.header(CONTENT_TYPE, "application/json").body(body);
        }
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key);
        }
        let mut request = builder.build().map_err(|e| ClientError::Other(format!("{url}: {e}")))?;
        if let Some(signer) = &self.signer {
            signer.sign(&mut request)?;
        }
        let response = self.http.execute(request).await.map_err(|e| {
            ClientError::Other(format!("cannot reach {url}: {}", crate::infra::error_chain::describe(&e)))
        })?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| ClientError::Other(format!("{url}: {e}")))?;
        let answer =
            serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
        Ok((status, answer))
    }
}

/// A 4xx is the caller's to fix; anything else is the service's.
fn refusal(status: StatusCode, answer: &Value) -> ClientError {
    let message = answer["error"]
        .as_str()
        .or_else(|| answer["message"].as_str())
        .map_or_else(|| answer.to_string(), str::to_owned);
    if status.is_client_error() {
        ClientError::Refused { status: status.as_u16(), message }
    } else {
        ClientError::Other(format!("the router answered HTTP {}: {message}", status.as_u16()))
    }
}
