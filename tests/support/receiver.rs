//! A local receiver for result callbacks: records every POST (the Standard Webhooks headers and the body) and
//! answers with scripted statuses, then 200.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;

/// One POST as the receiver saw it.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    pub id: String,
    pub timestamp: String,
    pub signature: String,
    pub content_type: String,
    pub body: Vec<u8>,
}

#[derive(Default)]
struct Inbox {
    statuses: Mutex<VecDeque<u16>>,
    deliveries: Mutex<Vec<Delivery>>,
}

/// A running receiver on a loopback port; stops when dropped.
pub(crate) struct Receiver {
    /// The callback URL (`http://127.0.0.1:<port>/hook`).
    pub url: String,
    inbox: Arc<Inbox>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Receiver {
    /// Answers the first POSTs with `statuses`, every later one with 200.
    pub(crate) async fn start(statuses: impl IntoIterator<Item = u16>) -> Receiver {
        let inbox = Arc::new(Inbox { statuses: Mutex::new(statuses.into_iter().collect()), ..Inbox::default() });
        let app = Router::new().route("/hook", post(receive)).with_state(Arc::clone(&inbox));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind receiver");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { url, inbox, server }
    }

    pub(crate) fn deliveries(&self) -> Vec<Delivery> {
        self.inbox.deliveries.lock().expect("deliveries").clone()
    }

    /// Waits until `count` POSTs have arrived and returns them.
    pub(crate) async fn received(&self, count: usize, limit: Duration) -> Vec<Delivery> {
        super::eventually(limit, "callbacks at the receiver", || async {
            let deliveries = self.deliveries();
            (deliveries.len() >= count).then_some(deliveries)
        })
        .await
    }
}

async fn receive(State(inbox): State<Arc<Inbox>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    inbox.deliveries.lock().expect("deliveries").push(Delivery {
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp"),
        signature: header("webhook-signature"),
        content_type: header("content-type"),
        body: body.to_vec(),
    });
    let status = inbox.statuses.lock().expect("statuses").pop_front().unwrap_or(200);
    StatusCode::from_u16(status).unwrap_or(StatusCode::OK)
}
