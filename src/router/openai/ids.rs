//! Object ids: a kind's prefix and a UUID v7, so that ids sort by creation time; an id from a path is checked
//! before it becomes part of a key.

use uuid::Uuid;

/// A new id of the kind `prefix` (`file-`, `batch_`, `upload_`, `part_`).
pub fn new(prefix: &str) -> String {
    format!("{prefix}{}", Uuid::now_v7().simple())
}

/// Whether `id` is an id of the kind `prefix` as `new` makes them (or as a batch's output files are named).
pub(crate) fn is_valid(prefix: &str, id: &str) -> bool {
    id.strip_prefix(prefix).is_some_and(|rest| {
        (32..=40).contains(&rest.len()) && rest.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
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
}
