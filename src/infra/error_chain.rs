//! An error and the chain of its causes on one line, for logs and messages ("sending: connection refused").

/// `error`, then each of its sources, joined by ": ", with a cause that merely repeats the previous text skipped.
pub(crate) fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
