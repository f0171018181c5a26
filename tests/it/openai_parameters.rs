//! docs/api.md's table of OpenAI's request parameters is what the code accepts: on each surface (a Batch line of
//! /v1/chat/completions or /v1/completions, POST /v1/responses, POST /infer) every ✓ is among the fields the
//! surface's own refusal lists as supported, every ✗ is not, and every field it supports has a row; and the endpoints
//! not served say what would serve them.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::http::StatusCode;
use gpuinfer::AppState;
use serde_json::{Value, json};

use crate::support::router::{admitted, call, fixture};
use crate::uploads::{form, post_form, post_json};

/// The pipeline's own /infer fields, which are no OpenAI parameter.
const PIPELINE_FIELDS: [&str; 6] = ["requestId", "route", "priority", "deadlineSeconds", "deadline", "callbackUrl"];

/// One row of the table: its OpenAI names, their /infer names, and the chat, completions and responses cells.
#[derive(Debug)]
struct Row {
    names: Vec<String>,
    infer: Vec<String>,
    cells: [String; 3],
}

fn code_names(cell: &str) -> Vec<String> {
    cell.split(", ").filter_map(|name| name.strip_prefix('`')?.strip_suffix('`').map(str::to_owned)).collect()
}

fn camel_case(name: &str) -> String {
    let mut parts = name.split('_');
    let first = parts.next().unwrap_or_default().to_owned();
    parts.fold(first, |mut out, part| {
        let mut chars = part.chars();
        out.extend(chars.next().map(|c| c.to_ascii_uppercase()));
        out.push_str(chars.as_str());
        out
    })
}

fn table() -> Vec<Row> {
    let api = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/api.md")).unwrap();
    let section = api.split("## OpenAI's request parameters").nth(1).expect("the section in docs/api.md");
    let rows: Vec<Row> = section
        .lines()
        .take_while(|line| !line.starts_with("## "))
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 5, "{line}");
            let names = code_names(cells[0]);
            let infer = match cells[1] {
                "camelCase" => names.iter().map(|name| camel_case(name)).collect(),
                cell => code_names(cell),
            };
            Row { names, infer, cells: [2, 3, 4].map(|i| cells[i].to_owned()) }
        })
        .collect();
    assert!(rows.len() > 10, "the table was read: {rows:?}");
    rows
}

/// The names listed after `(supported: ` or `(allowed: ` in a refusal's message.
fn listed(message: &str) -> BTreeSet<String> {
    let list = message.split_once("(supported: ").or_else(|| message.split_once("(allowed: ")).map(|(_, rest)| rest);
    let list = list.unwrap_or_else(|| panic!("no list of supported fields in {message:?}"));
    list.trim_end_matches(')').split(", ").map(str::to_owned).collect()
}

/// What a Batch line of `endpoint` accepts besides its input, from the batch refused for a line with an unknown field.
async fn batch_line_fields(state: &Arc<AppState>, endpoint: &str, input: Value) -> BTreeSet<String> {
    let mut body = json!({"model": "small", "not_a_parameter": 1});
    body.as_object_mut().unwrap().extend(input.as_object().unwrap().clone());
    let line = json!({"custom_id": "a", "method": "POST", "url": endpoint, "body": body}).to_string() + "\n";
    let upload = form(&[("purpose", None, b"batch"), ("file", Some("in.jsonl"), line.as_bytes())]);
    let (status, file) = call(state, post_form("/v1/files", upload)).await;
    assert_eq!(status, StatusCode::OK, "{file}");
    let create = json!({"input_file_id": file["id"], "endpoint": endpoint, "completion_window": "24h"});
    let (_, batch) = call(state, post_json("/v1/batches", &create)).await;
    let batch = admitted(state, &batch, None).await;
    assert_eq!(batch["status"], "failed", "{batch}");
    listed(batch["errors"]["data"][0]["message"].as_str().unwrap_or_else(|| panic!("{batch}")))
}

#[tokio::test]
async fn the_parameter_table_of_the_api_page_is_what_each_surface_accepts() {
    let rows = table();
    let f = fixture();
    let (_, infer) = call(&f.state, post_json("/infer", &json!({"prompt": "x", "not_a_parameter": 1}))).await;
    let (_, responses) =
        call(&f.state, post_json("/v1/responses", &json!({"model": "m", "input": "x", "not_a_parameter": 1}))).await;
    let surfaces = [
        ("chat", batch_line_fields(&f.state, "/v1/chat/completions", json!({"messages": []})).await),
        ("completions", batch_line_fields(&f.state, "/v1/completions", json!({"prompt": "x"})).await),
        ("responses", listed(responses["error"]["message"].as_str().unwrap())),
    ];
    for (column, (surface, accepted)) in surfaces.iter().enumerate() {
        let mut documented = BTreeSet::new();
        for row in &rows {
            for name in &row.names {
                match row.cells[column].as_str() {
                    "✓" => assert!(accepted.contains(name), "{surface}: {name} is ✓ in docs/api.md but refused"),
                    "✗" => assert!(!accepted.contains(name), "{surface}: {name} is ✗ in docs/api.md but accepted"),
                    "" => {}
                    other => panic!("{surface}: {name}: a cell is ✓, ✗ or blank, not {other:?}"),
                }
                documented.insert(name.clone());
            }
        }
        let undocumented: Vec<&String> = accepted.iter().filter(|name| !documented.contains(*name)).collect();
        assert!(undocumented.is_empty(), "{surface} accepts {undocumented:?}, which docs/api.md's table lacks");
    }
    let accepted = listed(infer["error"].as_str().unwrap());
    let documented: BTreeSet<String> = rows.iter().flat_map(|row| row.infer.clone()).collect();
    for name in &documented {
        assert!(accepted.contains(name), "/infer: docs/api.md names {name}, which /infer refuses");
    }
    let undocumented: Vec<&String> = accepted
        .iter()
        .filter(|name| !documented.contains(*name) && !PIPELINE_FIELDS.contains(&name.as_str()))
        .collect();
    assert!(undocumented.is_empty(), "/infer accepts {undocumented:?}, which docs/api.md's table lacks");
}

/// The OpenAI endpoints gpuinfer does not serve answer in OpenAI's shape, saying what would serve the call.
#[tokio::test]
async fn synchronous_completions_and_embeddings_say_what_would_serve_them() {
    let f = fixture();
    for (path, says) in [
        ("/v1/chat/completions", "POST /v1/batches"),
        ("/v1/completions", "POST /v1/responses"),
        ("/v1/embeddings", "embedding model"),
    ] {
        let (status, refused) = call(&f.state, post_json(path, &json!({"model": "small"}))).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap_or_else(|| panic!("{path}: {refused}"));
        assert!(message.contains(says), "{path}: {message}");
    }
}
