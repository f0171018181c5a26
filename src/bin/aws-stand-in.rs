//! A fast in-memory stand-in for the SQS and S3 calls gpuinfer makes, on one loopback port, for tests and
//! benchmarks where an emulator's CPU per call would bound the worker. A request with `X-Amz-Target:
//! AmazonSQS.<Operation>` is SQS (awsJson1_0); any other is S3 (REST-XML, path-style); `GET /stand-in/stats`
//! answers `{"calls": N, "cpu_seconds": X}`. Prints its base URL on the first stdout line.
//!
//! `cargo run --features test-support --bin aws-stand-in -- --listen 127.0.0.1:4566`

#[path = "aws_stand_in/errors.rs"]
mod errors;
#[path = "aws_stand_in/s3.rs"]
mod s3;
#[path = "aws_stand_in/s3_list.rs"]
mod s3_list;
#[path = "aws_stand_in/s3_multipart.rs"]
mod s3_multipart;
#[path = "aws_stand_in/sqs.rs"]
mod sqs;
#[path = "aws_stand_in/sqs_attributes.rs"]
mod sqs_attributes;
#[path = "aws_stand_in/sqs_messages.rs"]
mod sqs_messages;
#[path = "aws_stand_in/sqs_queue.rs"]
mod sqs_queue;
#[path = "aws_stand_in/stats.rs"]
mod stats;
#[path = "aws_stand_in/wire.rs"]
mod wire;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use clap::Parser;

/// In-memory SQS (awsJson1_0) and S3 (path-style REST-XML) for the calls gpuinfer makes.
#[derive(Debug, Parser)]
struct Args {
    /// Address to listen on; port 0 picks a free one.
    #[arg(long, env = "AWS_STAND_IN_LISTEN", default_value = "127.0.0.1:0")]
    listen: SocketAddr,
}

/// Both services and the count of calls.
#[derive(Debug)]
struct StandIn {
    sqs: sqs::Sqs,
    s3: s3::S3,
    stats: stats::Stats,
}

/// A lock that a panicked holder leaves usable: every state change here is made whole before a panic could occur.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// SQS by its X-Amz-Target header, else S3.
async fn dispatch(
    State(stand_in): State<Arc<StandIn>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    stand_in.stats.count();
    match headers.get("x-amz-target").and_then(|target| target.to_str().ok()) {
        Some(target) => stand_in.sqs.handle(target, &body).await,
        None => stand_in.s3.handle(&method, &uri, &headers, body),
    }
}

async fn stats(State(stand_in): State<Arc<StandIn>>) -> Response {
    axum::Json(stand_in.stats.json()).into_response()
}

/// One thread serves every call: with nothing to hand between threads, a call costs about half the CPU it does on
/// a multi-threaded runtime (no wake-ups of other workers), and every state change is a short critical section.
#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let base = format!("http://{}", listener.local_addr()?);
    let stand_in =
        Arc::new(StandIn { sqs: sqs::Sqs::new(base.clone()), s3: s3::S3::default(), stats: stats::Stats::default() });
    // Objects may be large (a model's files): no limit on a request body.
    let app = Router::new()
        .route("/stand-in/stats", get(stats))
        .fallback(dispatch)
        .layer(DefaultBodyLimit::disable())
        .with_state(stand_in);
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{base}")?;
    stdout.flush()?;
    tokio::select! {
        served = axum::serve(listener, app) => served,
        stopped = tokio::signal::ctrl_c() => stopped,
    }
}
