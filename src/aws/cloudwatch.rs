//! GPU compute utilization for the scaler: Container Insights `TaskGPUUtilization` through GetMetricData.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_sdk_cloudwatch::Client;
use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, Metric, MetricDataQuery, MetricStat};

use crate::ports::{FleetError, GpuUtilization, Service};

/// How far back to look: Container Insights publishes each minute, a little late.
const LOOKBACK: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, Clone)]
pub(crate) struct ContainerInsightsGpu {
    client: Client,
}

impl ContainerInsightsGpu {
    pub fn new(client: Client) -> Self {
        ContainerInsightsGpu { client }
    }
}

/// The newest datapoint of a GetMetricData series (timestamps and values in matching order).
pub fn newest(timestamps: &[DateTime], values: &[f64]) -> Option<f64> {
    timestamps.iter().zip(values).max_by_key(|(t, _)| (t.secs(), t.subsec_nanos())).map(|(_, v)| *v)
}

#[async_trait]
impl GpuUtilization for ContainerInsightsGpu {
    async fn compute_utilization(&self, service: &Service) -> Result<Option<f64>, FleetError> {
        let dimension = |name: &str, value: &str| Dimension::builder().name(name).value(value).build();
        let metric = Metric::builder()
            .namespace("ECS/ContainerInsights")
            .metric_name("TaskGPUUtilization")
            .dimensions(dimension("ClusterName", &service.cluster))
            .dimensions(dimension("ServiceName", &service.name))
            .build();
        let query = MetricDataQuery::builder()
            .id("gpu")
            .metric_stat(MetricStat::builder().metric(metric).period(60).stat("Average").build())
            .return_data(true)
            .build();
        let now = SystemTime::now();
        let output = self
            .client
            .get_metric_data()
            .metric_data_queries(query)
            .start_time(DateTime::from(now - LOOKBACK))
            .end_time(DateTime::from(now))
            .send()
            .await
            .map_err(|e| FleetError::caused("GetMetricData TaskGPUUtilization", e))?;
        let series = output.metric_data_results.unwrap_or_default().into_iter().next();
        Ok(series.and_then(|s| newest(&s.timestamps.unwrap_or_default(), &s.values.unwrap_or_default())))
    }
}
