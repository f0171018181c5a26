//! The HTTP API and its API Gateway event path under property tests (the test command's stand-in for the
//! cargo-fuzz target fuzz/fuzz_targets/api_gateway_event.rs): arbitrary methods, paths, headers and bodies,
//! straight through the router app or first through lambda_http's event conversion, never panic and
//! always get an answer the API promises (see `crate::support::answers`).

use std::sync::LazyLock;

use crate::support::answers::assert_clear_answer;
use crate::support::router::{Fixture, call, fixture};
use crate::support::strategies::body_bytes;
use axum::http::{HeaderName, HeaderValue, Request};
use base64::Engine as _;
use gpuinfer::lambda_event;
use lambda_http::request::LambdaRequest;
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::json;

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| tokio::runtime::Runtime::new().unwrap());

fn runner() -> TestRunner {
    TestRunner::new(Config { cases: 400, failure_persistence: None, ..Config::default() })
}

fn method() -> impl Strategy<Value = String> {
    prop_oneof![Just("POST".to_owned()), Just("GET".to_owned()), "[A-Z]{3,7}"]
}

fn path() -> impl Strategy<Value = String> {
    let id = any::<[u8; 16]>().prop_map(|b| uuid::Builder::from_random_bytes(b).into_uuid().to_string());
    prop_oneof![
        Just("/infer".to_owned()),
        Just("/healthz".to_owned()),
        id.prop_map(|id| format!("/results/{id}")),
        "[ -~]{0,24}".prop_map(|tail| format!("/results/{tail}")),
        "/[ -~]{0,32}",
    ]
}

fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
    let name = prop_oneof![
        Just("content-type".to_owned()),
        Just("content-length".to_owned()),
        Just("accept".to_owned()),
        "x-[a-z]{1,8}"
    ];
    let value = prop_oneof![
        Just("application/json".to_owned()),
        Just("application/json; charset=utf-8".to_owned()),
        "[0-9]{1,12}",
        "[ -~]{0,24}"
    ];
    vec((name, value), 0..4)
}

/// Sends one request through the app and checks the answer; a request `http` cannot even represent is skipped.
fn check_http(f: &Fixture, method: &str, path: &str, headers: &[(String, String)], body: Vec<u8>) {
    let mut request = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        let (Ok(name), Ok(value)) = (HeaderName::try_from(name.as_str()), HeaderValue::from_str(value)) else { return };
        request = request.header(name, value);
    }
    let Ok(request) = request.body(axum::body::Body::from(body)) else { return };
    let (status, answer) = RUNTIME.block_on(call(&f.state, request));
    assert_clear_answer(status, &answer);
}

#[test]
fn any_http_request_gets_an_answer_the_api_promises() {
    let f = fixture();
    runner()
        .run(&(method(), path(), headers(), body_bytes()), |(method, path, headers, body)| {
            check_http(&f, &method, &path, &headers, body);
            Ok(())
        })
        .unwrap();
}

#[test]
fn posted_bodies_are_accepted_or_refused_with_a_clear_4xx() {
    let f = fixture();
    let json = vec![("content-type".to_owned(), "application/json".to_owned())];
    runner()
        .run(&body_bytes(), |body| {
            check_http(&f, "POST", "/infer", &json, body);
            Ok(())
        })
        .unwrap();
}

#[test]
fn any_api_gateway_event_gets_an_answer_the_api_promises() {
    let f = fixture();
    let event = (
        method(),
        path(),
        "[ -~]{0,16}",
        // API Gateway itself sets Host and X-Forwarded-Proto; a client chooses the other headers.
        btree_map(
            "[a-z-]{1,12}".prop_filter("set by API Gateway", |h| h != "host" && h != "x-forwarded-proto"),
            "[ -~]{0,24}",
            0..4,
        ),
        body_bytes(),
        any::<bool>(),
    );
    runner()
        .run(&event, |(method, path, query, headers, body, base64)| {
            let body = if base64 {
                base64::engine::general_purpose::STANDARD.encode(&body)
            } else {
                String::from_utf8_lossy(&body).into_owned()
            };
            let event = json!({
                "version": "2.0",
                "routeKey": "$default",
                "rawPath": path,
                "rawQueryString": query,
                "headers": headers,
                "requestContext": {
                    "accountId": "123456789012", "apiId": "api", "domainName": "api.example.com",
                    "http": { "method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1",
                              "userAgent": "proptest" },
                    "requestId": "id", "routeKey": "$default", "stage": "$default", "time": "", "timeEpoch": 0
                },
                "body": body,
                "isBase64Encoded": base64
            });
            // As the router's Lambda does it: the event, made safe (`lambda_event`), then lambda_http's conversion.
            let event: LambdaRequest = serde_json::from_value(event).unwrap();
            let request: Request<lambda_http::Body> = lambda_event(event).into();
            let (status, answer) = RUNTIME.block_on(call(&f.state, request));
            assert_clear_answer(status, &answer);
            Ok(())
        })
        .unwrap();
}
