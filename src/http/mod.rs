//! The local HTTP server (timeouts, connection cap, bounded shutdown), what it holds clients to (a body's pace, a
//! response's write deadline, one length per request) and the JSON bodies of the refusals hyper makes itself.

pub(crate) mod body_pace;
pub(crate) mod both_lengths;
pub(crate) mod refusals;
pub(crate) mod request_heads;
pub(crate) mod server;
pub(crate) mod write_deadline;
