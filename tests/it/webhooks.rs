//! Result callbacks: a worker POSTs each stored document, Standard-Webhooks signed, to a local receiver, retries
//! after a 500, and never reaches addresses the outbound policy refuses (the metadata service above all).

use std::time::{Duration, Instant};

use crate::support::receiver::{Delivery, Receiver};
use crate::support::rig::{Rig, config};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use gpuinfer::{
    Callback, DeliveryError, OutboundPolicy, Priority, Refusal, RequestId, Tier, WebhookConfig, WebhookSecret,
    Webhooks, metrics::Emf, simulator::Behavior,
};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::json;
use sha2::Sha256;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const LOCAL: OutboundPolicy = OutboundPolicy { allow_http: true, allow_private: true };

fn webhook_config(policy: OutboundPolicy) -> WebhookConfig {
    WebhookConfig {
        secret: Some(SECRET.parse().unwrap()),
        policy,
        retry_for: Duration::from_secs(30),
        attempt_timeout: Duration::from_secs(5),
    }
}

/// Checks a delivery the way a receiver following the Standard Webhooks spec does, written out here.
fn signed_correctly(delivery: &Delivery) -> bool {
    let key = BASE64.decode(SECRET.trim_start_matches("whsec_")).unwrap();
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key).unwrap();
    mac.update(format!("{}.{}.", delivery.id, delivery.timestamp).as_bytes());
    mac.update(&delivery.body);
    let expected = format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()));
    delivery.signature.split(' ').any(|signature| signature == expected)
}

#[test]
fn signatures_match_the_standard_webhooks_reference_vector() {
    let secret: WebhookSecret = SECRET.parse().unwrap();
    assert_eq!(
        secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, br#"{"test": 2432232314}"#),
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    );
    assert_eq!(secret, SECRET.trim_start_matches("whsec_").parse().unwrap(), "the whsec_ prefix is optional");
    assert!("not base64!".parse::<WebhookSecret>().is_err());
    assert!("c2hvcnQ=".parse::<WebhookSecret>().is_err(), "5 bytes is too short a key");
}

#[tokio::test]
async fn a_stored_result_is_posted_signed_and_retried_after_a_500() {
    let receiver = Receiver::start([500]).await;
    let rig = Rig::start(Behavior::default(), config(), Some(webhook_config(LOCAL)), |_| async {}).await;
    let id = RequestId::new_v4();
    let request = json!({"requestId": id, "prompt": "call me back", "callbackUrl": receiver.url});
    rig.send_to(Priority::High, &request).await;
    let started = Instant::now();
    let deliveries = receiver.received(2, Duration::from_secs(10)).await;
    assert!(started.elapsed() >= Duration::from_millis(900), "the retry came after the first back-off");
    let stored = rig.backends.store.path_of(id);
    let document = std::fs::read(stored).unwrap();
    for delivery in &deliveries {
        assert_eq!(delivery.id, id.to_string());
        assert_eq!(delivery.body, document, "the body is the stored document, byte for byte");
        assert_eq!(delivery.content_type, "application/json");
        assert!(signed_correctly(delivery), "{delivery:?}");
        let sent_at: i64 = delivery.timestamp.parse().unwrap();
        assert!((chrono::Utc::now().timestamp() - sent_at).abs() < 30);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.deliveries().len(), 2, "no more attempts after the 200");
    let counted = rig.emf.json_lines().into_iter().filter(|line| line.get("WebhooksDelivered").is_some()).count();
    assert_eq!(counted, 1);
    rig.stop().await;
}

#[tokio::test]
async fn an_expired_request_gets_its_error_document_posted_too() {
    let receiver = Receiver::start([]).await;
    let rig = Rig::start(Behavior::default(), config(), Some(webhook_config(LOCAL)), |_| async {}).await;
    let id = RequestId::new_v4();
    let past = (chrono::Utc::now() - chrono::Duration::seconds(5)).to_rfc3339();
    rig.send_to(
        Priority::Normal,
        &json!({"requestId": id, "prompt": "late", "deadline": past, "callbackUrl": receiver.url}),
    )
    .await;
    let delivery = receiver.received(1, Duration::from_secs(10)).await.remove(0);
    let document: serde_json::Value = serde_json::from_slice(&delivery.body).unwrap();
    assert_eq!((document["status"].as_str(), document["error"]["code"].as_str()), (Some("error"), Some("expired")));
    assert!(signed_correctly(&delivery));
    assert_eq!(rig.engine.calls(), 0);
    rig.stop().await;
}

