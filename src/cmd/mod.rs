//! One module per subcommand: its flags (`Args`, each also an environment variable), checked once into a config, and `run`.

pub(crate) mod api_key;
pub(crate) mod args;
pub(crate) mod backends;
pub(crate) mod client;
pub(crate) mod dev;
pub(crate) mod fetch_model;
pub(crate) mod get;
pub(crate) mod healthcheck;
pub(crate) mod inject_xid;
pub(crate) mod router;
pub(crate) mod scaler;
pub(crate) mod simulate;
pub(crate) mod submit;
pub(crate) mod worker;
