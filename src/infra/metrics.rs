//! Metric names and CloudWatch Embedded Metric Format (EMF) lines, written one JSON object per line.

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};

pub const NAMESPACE: &str = "Custom/ECSInference";

pub(crate) const ROUTED_REQUESTS: &str = "RoutedRequests";
pub(crate) const CLASSIFIER_FALLBACKS: &str = "ClassifierFallbacks";
pub(crate) const INFERENCE_LATENCY: &str = "InferenceLatency";
pub(crate) const QUEUE_WAIT: &str = "QueueWaitMs";
pub(crate) const PROMPT_TOKENS: &str = "PromptTokens";
pub(crate) const COMPLETION_TOKENS: &str = "CompletionTokens";
pub(crate) const REQUESTS_SUCCEEDED: &str = "RequestsSucceeded";
pub(crate) const REQUESTS_FAILED: &str = "RequestsFailed";
/// Result callbacks a receiver accepted, and those given up on (refused, rejected or out of retries).
pub(crate) const WEBHOOKS_DELIVERED: &str = "WebhooksDelivered";
pub(crate) const WEBHOOK_FAILURES: &str = "WebhookFailures";
/// Per tier: 1 + TasksNeeded − desired tasks; the scaling alarms' metric (see `scaler`).
pub(crate) const INFERENCE_SCALING_METRIC: &str = "InferenceScalingMetric";
pub(crate) const TASKS_NEEDED: &str = "TasksNeeded";
/// Per tier: 1 while messages wait and no task runs, else 0.
pub(crate) const HAS_BACKLOG_WITHOUT_CAPACITY: &str = "HasBacklogWithoutCapacity";
/// Per tier: 1 while the tier's task starts keep failing and the scaler asks for no capacity, else 0.
pub(crate) const TASK_STARTS_FAILING: &str = "TaskStartsFailing";
/// Per tier on spot-with-fallback: the On-Demand tasks its fallback service is asked for (0 while Spot serves it).
pub(crate) const FALLBACK_TASKS: &str = "FallbackTasks";

/// Per tier and worker: the adaptive in-flight limit, and the engine's own gauges it is read from.
pub(crate) const IN_FLIGHT_LIMIT: &str = "InFlightLimit";
pub(crate) const ENGINE_REQUESTS_RUNNING: &str = "EngineRequestsRunning";
pub(crate) const ENGINE_REQUESTS_WAITING: &str = "EngineRequestsWaiting";
/// Per ECS service: a worker's requests in flight as a share (percent) of its in-flight limit, averaged over 10 s
/// (see `saturation_report`); the scaler's GPU term on AWS.
pub const ENGINE_SATURATION: &str = "EngineSaturation";

/// Per tier, once per worker start (see `worker::cold_start`): the seconds of each phase from the task's start to its
/// first result written, in order, then their total. A phase with nothing to measure (no image pull seen, weights
/// not fetched) is not emitted.
pub(crate) const COLD_START_IMAGE: &str = "ColdStartImageSeconds";
pub(crate) const COLD_START_WEIGHTS: &str = "ColdStartWeightsSeconds";
pub(crate) const COLD_START_ENGINE: &str = "ColdStartEngineSeconds";
pub(crate) const COLD_START_FIRST_REQUEST: &str = "ColdStartFirstRequestSeconds";
pub(crate) const COLD_START_FIRST_RESULT: &str = "ColdStartFirstResultSeconds";
pub(crate) const COLD_START_TOTAL: &str = "ColdStartTotalSeconds";
/// The cold-start metrics, phases in order and the total last (the dashboard's cold-start widgets show these).
pub const COLD_START: [&str; 6] = [
    COLD_START_IMAGE,
    COLD_START_WEIGHTS,
    COLD_START_ENGINE,
    COLD_START_FIRST_REQUEST,
    COLD_START_FIRST_RESULT,
    COLD_START_TOTAL,
];

