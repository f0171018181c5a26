//! The local HTTP server (timeouts, connection cap, bounded shutdown) and the JSON bodies of the refusals hyper
//! makes itself.

pub mod refusals;
pub mod server;
