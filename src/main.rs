//! Entry point: parse the command line, start logging and the shutdown signal, run the subcommand.

use std::process::ExitCode;

use clap::Parser;

use gpuinfer::{Cli, Command, arguments, run};

/// Runtime threads of `gpuinfer worker`, at most: it waits on the queue and the engine, and two threads carry
/// thousands of requests per second (BENCHMARKS.md, P3), where one per core would be 192 on a g6e.48xlarge.
const WORKER_RUNTIME_THREADS: usize = 2;

fn main() -> ExitCode {
    let cli = Cli::parse_from(arguments());
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if matches!(cli.command, Command::Worker(_)) {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        runtime.worker_threads(cores.min(WORKER_RUNTIME_THREADS));
    }
    match runtime.enable_all().build() {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(error) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("gpuinfer: cannot start the async runtime: {error}");
            }
            ExitCode::FAILURE
        }
    }
}