/// Every metric name the binary emits (the template's alarms and widgets may use only these).
pub const ALL: [&str; 25] = [
    ROUTED_REQUESTS,
    CLASSIFIER_FALLBACKS,
    INFERENCE_LATENCY,
    QUEUE_WAIT,
    PROMPT_TOKENS,
    COMPLETION_TOKENS,
    REQUESTS_SUCCEEDED,
    REQUESTS_FAILED,
    WEBHOOKS_DELIVERED,
    WEBHOOK_FAILURES,
    INFERENCE_SCALING_METRIC,
    TASKS_NEEDED,
    HAS_BACKLOG_WITHOUT_CAPACITY,
    TASK_STARTS_FAILING,
    FALLBACK_TASKS,
    IN_FLIGHT_LIMIT,
    ENGINE_REQUESTS_RUNNING,
    ENGINE_REQUESTS_WAITING,
    ENGINE_SATURATION,
    COLD_START_IMAGE,
    COLD_START_WEIGHTS,
    COLD_START_ENGINE,
    COLD_START_FIRST_REQUEST,
    COLD_START_FIRST_RESULT,
    COLD_START_TOTAL,
];

#[derive(Debug, Clone, Copy)]
pub(crate) enum Unit {
    Count,
    Milliseconds,
    Seconds,
    Percent,
    None,
}

impl Unit {
    fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Milliseconds => "Milliseconds",
            Unit::Seconds => "Seconds",
            Unit::Percent => "Percent",
            Unit::None => "None",
        }
    }
}

/// One value of one metric.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Metric {
    pub name: &'static str,
    pub(crate) value: f64,
    pub(crate) unit: Unit,
}

impl Metric {
    pub(crate) fn count(name: &'static str, value: u64) -> Self {
        Metric { name, value: value as f64, unit: Unit::Count }
    }

    pub(crate) fn millis(name: &'static str, value: u64) -> Self {
        Metric { name, value: value as f64, unit: Unit::Milliseconds }
    }

    pub(crate) fn seconds(name: &'static str, value: f64) -> Self {
        Metric { name, value, unit: Unit::Seconds }
    }

    pub(crate) fn percent(name: &'static str, value: f64) -> Self {
        Metric { name, value, unit: Unit::Percent }
    }

    /// A value without a unit, such as a ratio or a signed difference.
    pub(crate) fn number(name: &'static str, value: f64) -> Self {
        Metric { name, value, unit: Unit::None }
    }
}

/// Builds one EMF line: the metrics, all under one dimension set.
pub(crate) fn emf_line(timestamp_ms: i64, dimensions: &[(&str, &str)], metrics: &[Metric]) -> String {
    let mut root = Map::new();
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [dimensions.iter().map(|(name, _)| *name).collect::<Vec<_>>()],
                "Metrics": metrics.iter().map(|m| json!({"Name": m.name, "Unit": m.unit.as_str()})).collect::<Vec<_>>(),
            }],
        }),
    );
    for (name, value) in dimensions {
        root.insert((*name).into(), Value::from(*value));
    }
    for metric in metrics {
        root.insert(metric.name.into(), json!(metric.value));
    }
    Value::Object(root).to_string()
}

/// Where EMF lines go: stdout on Lambda and ECS (CloudWatch extracts them), a file or nowhere locally.
#[derive(Clone)]
pub struct Emf {
    out: Option<Arc<Mutex<Box<dyn Write + Send>>>>,
}

impl std::fmt::Debug for Emf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emf").field("enabled", &self.out.is_some()).finish()
    }
}

impl Emf {
    pub(crate) fn stdout() -> Self {
        Self::to_writer(std::io::stdout())
    }

    pub fn discard() -> Self {
        Emf { out: None }
    }

    pub fn to_writer(writer: impl Write + Send + 'static) -> Self {
        Emf { out: Some(Arc::new(Mutex::new(Box::new(writer)))) }
    }

    /// Writes one line; a failing writer loses the metric, never the request.
    pub(crate) fn emit(&self, dimensions: &[(&str, &str)], metrics: &[Metric]) {
        let Some(out) = &self.out else { return };
        let line = emf_line(chrono::Utc::now().timestamp_millis(), dimensions, metrics);
        // One write of the whole line: two processes appending to one file never interleave inside a line.
        let line = format!("{line}\n");
        if let Ok(mut out) = out.lock() {
            let _ = out.write_all(line.as_bytes()).and_then(|()| out.flush());
        }
    }
}
