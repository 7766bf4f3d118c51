//! Sampling: with `sampling_ratio = 0` a new trace is not exported, a sender's sampled one is.

use super::*;

/// A delivery without a traceparent starts a new trace when tracing is on; with
/// `sampling_ratio = 0` that trace is not exported, while a sender's sampled trace still is.
#[tokio::test]
async fn sampling_ratio_zero_exports_nothing_without_a_sampled_parent() {
    let collector = Collector::start().await;
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let (worker, secret) = Worker::start().await;
    let telemetry = format!(
        "otlp_endpoint = \"{}\"\nsampling_ratio = 0.0",
        collector.url
    );
    let text = config(&db, &setup(&worker.url, Some(&telemetry)));
    let daemon = Daemon::start(&db, &text, &[(SECRET_ENV, secret.as_str()), FAST_EXPORT]).await;

    let unparented = post_traced(
        &daemon,
        &event("chat", "message", "acme", &unique("e")),
        None,
        None,
    )
    .await;
    let received = worker.wait_for_run(&run_id(&unparented)).await;
    let traceparent = received
        .traceparent
        .expect("a new trace is still propagated");
    let (new_trace, _, flags) = fields(&traceparent);
    assert_eq!(flags, "00", "not sampled");
    let row = ledger_row(&daemon, unparented["intake_id"].as_str().expect("id")).await;
    let (stored_trace, _, stored_flags) = fields(row["traceparent"].as_str().expect("stored"));
    assert_eq!(stored_trace, new_trace);
    assert_eq!(stored_flags, "00");

    // The parent's sampled flag wins over the ratio.
    let sampled_trace = new_trace_id();
    let sampled = post_traced(
        &daemon,
        &event("chat", "message", "acme", &unique("e")),
        Some(&sender_traceparent(&sampled_trace)),
        None,
    )
    .await;
    worker.wait_for_run(&run_id(&sampled)).await;
    collector
        .wait_for(&sampled_trace, &["intake.delivery", "dispatch.attempt"])
        .await;
    // Shutdown flushes whatever is still queued.
    daemon.stop();
    assert!(
        collector.spans(&new_trace).is_empty(),
        "the unsampled trace was exported: {:#?}",
        collector.spans(&new_trace)
    );
    let mut names: Vec<String> = collector.all().into_iter().map(|s| s.name).collect();
    names.sort();
    names.dedup();
    for span in collector.all() {
        assert_eq!(
            span.trace_id, sampled_trace,
            "only the sampled trace: {span:?}"
        );
    }
    assert!(
        names.contains(&"intake.batch_commit".to_owned()),
        "{names:?}"
    );
    db.drop_database().await;
}
