//! A dispatch to an HTTP worker joins the sender's trace, on every database.

use super::*;

/// On every database: the intake span's parent is the sender's span, the dispatch attempt is
/// in the same trace, and the worker's traceparent names the attempt span.
#[tokio::test]
async fn a_dispatch_to_an_http_worker_joins_the_senders_trace() {
    let collector = Collector::start().await;
    for db in TestDb::all().await {
        let (worker, secret) = Worker::start().await;
        let telemetry = format!(
            "otlp_endpoint = \"{}\"\nservice_name = \"switchyard-e2e\"",
            collector.url
        );
        let text = config(&db, &setup(&worker.url, Some(&telemetry)));
        let daemon = Daemon::start(&db, &text, &[(SECRET_ENV, secret.as_str()), FAST_EXPORT]).await;
        let trace_id = new_trace_id();
        let entity = unique("ticket");
        let answer = post_traced(
            &daemon,
            &event("chat", "message", "acme", &entity),
            Some(&sender_traceparent(&trace_id)),
            Some(TRACESTATE),
        )
        .await;
        assert_eq!(answer["outcome"], "routed", "{answer}");
        let run = run_id(&answer);
        let intake_id = answer["intake_id"].as_str().expect("intake id").to_owned();

        let received = worker.wait_for_run(&run).await;
        let spans = collector
            .wait_for(&trace_id, &["intake.delivery", "dispatch.attempt"])
            .await;
        let intake = one(&spans, "intake.delivery");
        assert_eq!(intake.trace_id, trace_id, "{:?}", db.backend);
        assert_eq!(
            intake.parent_span_id, SENDER_SPAN,
            "the intake span's parent is the sender's span"
        );
        assert_eq!(intake.attributes["source.kind"], "api");
        assert_eq!(intake.attributes["source.name"], "api");
        assert_eq!(intake.attributes["outcome"], "routed");
        assert_eq!(intake.attributes["intake.id"], intake_id);
        assert_eq!(intake.attributes["run.id"], run);
        assert_eq!(intake.service_name.as_deref(), Some("switchyard-e2e"));

        let attempt = one(&spans, "dispatch.attempt");
        assert_eq!(
            attempt.trace_id, trace_id,
            "the attempt is in the sender's trace"
        );
        assert_eq!(attempt.parent_span_id, intake.span_id);
        assert_eq!(attempt.attributes["dispatch.target"], "worker");
        assert_eq!(attempt.attributes["dispatch.attempt"], "1");
        assert_eq!(attempt.attributes["result"], "delivered");
        assert_eq!(attempt.attributes["http.response.status_code"], "200");
        assert_eq!(attempt.attributes["run.id"], run);

        let traceparent = received
            .traceparent
            .as_deref()
            .expect("a traceparent header");
        let (worker_trace, worker_parent, flags) = fields(traceparent);
        assert_eq!(
            worker_trace, trace_id,
            "the worker joins the sender's trace"
        );
        assert_eq!(
            worker_parent, attempt.span_id,
            "the worker's parent is the attempt span"
        );
        assert_eq!(flags, "01");
        assert_eq!(received.tracestate.as_deref(), Some(TRACESTATE));
        assert_eq!(
            received.body["traceparent"], traceparent,
            "the CloudEvents traceparent extension"
        );
        assert_eq!(received.body["tracestate"], TRACESTATE);

        // Stored: the intake span's context, with the sender's tracestate.
        let stored = format!("00-{trace_id}-{}-01", intake.span_id);
        let row = ledger_row(&daemon, &intake_id).await;
        assert_eq!(row["traceparent"], stored.as_str(), "{row:#}");
        assert_eq!(row["tracestate"], TRACESTATE);
        let run_view = daemon.get(&format!("/v1/runs/{run}")).await;
        assert_eq!(run_view["traceparent"], stored.as_str(), "{run_view:#}");
        assert_eq!(run_view["tracestate"], TRACESTATE);

        // The batch commit the delivery joined links to its span.
        let deadline = Instant::now() + Duration::from_secs(30);
        let batch = loop {
            let batch = collector.all().into_iter().find(|s| {
                s.name == "intake.batch_commit"
                    && s.links
                        .contains(&(trace_id.clone(), intake.span_id.clone()))
            });
            if let Some(batch) = batch {
                break batch;
            }
            assert!(
                Instant::now() < deadline,
                "no batch commit span links to the delivery"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(batch.attributes["batch.size"].parse::<u64>().expect("size") >= 1);
        daemon.stop();
        db.drop_database().await;
    }
}
