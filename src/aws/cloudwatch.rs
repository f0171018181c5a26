//! The scaler's GPU term on AWS, through one GetMetricData call: the workers' saturation (`EngineSaturation`, their
//! requests in flight as a share of the in-flight limit, see `saturation_report`), else, from workers that do not
//! publish it, Container Insights `TaskGPUUtilization`.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_sdk_cloudwatch::Client;
use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, Metric, MetricDataQuery, MetricDataResult, MetricStat};

use crate::infra::metrics;
use crate::ports::{FleetError, GpuUtilization, Service};

/// How far back to look: Container Insights publishes each minute, a little late.
const LOOKBACK: Duration = Duration::from_secs(5 * 60);

/// The two series asked for: (query id, namespace, metric name), the first preferred.
const SERIES: [(&str, &str, &str); 2] = [
    ("saturation", metrics::NAMESPACE, metrics::ENGINE_SATURATION),
    ("gpu", "ECS/ContainerInsights", "TaskGPUUtilization"),
];

#[derive(Debug, Clone)]
pub struct SaturationOrGpu {
    client: Client,
}

impl SaturationOrGpu {
    pub fn new(client: Client) -> Self {
        SaturationOrGpu { client }
    }
}

/// The newest datapoint of a GetMetricData series (timestamps and values in matching order).
pub fn newest(timestamps: &[DateTime], values: &[f64]) -> Option<f64> {
    timestamps.iter().zip(values).max_by_key(|(t, _)| (t.secs(), t.subsec_nanos())).map(|(_, v)| *v)
}

/// One series of `service`, averaged per minute over its tasks. CloudWatch tells metrics apart by their full set
/// of dimensions, so both name the cluster and the service, as the workers' EMF lines and Container Insights do.
fn query(id: &str, namespace: &str, name: &str, service: &Service) -> MetricDataQuery {
    let dimension = |name: &str, value: &str| Dimension::builder().name(name).value(value).build();
    let metric = Metric::builder()
        .namespace(namespace)
        .metric_name(name)
        .dimensions(dimension("ClusterName", &service.cluster))
        .dimensions(dimension("ServiceName", &service.name))
        .build();
    MetricDataQuery::builder()
        .id(id)
        .metric_stat(MetricStat::builder().metric(metric).period(60).stat("Average").build())
        .return_data(true)
        .build()
}

fn newest_of(results: &[MetricDataResult], id: &str) -> Option<f64> {
    let series = results.iter().find(|series| series.id() == Some(id))?;
    newest(series.timestamps(), series.values())
}

#[async_trait]
impl GpuUtilization for SaturationOrGpu {
    async fn compute_utilization(&self, service: &Service) -> Result<Option<f64>, FleetError> {
        let now = SystemTime::now();
        let queries = SERIES.iter().map(|(id, namespace, name)| query(id, namespace, name, service));
        let output = self
            .client
            .get_metric_data()
            .set_metric_data_queries(Some(queries.collect()))
            .start_time(DateTime::from(now - LOOKBACK))
            .end_time(DateTime::from(now))
            .send()
            .await
            .map_err(|e| FleetError::caused("GetMetricData EngineSaturation, TaskGPUUtilization", e))?;
        let results = output.metric_data_results();
        Ok(SERIES.iter().find_map(|(id, ..)| newest_of(results, id)))
    }
}
