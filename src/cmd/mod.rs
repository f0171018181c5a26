//! One module per subcommand: its flags (`Args`, each also an environment variable), checked once into a config, and `run`.

pub mod api_key;
pub mod args;
pub mod backends;
pub mod client;
pub mod dev;
pub mod fetch_model;
pub mod get;
pub mod healthcheck;
pub mod inject_xid;
pub mod router;
pub mod scaler;
pub mod simulate;
pub mod submit;
pub mod worker;
