//! Reading the engine's load from the /metrics texts of vLLM, llama.cpp and the engine simulator.

use super::{EngineLoad, parse};

#[test]
fn vllm_gauges_are_summed_over_their_label_sets() {
    let text = "# HELP vllm:num_requests_running Number of requests currently running on GPU.\n\
                # TYPE vllm:num_requests_running gauge\n\
                vllm:num_requests_running{model_name=\"a\"} 12.0\n\
                vllm:num_requests_running{model_name=\"b\"} 3.0\n\
                vllm:num_requests_waiting{model_name=\"a\"} 4.0\n\
                vllm:num_requests_waiting_by_reason{reason=\"x\"} 99.0\n";
    assert_eq!(parse(text), Some(EngineLoad { running: 15, waiting: 4, drops_abandoned: true }));
}

#[test]
fn llama_cpp_processing_and_deferred_are_running_and_waiting() {
    let text = "llamacpp:requests_processing 8\nllamacpp:requests_deferred 2\nllamacpp:kv_cache_usage_ratio 0.5\n";
    assert_eq!(parse(text), Some(EngineLoad { running: 8, waiting: 2, drops_abandoned: false }));
}

#[test]
fn the_engine_simulator_gauges_are_read() {
    let text = "engine_requests_running 64\nengine_requests_waiting 0\nengine_requests_total 1000\n";
    assert_eq!(parse(text), Some(EngineLoad { running: 64, waiting: 0, drops_abandoned: true }));
}

#[test]
fn an_exposition_without_both_gauges_of_one_engine_reads_as_unknown() {
    assert_eq!(parse(""), None);
    assert_eq!(parse("vllm:num_requests_running 3\n"), None);
    assert_eq!(parse("vllm:num_requests_running_total 3\nvllm:num_requests_waiting 1\n"), None);
    assert_eq!(parse("<html>not metrics</html>"), None);
}
