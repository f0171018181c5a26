//! The engine's own load, read from its Prometheus `/metrics`: requests in a generation slot and requests queued
//! inside the engine, by the names vLLM, llama.cpp and the engine simulator use; and whether that engine drops a
//! request whose client hung up.

use crate::contract::engine_load::EngineLoad;

/// Gauge names of each engine family (running, waiting), and whether it drops abandoned requests.
const GAUGES: [(&str, &str, bool); 3] = [
    // vLLM (every version since 0.4; one series per model_name label, summed). Its OpenAI server cancels a request
    // handler when the client disconnects (`with_cancellation`), which aborts the request in the engine.
    ("vllm:num_requests_running", "vllm:num_requests_waiting", true),
    // llama.cpp's server (`--metrics`). Seen on the pinned local engine (scripts/local-engine.sh): requests whose
    // connection closed stay counted, processing and deferred, and keep their slot.
    ("llamacpp:requests_processing", "llamacpp:requests_deferred", false),
    // gpuinfer's engine simulator (`engine-simulator`): a dropped connection frees its slot at once.
    ("engine_requests_running", "engine_requests_waiting", true),
];

/// Reads the load from a Prometheus text exposition; None when it holds no known pair of gauges.
pub fn parse(exposition: &str) -> Option<EngineLoad> {
    GAUGES.iter().find_map(|&(running, waiting, drops_abandoned)| {
        Some(EngineLoad {
            running: gauge_sum(exposition, running)?,
            waiting: gauge_sum(exposition, waiting)?,
            drops_abandoned,
        })
    })
}

/// The sum of every series of the gauge `name` (labels aside), rounded; None when it has none.
fn gauge_sum(exposition: &str, name: &str) -> Option<u64> {
    let mut sum = None;
    for line in exposition.lines() {
        let Some(rest) = line.strip_prefix(name) else { continue };
        let value = match rest.chars().next() {
            Some('{') => rest.rsplit_once('}').map(|(_, value)| value),
            Some(' ' | '\t') => Some(rest),
            _ => None,
        };
        let Some(value) = value.and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        *sum.get_or_insert(0.0) += value.max(0.0);
    }
    sum.map(|total: f64| total.round() as u64)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
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
}
