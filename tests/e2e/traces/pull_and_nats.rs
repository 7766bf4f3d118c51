//! Pull claims and NATS messages carry the run's trace.

use async_nats::jetstream;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use futures::StreamExt as _;

use super::*;

/// Pull claims and NATS messages carry the run's trace; the claim is an attempt span too.
#[tokio::test]
async fn pull_claims_and_nats_messages_carry_the_trace() {
    let collector = Collector::start().await;
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let stream = format!("TRACES_{}", uuid::Uuid::now_v7().simple());
    let subject = format!("traces{}", uuid::Uuid::now_v7().simple());
    let nats = format!(
        r#"[telemetry]
otlp_endpoint = "{}"

[[target]]
name = "bus"
kind = "nats"
url = "nats://127.0.0.1:4222"
subject = "{subject}.{{tenant}}.{{workflow}}"
stream = "{stream}"
create_stream = true

[[workflow]]
id = "bused"
tenant = "acme"
status = "live"
run_as = "acme-agent"
target = "bus"
triggers = [ {{ channel = "chat", event_type = "message", priority = 1 }} ]

[[workflow]]
id = "pulled"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ {{ channel = "chat", event_type = "pull_me", priority = 1 }} ]
"#,
        collector.url
    );
    let daemon = Daemon::start(&db, &config(&db, &nats), &[FAST_EXPORT]).await;

    // Pull: the claim body's message names the claim's attempt span.
    let pull_trace = new_trace_id();
    let pulled = post_traced(
        &daemon,
        &event("chat", "pull_me", "acme", &unique("p")),
        Some(&sender_traceparent(&pull_trace)),
        Some(TRACESTATE),
    )
    .await;
    let claims = daemon.claim(&["pulled"], 1).await;
    assert_eq!(claims.len(), 1, "{claims:?}");
    let message = &claims[0]["message"];
    assert_eq!(message["data"]["run"]["id"], run_id(&pulled).as_str());
    let spans = collector
        .wait_for(&pull_trace, &["intake.delivery", "dispatch.attempt"])
        .await;
    let attempt = one(&spans, "dispatch.attempt");
    assert_eq!(attempt.attributes["result"], "claimed");
    assert_eq!(attempt.attributes["dispatch.target"], "pull");
    assert_eq!(
        attempt.parent_span_id,
        one(&spans, "intake.delivery").span_id
    );
    assert_eq!(
        message["traceparent"],
        format!("00-{pull_trace}-{}-01", attempt.span_id).as_str(),
        "{message:#}"
    );
    assert_eq!(message["tracestate"], TRACESTATE);

    // NATS: the message headers name the publish attempt's span.
    let Ok(client) = async_nats::connect("nats://127.0.0.1:4222").await else {
        assert!(
            !super::super::harness::in_ci(),
            "CI=true but NATS is not running on 4222"
        );
        super::super::harness::skipped("SKIPPED the NATS part: nothing listens on 127.0.0.1:4222");
        return;
    };
    let nats_trace = new_trace_id();
    let bused = post_traced(
        &daemon,
        &event("chat", "message", "acme", &unique("n")),
        Some(&sender_traceparent(&nats_trace)),
        Some(TRACESTATE),
    )
    .await;
    let spans = collector
        .wait_for(&nats_trace, &["intake.delivery", "dispatch.attempt"])
        .await;
    let attempt = one(&spans, "dispatch.attempt");
    assert_eq!(attempt.attributes["result"], "delivered");
    let js = jetstream::new(client);
    let consumer = js
        .get_stream(&stream)
        .await
        .expect("the stream")
        .create_consumer(pull::Config {
            deliver_policy: DeliverPolicy::All,
            ack_policy: AckPolicy::None,
            ..Default::default()
        })
        .await
        .expect("a consumer");
    let mut messages = consumer.messages().await.expect("messages");
    let message = tokio::time::timeout(Duration::from_secs(30), messages.next())
        .await
        .expect("a message within 30 s")
        .expect("the stream goes on")
        .expect("read from NATS");
    let headers = message.headers.as_ref().expect("headers");
    let header = |name: &str| headers.get(name).map(|v| v.as_str().to_owned());
    assert_eq!(
        header("traceparent"),
        Some(format!("00-{nats_trace}-{}-01", attempt.span_id))
    );
    assert_eq!(header("tracestate").as_deref(), Some(TRACESTATE));
    let body: Value = serde_json::from_slice(&message.payload).expect("JSON");
    assert_eq!(body["data"]["run"]["id"], run_id(&bused).as_str());
    assert_eq!(
        body["traceparent"].as_str(),
        header("traceparent").as_deref()
    );
    let _ = js.delete_stream(&stream).await;
    daemon.stop();
    db.drop_database().await;
}
