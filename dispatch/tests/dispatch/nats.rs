//! The nats transport against the real nats-server at 127.0.0.1:4222 (JetStream on). Without
//! a server and without `CI`, the server-backed tests print SKIPPED; under CI they fail.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use switchyard_dispatch::{
    AttemptResult, NatsTarget, NatsTransport, Outbound, RetryHint, Transport,
};

const SERVER: &str = "nats://127.0.0.1:4222";
const BODY: &[u8] = br#"{"specversion":"1.0","id":"dsp"}"#;

/// Whether to run against the server; panics when it is down under CI.
async fn server_up(test: &str) -> bool {
    let reachable = matches!(
        tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::TcpStream::connect("127.0.0.1:4222")
        )
        .await,
        Ok(Ok(_))
    );
    if reachable {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{test}: nats-server at 127.0.0.1:4222 is unreachable under CI");
    }
    eprintln!(
        "SKIPPED {test}: nats-server at 127.0.0.1:4222 is unreachable (set CI to fail instead)"
    );
    false
}

/// A name no other test run uses: pid, clock, counter.
fn unique() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000_000,
        N.fetch_add(1, Ordering::SeqCst)
    )
}

fn test_target(name: &str, create_stream: bool) -> NatsTarget {
    NatsTarget {
        url: SERVER.into(),
        subject: format!("dtest.{name}.{{tenant}}.{{workflow}}"),
        stream: format!("DTEST_{name}"),
        create_stream,
    }
}

fn outbound(id: &str) -> Outbound<'_> {
    Outbound {
        id,
        tenant_id: "acme.eu",
        workflow_id: "triage",
        body: BODY,
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        tracestate: Some("congo=t61rcWkgMzE"),
    }
}

async fn observer() -> jetstream::Context {
    jetstream::new(async_nats::connect(SERVER).await.unwrap())
}

async fn message_count(js: &jetstream::Context, stream: &str) -> u64 {
    js.get_stream(stream)
        .await
        .unwrap()
        .get_info()
        .await
        .unwrap()
        .state
        .messages
}

#[tokio::test]
async fn delivers_once_and_dedupes_by_id() {
    if !server_up("delivers_once_and_dedupes_by_id").await {
        return;
    }
    let name = unique();
    let target = test_target(&name, true);
    let transport = NatsTransport::connect(target.clone()).await.unwrap();
    let id = format!("dsp_{name}");

    let first = transport.deliver(outbound(&id)).await;
    let second = transport.deliver(outbound(&id)).await;

    let js = observer().await;
    let count = message_count(&js, &target.stream).await;
    let stored = js
        .get_stream(&target.stream)
        .await
        .unwrap()
        .get_raw_message(1)
        .await
        .unwrap();
    js.delete_stream(&target.stream).await.unwrap();

    assert_eq!(first.result, AttemptResult::Delivered, "{first:?}");
    assert!(
        !first
            .response_excerpt
            .clone()
            .unwrap_or_default()
            .contains("duplicate"),
        "{first:?}"
    );
    assert_eq!(second.result, AttemptResult::Delivered, "{second:?}");
    assert!(
        second
            .response_excerpt
            .clone()
            .unwrap_or_default()
            .contains("(duplicate)"),
        "{second:?}"
    );
    assert_eq!(count, 1, "the re-published id must not be stored twice");
    assert_eq!(
        stored.subject.as_str(),
        format!("dtest.{name}.acme_eu.triage")
    );
    assert_eq!(stored.payload.as_ref(), BODY);
    let header = |key: &str| {
        stored
            .headers
            .get(key)
            .map(|v| v.as_str().to_owned())
            .unwrap_or_default()
    };
    assert_eq!(header("Nats-Msg-Id"), id);
    assert_eq!(
        header("traceparent"),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    );
    assert_eq!(header("tracestate"), "congo=t61rcWkgMzE");
    assert_eq!(header("Content-Type"), "application/cloudevents+json");
}