/// A callback for `url` from a sender with `policy`.
async fn deliver(policy: OutboundPolicy, url: &str) -> (Result<u32, DeliveryError>, Duration) {
    let webhooks = Webhooks::new(webhook_config(policy), Emf::discard()).unwrap();
    let callback =
        Callback { url: url.into(), request_id: RequestId::new_v4(), tier: Tier::Small, body: b"{}".to_vec() };
    let started = Instant::now();
    let outcome = webhooks.deliver(&callback).await;
    (outcome, started.elapsed())
}

#[tokio::test]
async fn the_metadata_service_and_link_local_addresses_are_never_contacted() {
    for url in [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "https://169.254.169.254/",
        "http://169.254.170.2/v2/credentials",
        "http://2852039166/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/",
        "http://[fd00:ec2::254]/",
        "http://[fe80::1]/",
    ] {
        let (outcome, took) = deliver(LOCAL, url).await;
        assert!(
            matches!(outcome, Err(DeliveryError::Refused(Refusal::Address { .. }))),
            "{url}: {outcome:?} (even with private targets allowed)"
        );
        assert!(took < Duration::from_millis(50), "{url}: refused before any connection, not after {took:?}");
    }
}

#[tokio::test]
async fn loopback_is_refused_unless_allowed() {
    let receiver = Receiver::start([]).await;
    let by_name = receiver.url.replace("127.0.0.1", "localhost");
    let policy = OutboundPolicy { allow_http: true, allow_private: false };
    for url in [&receiver.url, &by_name] {
        let (outcome, _) = deliver(policy, url).await;
        assert!(matches!(outcome, Err(DeliveryError::Refused(Refusal::Address { .. }))), "{url}: {outcome:?}");
    }
    assert!(receiver.deliveries().is_empty(), "nothing reached the receiver");
    assert_eq!(deliver(LOCAL, &by_name).await.0, Ok(1), "allowed, it is delivered");
}

#[tokio::test]
async fn http_is_refused_unless_allowed_and_nothing_is_sent_unsigned() {
    let receiver = Receiver::start([]).await;
    let policy = OutboundPolicy { allow_http: false, allow_private: true };
    assert_eq!(deliver(policy, &receiver.url).await.0, Err(DeliveryError::Refused(Refusal::Http)));
    let unsigned = Webhooks::new(WebhookConfig { secret: None, ..webhook_config(LOCAL) }, Emf::discard()).unwrap();
    let callback =
        Callback { url: receiver.url.clone(), request_id: RequestId::new_v4(), tier: Tier::Small, body: vec![] };
    assert_eq!(unsigned.deliver(&callback).await, Err(DeliveryError::NoSecret));
    assert!(receiver.deliveries().is_empty());
}

#[tokio::test]
async fn a_receiver_that_keeps_failing_is_given_up_after_the_retry_window_and_a_4xx_at_once() {
    let webhooks =
        Webhooks::new(WebhookConfig { retry_for: Duration::from_secs(2), ..webhook_config(LOCAL) }, Emf::discard())
            .unwrap();
    let callback = |receiver: &Receiver| Callback {
        url: receiver.url.clone(),
        request_id: RequestId::new_v4(),
        tier: Tier::Small,
        body: vec![],
    };
    let failing = Receiver::start([503; 10]).await;
    let outcome = webhooks.deliver(&callback(&failing)).await;
    assert!(matches!(outcome, Err(DeliveryError::GaveUp { attempts: 2, .. })), "after 1 s, a 2 s wait would pass 2 s");
    assert_eq!(failing.deliveries().len(), 2);
    let gone = Receiver::start([410]).await;
    assert_eq!(webhooks.deliver(&callback(&gone)).await, Err(DeliveryError::Rejected(410)));
    assert_eq!(gone.deliveries().len(), 1, "a 4xx is not retried");
}
