//! Unit tests of `contract/batch_line.rs`.

use super::*;

#[test]
fn a_lines_request_id_is_a_valid_v4_id_that_depends_on_batch_line_and_key() {
    let line = |id: &str, line| BatchLine { id: id.into(), line };
    let key = Some(&b"the batch's secret"[..]);
    let id = line("batch_a", 7).request_id(key);
    assert_eq!(RequestId::parse(&id.to_string()), Some(id), "the contract's UUID v4 rule");
    assert_eq!(id, line("batch_a", 7).request_id(key));
    assert_ne!(id, line("batch_a", 8).request_id(key));
    assert_ne!(id, line("batch_b", 7).request_id(key));
    assert_ne!(id, line("batch_a", 7).request_id(Some(b"another secret")), "who lacks the key cannot name it");
    assert_ne!(id, line("batch_a", 7).request_id(None), "nor derive it from the batch and line alone");
}

#[test]
fn a_mark_names_its_line_and_end() {
    let key = mark_key("batch_a", 42, LineEnd::Failed);
    assert_eq!(key, "batch-lines/batch_a/00000042.failed");
    assert_eq!(read_mark(&key), Some((42, LineEnd::Failed)));
    assert_eq!(read_mark("batch-lines/batch_a/x.failed"), None);
    assert_eq!(read_mark("batch-lines/batch_a/00000001.other"), None);
}