#[tokio::test]
async fn concurrent_deliveries_all_land() {
    if !server_up("concurrent_deliveries_all_land").await {
        return;
    }
    let name = unique();
    let target = test_target(&name, true);
    let transport = Arc::new(NatsTransport::connect(target.clone()).await.unwrap());
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let transport = transport.clone();
            let id = format!("dsp_{name}_{i}");
            let workflow = format!("wf{}", i % 7);
            tokio::spawn(async move {
                transport
                    .deliver(Outbound {
                        id: &id,
                        tenant_id: "acme",
                        workflow_id: &workflow,
                        body: BODY,
                        traceparent: None,
                        tracestate: None,
                    })
                    .await
            })
        })
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }

    let js = observer().await;
    let count = message_count(&js, &target.stream).await;
    js.delete_stream(&target.stream).await.unwrap();

    let failed: Vec<_> = results
        .iter()
        .filter(|a| a.result != AttemptResult::Delivered)
        .collect();
    assert!(
        failed.is_empty(),
        "{} not delivered, e.g. {:?}",
        failed.len(),
        failed.first()
    );
    assert_eq!(count, 200);
}

#[tokio::test]
async fn missing_stream_is_an_error_naming_it() {
    if !server_up("missing_stream_is_an_error_naming_it").await {
        return;
    }
    let name = unique();
    let target = test_target(&name, false);
    let transport = NatsTransport::connect(target.clone()).await.unwrap();
    let attempt = transport.deliver(outbound("dsp_missing")).await;
    assert_eq!(attempt.result, AttemptResult::Retry(RetryHint::default()));
    let error = attempt.error.unwrap_or_default();
    assert!(error.contains(&target.stream), "{error}");
    assert!(error.contains("does not exist"), "{error}");

    // Once the stream exists, the same transport delivers: the check is retried, not cached.
    let js = observer().await;
    js.create_stream(jetstream::stream::Config {
        name: target.stream.clone(),
        subjects: vec![format!("dtest.{name}.>")],
        ..Default::default()
    })
    .await
    .unwrap();
    let attempt = transport.deliver(outbound("dsp_missing")).await;
    let count = message_count(&js, &target.stream).await;
    js.delete_stream(&target.stream).await.unwrap();
    assert_eq!(attempt.result, AttemptResult::Delivered, "{attempt:?}");
    assert_eq!(count, 1);
}

#[tokio::test]
async fn unreachable_server_connects_and_retries() {
    let target = NatsTarget {
        url: "nats://127.0.0.1:1".into(),
        subject: "runs.{tenant}.{workflow}".into(),
        stream: "RUNS".into(),
        create_stream: true,
    };
    let transport = NatsTransport::connect(target)
        .await
        .expect("connect must not fail while the server is down");
    let attempt = transport.deliver(outbound("dsp_down")).await;
    assert_eq!(attempt.result, AttemptResult::Retry(RetryHint::default()));
    let error = attempt.error.unwrap_or_default();
    assert!(
        error.contains("not connected") && error.contains("127.0.0.1:1"),
        "{error}"
    );
}

#[tokio::test]
async fn subjects_are_sanitised() {
    let transport = NatsTransport::connect(NatsTarget {
        url: "nats://127.0.0.1:1".into(),
        subject: "runs.{tenant}.{workflow}.start".into(),
        stream: "RUNS".into(),
        create_stream: false,
    })
    .await
    .unwrap();
    assert_eq!(
        transport.subject_for("acme", "triage"),
        "runs.acme.triage.start"
    );
    assert_eq!(
        transport.subject_for("a.b>c", "w f*{tenant}"),
        "runs.a_b_c.w_f__tenant_.start"
    );
    assert_eq!(transport.subject_for("", "wf-1_x"), "runs._.wf-1_x.start");
}

#[tokio::test]
async fn bad_targets_are_refused() {
    let good = NatsTarget {
        url: "nats://127.0.0.1:1".into(),
        subject: "runs.{tenant}".into(),
        stream: "RUNS".into(),
        create_stream: false,
    };
    for (subject, stream) in [
        ("runs.>", "RUNS"),
        ("runs..x", "RUNS"),
        ("runs", "R.S"),
        ("runs", ""),
    ] {
        let target = NatsTarget {
            subject: subject.into(),
            stream: stream.into(),
            ..good.clone()
        };
        assert!(
            NatsTransport::connect(target).await.is_err(),
            "{subject} / {stream}"
        );
    }
    assert!(NatsTransport::connect(good).await.is_ok());
}
