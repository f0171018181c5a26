//! A local stand-in for the stack's HTTP API in front of the router's Lambda: each HTTP request on 127.0.0.1 becomes an
//! API Gateway payload 2.0 event, invoked through the local Runtime API, and the function's answer goes back as the
//! HTTP response. A client written for the deployed stack (OpenAI's) runs against it unchanged.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use super::lambda_runtime::{RuntimeApi, http_event};

/// The largest request body passed on (an HTTP API's payload limit is 10 MB).
const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;

/// The stand-in, serving until dropped.
pub(crate) struct ApiGateway {
    /// http://127.0.0.1:port, the stage URL.
    pub url: String,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for ApiGateway {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl ApiGateway {
    /// Serves every route as the stack's `$default` stage does, each request an invocation of the function behind
    /// `runtime`.
    pub(crate) async fn start(runtime: Arc<RuntimeApi>) -> Self {
        let app = axum::Router::new().fallback(forward).with_state(runtime);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the API Gateway stand-in");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ApiGateway { url, server }
    }
}

async fn forward(State(runtime): State<Arc<RuntimeApi>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return plain(StatusCode::PAYLOAD_TOO_LARGE, "Request Entity Too Large");
    };
    let event = payload_v2(&parts.method, &parts.uri, &parts.headers, &body);
    lambda_answer(&runtime.invoke(event).await)
}

/// The event API Gateway hands a Lambda integration of payload format 2.0: header names lowercased and repeated
/// ones joined with commas, the raw query string, and a body that is not text base64-encoded.
fn payload_v2(method: &axum::http::Method, uri: &axum::http::Uri, headers: &HeaderMap, body: &Bytes) -> Value {
    let mut event = http_event(method.as_str(), uri.path(), None);
    let mut joined = serde_json::Map::new();
    for name in headers.keys() {
        let values: Vec<&str> = headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).collect();
        joined.insert(name.as_str().to_owned(), json!(values.join(",")));
    }
    event["headers"] = Value::Object(joined);
    event["rawQueryString"] = json!(uri.query().unwrap_or_default());
    event["routeKey"] = json!("$default");
    if !body.is_empty() {
        let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        let text = content_type.starts_with("application/json") || content_type.starts_with("text/");
        match std::str::from_utf8(body) {
            Ok(body) if text => event["body"] = json!(body),
            _ => {
                event["body"] = json!(BASE64.encode(body));
                event["isBase64Encoded"] = json!(true);
            }
        }
    }
    event
}

/// The function's answer (statusCode, headers or multiValueHeaders, body, isBase64Encoded) as an HTTP response.
fn lambda_answer(answer: &Value) -> Response {
    let status = answer["statusCode"].as_u64().and_then(|s| StatusCode::from_u16(s as u16).ok());
    let Some(status) = status else {
        return plain(StatusCode::BAD_GATEWAY, &format!("the function's answer has no statusCode: {answer}"));
    };
    let text = answer["body"].as_str().unwrap_or_default();
    let body = if answer["isBase64Encoded"] == true {
        BASE64.decode(text).unwrap_or_else(|e| panic!("the function's base64 body does not decode: {e}"))
    } else {
        text.as_bytes().to_vec()
    };
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let mut headers: Vec<(String, String)> = Vec::new();
    for (name, values) in answer["multiValueHeaders"].as_object().into_iter().flatten() {
        headers
            .extend(values.as_array().into_iter().flatten().filter_map(|v| Some((name.clone(), v.as_str()?.into()))));
    }
    for (name, value) in answer["headers"].as_object().into_iter().flatten() {
        if !headers.iter().any(|(known, _)| known.eq_ignore_ascii_case(name)) {
            headers.extend(value.as_str().map(|v| (name.clone(), v.to_owned())));
        }
    }
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

fn plain(status: StatusCode, text: &str) -> Response {
    let mut response = Response::new(Body::from(text.to_owned()));
    *response.status_mut() = status;
    response
}
