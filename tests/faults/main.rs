//! The fault suite behind docs/reliability.md: crashes, engine faults, store outages,
//! drain and restarts of the real binaries. Each test prints one figure line (see `support::report_figure`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod harness;
mod r1_crash;
mod r2_engine_faults;
mod r3_store_faults;
mod r4_drain;
mod r5_dev_restart;
mod r6_lost_worker;
mod r7_notice;
