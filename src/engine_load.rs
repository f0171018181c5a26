//! The engine's own load, read from its Prometheus `/metrics`: requests in a generation slot and requests queued
//! inside the engine, by the names vLLM, llama.cpp and the engine simulator use.

/// Requests the engine is generating for, and requests it holds waiting for a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EngineLoad {
    pub running: u64,
    pub waiting: u64,
}

/// Gauge names of each engine family: (running, waiting).
const GAUGES: [(&str, &str); 3] = [
    // vLLM (every version since 0.4; one series per model_name label, summed).
    ("vllm:num_requests_running", "vllm:num_requests_waiting"),
    // llama.cpp's server (`--metrics`).
    ("llamacpp:requests_processing", "llamacpp:requests_deferred"),
    // gpuinfer's engine simulator (`engine-double`).
    ("engine_requests_running", "engine_requests_waiting"),
];

/// Reads the load from a Prometheus text exposition; None when it holds no known pair of gauges.
pub fn parse(exposition: &str) -> Option<EngineLoad> {
    GAUGES.iter().find_map(|(running, waiting)| {
        Some(EngineLoad { running: gauge_sum(exposition, running)?, waiting: gauge_sum(exposition, waiting)? })
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
mod tests;
