//! The black-box tests, in one binary (each links every SDK once): the router's API, the worker and its
//! adapters, the scaler, the client, the template and the AWS rules, against the real binary, moto and the local
//! engine where a test needs them. Tests that need moto or the local engine are `#[ignore = "needs …"]`:
//! `scripts/test.sh` starts both and runs them with `--include-ignored`; a plain `cargo test` skips them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod adaptive_limit;
mod api_keys_on_lambda;
mod aws_adapters;
mod aws_call_counter;
mod aws_rules;
mod aws_stand_in;
mod batch_api;
mod bedrock;
mod cli;
mod cold_start;
mod deletes;
mod deploy_journey;
mod doc_references;
mod docs;
mod e2e_dev;
mod engine_client;
mod engine_fleet;
mod engine_loss;
mod entrypoint;
mod expiry;
mod fetch_model;
mod fuzz_request;
mod fuzz_router;
mod glossary;
mod healthcheck;
mod hostile_http;
mod house;
mod http_limits;
mod iam_enforced;
mod inject_xid;
mod lambda_router;
mod lanes;
mod list_pages;
mod local_queue;
mod local_store;
mod log_privacy;
mod openai_events;
mod openai_parameters;
mod projects;
mod refusals;
mod responses;
mod router_api;
mod router_limits;
mod sample_compat;
mod scaler;
mod simulate;
mod spot_capacity;
mod spot_fallback;
mod spot_model;
mod structured_output;
mod template;
mod uploads;
mod walkthrough;
mod webhooks;
mod worker;
