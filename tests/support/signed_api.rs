//! A local stand-in for the stack's HTTP API with IAM auth in front of a router: each request's SigV4 signature
//! (Signature Version 4 for `execute-api`, as API Gateway checks it) is verified against the one set of credentials
//! it knows, then the request goes to the router and its answer back. Unsigned, wrongly signed, or signed without the
//! session token the credentials carry: 403 with API Gateway's message, and the router never sees it.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// The credentials a signer must use, and where the region and service of its scope must point.
#[derive(Clone)]
pub(crate) struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: String,
    pub region: String,
}

struct Upstream {
    credentials: Credentials,
    router: String,
    http: reqwest::Client,
}

/// The stand-in, serving until dropped.
pub(crate) struct SignedApi {
    /// http://127.0.0.1:port, the stage URL.
    pub url: String,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for SignedApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl SignedApi {
    /// Serves every path of `router` (its base URL) behind SigV4 with `credentials`.
    pub(crate) async fn start(credentials: Credentials, router: &str) -> Self {
        let upstream = Arc::new(Upstream { credentials, router: router.to_owned(), http: reqwest::Client::new() });
        let app = axum::Router::new().fallback(forward).with_state(upstream);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the signed API stand-in");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("the signed API stand-in serves");
        });
        SignedApi { url, server }
    }
}

async fn forward(State(upstream): State<Arc<Upstream>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 10 * 1024 * 1024).await.unwrap_or_default();
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    if let Err(message) = verify(&upstream.credentials, parts.method.as_str(), &path_and_query, &parts.headers, &body) {
        return answer(StatusCode::FORBIDDEN, &serde_json::json!({ "message": message }).to_string());
    }
    let mut outbound =
        upstream.http.request(parts.method.clone(), format!("{}{path_and_query}", upstream.router)).body(body);
    if let Some(kind) = parts.headers.get("content-type") {
        outbound = outbound.header("content-type", kind);
    }
    match outbound.send().await {
        Ok(response) => {
            let status = response.status();
            answer(status, &response.text().await.unwrap_or_default())
        }
        Err(e) => answer(StatusCode::BAD_GATEWAY, &format!("{{\"message\":\"{e}\"}}")),
    }
}

fn answer(status: StatusCode, body: &str) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(Bytes::from(body.to_owned())))
        .expect("a response")
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("any key length");
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// SigV4 as the AWS General Reference gives it ("Create a signed AWS API request"): the canonical request of the
/// signed headers, the string to sign over its hash with the credential scope, the key derived from the secret by
/// date, region, service and `aws4_request`.
fn verify(
    credentials: &Credentials,
    method: &str,
    path_and_query: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), String> {
    let missing = || "Missing Authentication Token".to_owned();
    let authorization = headers.get("authorization").and_then(|v| v.to_str().ok()).ok_or_else(missing)?;
    let fields = authorization.strip_prefix("AWS4-HMAC-SHA256 ").ok_or_else(missing)?;
    let field: BTreeMap<&str, &str> = fields.split(',').filter_map(|f| f.trim().split_once('=')).collect();
    let (Some(credential), Some(signed), Some(signature)) =
        (field.get("Credential"), field.get("SignedHeaders"), field.get("Signature"))
    else {
        return Err(format!("Authorization header requires Credential, SignedHeaders and Signature: {authorization}"));
    };
    let [key_id, date, region, service, "aws4_request"] = credential.split('/').collect::<Vec<_>>()[..] else {
        return Err(format!("Credential should be scoped to a valid region and service: {credential}"));
    };
    if key_id != credentials.access_key_id {
        return Err("The security token included in the request is invalid.".into());
    }
    if region != credentials.region || service != "execute-api" {
        return Err(format!("Credential should be scoped to a valid region ({region}) and service ({service})"));
    }
    let token = headers.get("x-amz-security-token").and_then(|v| v.to_str().ok());
    if token != Some(credentials.session_token.as_str()) {
        return Err("The security token included in the request is invalid.".into());
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    let amz_date = header("x-amz-date").ok_or("Missing X-Amz-Date")?;
    let canonical_headers: String =
        signed.split(';').map(|name| format!("{name}:{}\n", header(name).unwrap_or_default())).collect();
    let (path, query) = path_and_query.split_once('?').unwrap_or((path_and_query, ""));
    let mut pairs: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
    pairs.sort_unstable();
    let canonical = format!(
        "{method}\n{path}\n{}\n{canonical_headers}\n{signed}\n{}",
        pairs.join("&"),
        hex::encode(Sha256::digest(body))
    );
    let scope = format!("{date}/{region}/{service}/aws4_request");
    let to_sign =
        format!("AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}", hex::encode(Sha256::digest(canonical.as_bytes())));
    let mut key = hmac(format!("AWS4{}", credentials.secret_access_key).as_bytes(), date);
    for part in [region, service, "aws4_request"] {
        key = hmac(&key, part);
    }
    if hex::encode(hmac(&key, &to_sign)) != *signature {
        return Err("The request signature we calculated does not match the signature you provided.".into());
    }
    Ok(())
}
