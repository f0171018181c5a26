//! A CloudWatch double for GetMetricData in the protocol the Rust SDK speaks to CloudWatch (Smithy RPC v2 CBOR),
//! which moto does not serve: datapoints the test puts, answered by metric identity (namespace, name and the full
//! set of dimensions, as CloudWatch tells metrics apart), newest first per query id.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use minicbor::data::{Tag, Type};
use minicbor::{Decoder, Encoder};
use serde_json::{Map, Value};

/// Namespace, metric name and every dimension (name → value).
type MetricId = (String, String, BTreeMap<String, String>);

#[derive(Default)]
struct Datapoints(Mutex<Vec<(MetricId, f64)>>);

pub(crate) struct CloudWatchDouble {
    pub url: String,
    datapoints: Arc<Datapoints>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for CloudWatchDouble {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl CloudWatchDouble {
    pub(crate) async fn start() -> Self {
        let datapoints = Arc::new(Datapoints::default());
        let app = axum::Router::new()
            .route(
                "/service/GraniteServiceVersion20100801/operation/GetMetricData",
                axum::routing::post(get_metric_data),
            )
            .with_state(Arc::clone(&datapoints));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        CloudWatchDouble { url, datapoints, server }
    }

    /// A client of the double, as the binary builds one.
    pub(crate) async fn client(&self) -> aws_sdk_cloudwatch::Client {
        aws_sdk_cloudwatch::Client::new(&super::moto::sdk_at(&self.url).await)
    }

    /// One datapoint, now, of the metric `namespace`/`name` with exactly `dimensions`.
    pub(crate) fn put(&self, namespace: &str, name: &str, dimensions: &[(&str, &str)], value: f64) {
        let dimensions = dimensions.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        self.datapoints.0.lock().unwrap().push(((namespace.into(), name.into(), dimensions), value));
    }
}

async fn get_metric_data(State(datapoints): State<Arc<Datapoints>>, body: Bytes) -> impl IntoResponse {
    let request = decode(&mut Decoder::new(&body));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let mut encoder = Encoder::new(Vec::new());
    let queries = request["MetricDataQueries"].as_array().unwrap();
    encoder.map(1).unwrap().str("MetricDataResults").unwrap().array(queries.len() as u64).unwrap();
    for query in queries {
        let metric = &query["MetricStat"]["Metric"];
        let dimensions = metric["Dimensions"].as_array().into_iter().flatten();
        let id: MetricId = (
            text(&metric["Namespace"]),
            text(&metric["MetricName"]),
            dimensions.map(|d| (text(&d["Name"]), text(&d["Value"]))).collect(),
        );
        let stored = datapoints.0.lock().unwrap();
        let values: Vec<f64> = stored.iter().rev().filter(|(metric, _)| *metric == id).map(|(_, v)| *v).collect();
        encoder.map(4).unwrap().str("Id").unwrap().str(&text(&query["Id"])).unwrap();
        encoder.str("StatusCode").unwrap().str("Complete").unwrap();
        encoder.str("Timestamps").unwrap().array(values.len() as u64).unwrap();
        for (age, _) in values.iter().enumerate() {
            encoder.tag(Tag::new(1)).unwrap().f64(now - age as f64).unwrap();
        }
        encoder.str("Values").unwrap().array(values.len() as u64).unwrap();
        for value in &values {
            encoder.f64(*value).unwrap();
        }
    }
    let headers = [
        (header::CONTENT_TYPE, "application/cbor"),
        (header::HeaderName::from_static("smithy-protocol"), "rpc-v2-cbor"),
    ];
    (headers, encoder.into_writer())
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

/// A CBOR item as JSON (timestamps as their epoch seconds).
fn decode(decoder: &mut Decoder) -> Value {
    match decoder.datatype().unwrap() {
        Type::Map | Type::MapIndef => {
            let length = decoder.map().unwrap();
            let mut object = Map::new();
            while more(decoder, length, object.len()) {
                let key = decoder.str().unwrap().to_owned();
                object.insert(key, decode(decoder));
            }
            Value::Object(object)
        }
        Type::Array | Type::ArrayIndef => {
            let length = decoder.array().unwrap();
            let mut items = Vec::new();
            while more(decoder, length, items.len()) {
                items.push(decode(decoder));
            }
            Value::Array(items)
        }
        Type::String => decoder.str().unwrap().into(),
        Type::Bool => decoder.bool().unwrap().into(),
        Type::U8 | Type::U16 | Type::U32 | Type::U64 => decoder.u64().unwrap().into(),
        Type::I8 | Type::I16 | Type::I32 | Type::I64 => decoder.i64().unwrap().into(),
        Type::F16 | Type::F32 | Type::F64 => decoder.f64().unwrap().into(),
        Type::Tag => {
            decoder.tag().unwrap();
            decode(decoder)
        }
        other => panic!("a CBOR {other} in a GetMetricData request"),
    }
}

/// Whether a map or array of `length` (None: until a break, consumed here) has more than `read` items.
fn more(decoder: &mut Decoder, length: Option<u64>, read: usize) -> bool {
    match length {
        Some(length) => (read as u64) < length,
        None if decoder.datatype().unwrap() == Type::Break => {
            decoder.skip().unwrap();
            false
        }
        None => true,
    }
}
