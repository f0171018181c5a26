//! The engine simulator as its own process: an OpenAI-compatible GPU-like engine (slots with continuous
//! batching, per-token decode time rising with the batch, prefill per prompt token, queueing beyond the slots;
//! failures, hangs and malformed answers), for tests that kill the engine, fault tests and benchmarks.
//! Prints its base URL on the first stdout line.
//!
//! `cargo run --bin engine-simulator -- --listen 127.0.0.1:8000 --latency-ms 200 --slots 8`
//! (`--start-delay-ms 3000` waits before listening, like a model load).

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use gpuinfer::{simulator::Behavior, simulator::EngineSimulator, simulator::Faults};

/// OpenAI-compatible engine simulator: /health, /v1/models, /v1/completions, /v1/chat/completions, /simulator/stats.
#[derive(Debug, Parser)]
struct Args {
    /// Address to listen on; port 0 picks a free one.
    #[arg(long, env = "ENGINE_SIMULATOR_LISTEN", default_value = "127.0.0.1:8000")]
    listen: SocketAddr,
    /// Time one request takes once it holds a slot, in milliseconds.
    #[arg(long, env = "ENGINE_SIMULATOR_LATENCY_MS", default_value_t = 5)]
    latency_ms: u64,
    /// Requests served at once; more wait for a slot, as in an engine's scheduler.
    #[arg(long, env = "ENGINE_SIMULATOR_SLOTS", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    slots: u32,
    #[command(flatten)]
    faults: FaultArgs,
    /// Completion tokens reported per request (at most its max_tokens).
    #[arg(long, env = "ENGINE_SIMULATOR_COMPLETION_TOKENS", default_value_t = 8)]
    completion_tokens: u64,
    /// Decode time per generated token, in milliseconds, with one request running (0: fixed latency only).
    #[arg(long, env = "ENGINE_SIMULATOR_TOKEN_MS", default_value_t = 0.0)]
    token_ms: f64,
    /// How much slower tokens get with every slot busy (0.3 = 30 % slower at full batch).
    #[arg(long, env = "ENGINE_SIMULATOR_BATCH_SLOWDOWN", default_value_t = 0.0)]
    batch_slowdown: f64,
    /// Prefill time per prompt token, in microseconds.
    #[arg(long, env = "ENGINE_SIMULATOR_PREFILL_US", default_value_t = 0)]
    prefill_us_per_token: u64,
    /// Milliseconds to wait before listening, as an engine loading its model does (its port refuses until then).
    #[arg(long, env = "ENGINE_SIMULATOR_START_DELAY_MS", default_value_t = 0)]
    start_delay_ms: u64,
}

/// How often requests fail, hang or come back garbled.
#[derive(Debug, clap::Args)]
struct FaultArgs {
    /// Share of requests answered with --fail-status (0.0–1.0).
    #[arg(long, env = "ENGINE_SIMULATOR_FAIL_RATE", default_value_t = 0.0)]
    fail_rate: f64,
    /// HTTP status of a failed request.
    #[arg(long, env = "ENGINE_SIMULATOR_FAIL_STATUS", default_value_t = 503)]
    fail_status: u16,
    /// Share of requests left unanswered for --hang-ms (0.0–1.0), so the client's timeout decides.
    #[arg(long, env = "ENGINE_SIMULATOR_HANG_RATE", default_value_t = 0.0)]
    hang_rate: f64,
    /// How long a hanging request stays unanswered, in milliseconds.
    #[arg(long, env = "ENGINE_SIMULATOR_HANG_MS", default_value_t = 60_000)]
    hang_ms: u64,
    /// Share of requests answered with a 200 whose body is not JSON (0.0–1.0).
    #[arg(long, env = "ENGINE_SIMULATOR_GARBAGE_RATE", default_value_t = 0.0)]
    garbage_rate: f64,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let behavior = Behavior {
        latency: Duration::from_millis(args.latency_ms),
        slots: args.slots as usize,
        faults: Faults {
            fail_rate: args.faults.fail_rate,
            fail_status: args.faults.fail_status,
            hang_rate: args.faults.hang_rate,
            hang: Duration::from_millis(args.faults.hang_ms),
            garbage_rate: args.faults.garbage_rate,
        },
        completion_tokens: args.completion_tokens,
        healthy: true,
        token_time: Duration::from_secs_f64(args.token_ms.max(0.0) / 1000.0),
        batch_slowdown: args.batch_slowdown,
        prefill_per_token: Duration::from_micros(args.prefill_us_per_token),
        keeps_abandoned: false,
    };
    tokio::time::sleep(Duration::from_millis(args.start_delay_ms)).await;
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let simulator = EngineSimulator::serve(listener, behavior);
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{}", simulator.url)?;
    stdout.flush()?;
    tokio::signal::ctrl_c().await
}
