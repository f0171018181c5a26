//! Unit tests of `router/openai/ids.rs`.

use super::*;

#[test]
fn ids_are_checked_before_they_name_a_key() {
    let id = new("file-");
    assert!(is_valid("file-", &id));
    assert!(!is_valid("batch_", &id));
    assert!(!is_valid("file-", "file-../../etc/passwd"));
    assert!(!is_valid("file-", "file-"));
}

#[test]
fn ids_sort_by_creation() {
    let first = new("batch_");
    std::thread::sleep(std::time::Duration::from_millis(2));
    assert!(new("batch_") > first);
}
