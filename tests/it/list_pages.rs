//! The /v1 lists page as OpenAI's do: a `limit` outside its range (files 1–10,000, batches and input items 1–100) and
//! an `order` other than `asc` or `desc` are a 400 naming the parameter; `order=asc` pages the oldest first.

use axum::http::StatusCode;
use serde_json::json;

use crate::support::router::{call, fixture, get};
use crate::uploads::{form, post_form, post_json};

/// A batch input file of one line.
const LINE: &[u8] =
    b"{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":\"small\",\"prompt\":\"hi\"}}\n";

#[tokio::test]
async fn limits_out_of_range_and_unknown_orders_are_refused_and_ascending_pages_start_oldest() {
    let f = fixture();
    let mut made = Vec::new();
    for _ in 0..3 {
        let upload = form(&[("purpose", None, b"batch"), ("file", Some("in.jsonl"), LINE)]);
        let (status, file) = call(&f.state, post_form("/v1/files", upload)).await;
        assert_eq!(status, StatusCode::OK, "{file}");
        made.push(file["id"].as_str().unwrap().to_owned());
    }
    // Ids sort by creation time (UUID v7): ascending order is their order.
    made.sort();
    let (_, response) =
        call(&f.state, post_json("/v1/responses", &json!({"model": "small", "input": "x", "background": true}))).await;
    let items = format!("/v1/responses/{}/input_items", response["id"].as_str().unwrap());
    for (path, param) in [
        ("/v1/files?limit=0".to_owned(), "limit"),
        ("/v1/files?limit=10001".to_owned(), "limit"),
        ("/v1/files?order=sideways".to_owned(), "order"),
        ("/v1/batches?limit=101".to_owned(), "limit"),
        ("/v1/batches?limit=0".to_owned(), "limit"),
        (format!("{items}?limit=0"), "limit"),
        (format!("{items}?limit=101"), "limit"),
    ] {
        let (status, refused) = call(&f.state, get(&path)).await;
        assert_eq!(
            (status, refused["error"]["param"].as_str()),
            (StatusCode::BAD_REQUEST, Some(param)),
            "{path}: {refused}"
        );
    }
    let ids = |page: &serde_json::Value| -> Vec<String> {
        page["data"].as_array().unwrap().iter().map(|file| file["id"].as_str().unwrap().to_owned()).collect()
    };
    let (_, first) = call(&f.state, get("/v1/files?order=asc&limit=2")).await;
    assert_eq!((ids(&first), first["has_more"].as_bool()), (made[..2].to_vec(), Some(true)), "{first}");
    let (_, rest) = call(&f.state, get(&format!("/v1/files?order=asc&after={}", made[1]))).await;
    assert_eq!((ids(&rest), rest["has_more"].as_bool()), (made[2..].to_vec(), Some(false)), "{rest}");
    let (_, newest) = call(&f.state, get("/v1/files?limit=1")).await;
    assert_eq!(ids(&newest), [made[2].clone()], "newest first by default");
}

/// An answer's memory is bounded whatever `limit` asks: records as large as OpenAI's bounds allow (16 metadata
/// values of 512 characters, 4-byte characters each) fill a page to `FILE_PAGE_BYTES`, which then ends with `has_more`,
/// and the next page goes on after its last id, each record answered once.
#[tokio::test]
async fn a_page_of_large_records_ends_at_its_byte_bound_and_the_next_goes_on_after_it() {
    use gpuinfer::FILE_PAGE_BYTES;
    let f = fixture();
    let upload = form(&[("purpose", None, b"batch"), ("file", Some("in.jsonl"), LINE)]);
    let (_, file) = call(&f.state, post_form("/v1/files", upload)).await;
    let metadata: serde_json::Map<String, serde_json::Value> =
        (0..16).map(|i| (format!("key-{i:02}-{}", "k".repeat(56)), json!("😀".repeat(512)))).collect();
    let create = json!({"input_file_id": file["id"], "endpoint": "/v1/completions", "completion_window": "24h",
                        "metadata": metadata});
    let record_bytes = json!(metadata).to_string().len();
    let count = FILE_PAGE_BYTES / record_bytes + 3;
    for _ in 0..count {
        let (status, batch) = call(&f.state, post_json("/v1/batches", &create)).await;
        assert_eq!(status, StatusCode::OK, "{batch}");
    }
    let (status, first) = call(&f.state, get("/v1/batches?limit=100")).await;
    assert_eq!(status, StatusCode::OK);
    let answered = first.to_string().len();
    let held = first["data"].as_array().unwrap().len();
    assert!(held < count && first["has_more"] == true, "{held} of {count}, has_more {}", first["has_more"]);
    assert!(answered <= FILE_PAGE_BYTES + 4096, "{answered} bytes");
    let last = first["last_id"].as_str().unwrap();
    let (_, rest) = call(&f.state, get(&format!("/v1/batches?limit=100&after={last}"))).await;
    assert_eq!(held + rest["data"].as_array().unwrap().len(), count, "every batch once over the two pages");
}
