//! `GET /metrics` after a known sequence of deliveries: exact counter values, and an exposition
//! that `promtool check metrics` accepts.

use std::collections::HashMap;

use reqwest::StatusCode;
use serde_json::json;

use super::harness::{Backend, Daemon, TOKEN, TestDb, config, event, in_ci, run_id, skipped};
use super::spine::WORKED_EXAMPLE;

const SOURCE: &str = r#"
[[source]]
kind = "webhook"
name = "zendesk"
tenant = "acme"
signing_secret_env = "METRICS_SECRET"
"#;

/// Sample lines (`name{labels} value`) by their name and labels.
pub(super) fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| {
            let (key, value) = line.rsplit_once(' ')?;
            Some((key.to_owned(), value.parse().ok()?))
        })
        .collect()
}

#[tokio::test]
async fn metrics_count_exactly_what_happened_and_pass_promtool() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let text = config(&db, &format!("{SOURCE}{WORKED_EXAMPLE}"));
    let daemon = Daemon::start(&db, &text, &[("METRICS_SECRET", "s")]).await;
    let ticket = event("webhook", "ticket.created", "acme", "TCK-M");
    let (_, routed) = daemon.post_event("m1", &ticket).await;
    assert_eq!(routed["outcome"], "routed");
    assert_eq!(
        daemon.post_event("m1", &ticket).await.1["outcome"],
        "duplicate"
    );
    assert_eq!(
        daemon.post_event("m2", &ticket).await.1["outcome"],
        "entity_locked"
    );
    let (status, _) = daemon
        .post_event("m3", &json!({"channel": "webhook"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let forged = daemon
        .client()
        .post(daemon.url("/v1/ingest/webhook/zendesk"))
        .header("x-zendesk-webhook-signature", "forged")
        .header(
            "x-zendesk-webhook-signature-timestamp",
            "2025-01-08T10:12:07Z",
        )
        .body("{}")
        .send()
        .await
        .expect("send");
    assert_eq!(forged.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        daemon.finish(&run_id(&routed), "completed").await.0,
        StatusCode::OK
    );

    // The scrape needs the token.
    let refused = daemon
        .client()
        .get(daemon.url("/metrics"))
        .send()
        .await
        .expect("scrape");
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    let exposition = daemon.metrics().await;
    let values = samples(&exposition);
    let expect = [
        (
            r#"switchyard_deliveries_total{source_kind="api",outcome="routed"}"#,
            1.0,
        ),
        (
            r#"switchyard_deliveries_total{source_kind="api",outcome="duplicate"}"#,
            1.0,
        ),
        (
            r#"switchyard_deliveries_total{source_kind="api",outcome="entity_locked"}"#,
            1.0,
        ),
        (
            r#"switchyard_deliveries_total{source_kind="api",outcome="invalid_event"}"#,
            1.0,
        ),
        (
            r#"switchyard_deliveries_total{source_kind="webhook",outcome="unauthorized_source"}"#,
            1.0,
        ),
        (
            r#"switchyard_receive_to_answer_seconds_count{source_kind="api"}"#,
            4.0,
        ),
        ("switchyard_runs_created_total", 1.0),
        (r#"switchyard_runs_finished_total{status="completed"}"#, 1.0),
        (r#"switchyard_pending_dispatches{target="pull"}"#, 0.0),
        // The three events, and the malformed one (recorded `invalid_event` with its bytes).
        ("switchyard_intake_batch_size_sum", 4.0),
        // Series nothing moved yet are there from the start, at zero.
        (
            r#"switchyard_deliveries_total{source_kind="cloudevents",outcome="routed"}"#,
            0.0,
        ),
        (
            r#"switchyard_store_unavailable_total{source_kind="slack"}"#,
            0.0,
        ),
    ];
    for (key, value) in expect {
        assert_eq!(values.get(key), Some(&value), "{key} in:\n{exposition}");
    }
    assert!(
        exposition.contains("switchyard_build_info{version="),
        "{exposition}"
    );
    // No tenant, entity or delivery id ever becomes a label.
    for id in ["acme", "TCK-M", "m1"] {
        assert!(
            !exposition.contains(id),
            "`{id}` is a label value:\n{exposition}"
        );
    }

    // promtool (Debian `prometheus`, installed by .ci/run) accepts the exposition.
    let path = db.dir.path().join("metrics.txt");
    std::fs::write(&path, &exposition).expect("write");
    match std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&path).expect("open"))
        .output()
    {
        Ok(output) => assert!(
            output.status.success(),
            "promtool: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(error) => {
            assert!(!in_ci(), "CI=true but promtool is missing: {error}");
            skipped(&format!("SKIPPED promtool check: {error}"));
        }
    }
    daemon.stop();
}

#[tokio::test]
async fn metrics_listen_serves_only_metrics_without_a_token() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let text = config(&db, WORKED_EXAMPLE).replace(
        "api_token_env = \"SWITCHYARD_API_TOKEN\"\n",
        "api_token_env = \"SWITCHYARD_API_TOKEN\"\nmetrics_listen = \"127.0.0.1:0\"\n",
    );
    let daemon = Daemon::start(&db, &text, &[]).await;
    assert!(
        daemon
            .wait_for_log("metrics listening", std::time::Duration::from_secs(10))
            .await
    );
    let addr = daemon
        .logs()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|line| line["fields"]["message"] == "metrics listening")
        .and_then(|line| line["fields"]["addr"].as_str().map(str::to_owned))
        .expect("the metrics address is logged");
    let client = reqwest::Client::new();
    let scrape = client
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .expect("scrape");
    assert_eq!(scrape.status(), StatusCode::OK);
    assert!(
        scrape
            .text()
            .await
            .expect("text")
            .contains("switchyard_build_info")
    );
    // Nothing else is served there.
    let other = client
        .get(format!("http://{addr}/v1/runs"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("send");
    assert_eq!(other.status(), StatusCode::NOT_FOUND);
    daemon.stop();
}

/// Deliveries by configured source name, runs by workflow, pull claims, and config reloads:
/// every series present at zero from the start, counted exactly, no name from a request
/// (an unknown source in a URL) ever a label; a refused reload shows in `/metrics` and
/// `/readyz` until a reload is applied.
#[tokio::test]
async fn metrics_name_sources_and_workflows_count_claims_and_show_a_refused_reload() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let text = config(&db, &format!("{SOURCE}{WORKED_EXAMPLE}"));
    let daemon = Daemon::start(&db, &text, &[("METRICS_SECRET", "s")]).await;

    let exposition = daemon.metrics().await;
    let values = samples(&exposition);
    for key in [
        r#"switchyard_source_deliveries_total{source="zendesk",outcome="routed"}"#,
        r#"switchyard_source_deliveries_total{source="api",outcome="invalid_event"}"#,
        r#"switchyard_workflow_runs_created_total{workflow="triage"}"#,
        r#"switchyard_workflow_runs_finished_total{workflow="triage",status="completed"}"#,
        r#"switchyard_pull_claims_total{workflow="triage"}"#,
        r#"switchyard_config_reloads_total{result="refused"}"#,
        r#"switchyard_config_reloads_total{result="applied"}"#,
        "switchyard_config_reload_refused",
    ] {
        assert_eq!(
            values.get(key),
            Some(&0.0),
            "{key} at zero in:\n{exposition}"
        );
    }

    let ticket = event("webhook", "ticket.created", "acme", "TCK-N");
    let (_, routed) = daemon.post_event("n1", &ticket).await;
    assert_eq!(routed["outcome"], "routed", "{routed}");
    assert_eq!(
        daemon.post_event("n1", &ticket).await.1["outcome"],
        "duplicate"
    );
    let claims = daemon.claim(&["triage"], 5).await;
    assert_eq!(claims.len(), 1, "{claims:?}");
    assert_eq!(
        daemon.finish(&run_id(&routed), "completed").await.0,
        StatusCode::OK
    );
    // A source no config names: 404, and never a label.
    let unknown = daemon
        .client()
        .post(daemon.url("/v1/ingest/webhook/no-such-source"))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .expect("send");
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);

    let exposition = daemon.metrics().await;
    let values = samples(&exposition);
    for (key, value) in [
        (
            r#"switchyard_source_deliveries_total{source="api",outcome="routed"}"#,
            1.0,
        ),
        (
            r#"switchyard_source_deliveries_total{source="api",outcome="duplicate"}"#,
            1.0,
        ),
        (
            r#"switchyard_source_deliveries_total{source="zendesk",outcome="routed"}"#,
            0.0,
        ),
        (
            r#"switchyard_workflow_runs_created_total{workflow="triage"}"#,
            1.0,
        ),
        (
            r#"switchyard_workflow_runs_created_total{workflow="tagging"}"#,
            0.0,
        ),
        (
            r#"switchyard_workflow_runs_finished_total{workflow="triage",status="completed"}"#,
            1.0,
        ),
        (r#"switchyard_pull_claims_total{workflow="triage"}"#, 1.0),
    ] {
        assert_eq!(values.get(key), Some(&value), "{key} in:\n{exposition}");
    }
    assert!(!exposition.contains("no-such-source"), "{exposition}");

    // A refused reload: in /metrics and /readyz (the detail with a token, a flag without).
    daemon.reload(&format!("{text}\nprioritee = 3\n"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let ready = loop {
        let ready = daemon.get("/readyz").await;
        if ready["config_reload"]["refused"] == true {
            break ready;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the refused reload never showed in /readyz: {ready}\n{}",
            daemon.logs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(
        ready["config_reload"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("prioritee")),
        "{ready}"
    );
    assert!(ready["config_reload"]["at"].is_string(), "{ready}");
    assert_eq!(
        ready["status"], "ready",
        "the old revision still serves: {ready}"
    );
    let probe = daemon
        .client()
        .get(daemon.url("/readyz"))
        .send()
        .await
        .expect("probe");
    assert_eq!(probe.status(), StatusCode::OK);
    let probe: serde_json::Value = probe.json().await.expect("json");
    assert_eq!(
        probe,
        json!({"status": "ready", "config_reload_refused": true})
    );
    let values = samples(&daemon.metrics().await);
    assert_eq!(values.get("switchyard_config_reload_refused"), Some(&1.0));
    assert_eq!(
        values.get(r#"switchyard_config_reloads_total{result="refused"}"#),
        Some(&1.0)
    );

    // The file fixed: applied, and the refusal is gone from both.
    daemon.reload(&text);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let ready = daemon.get("/readyz").await;
        if ready["config_reload"]["refused"] == false {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the applied reload never cleared the refusal: {ready}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let values = samples(&daemon.metrics().await);
    assert_eq!(values.get("switchyard_config_reload_refused"), Some(&0.0));
    assert_eq!(
        values.get(r#"switchyard_config_reloads_total{result="applied"}"#),
        Some(&1.0)
    );
    daemon.stop();
}

/// `/metrics` and `/readyz` show a target's backlog exactly below the probe's cap (the figures
/// are bounded reads of `dispatches_due`, not counts of the backlog, so they must still be
/// right): N routed runs nobody claimed are N pending, with an age, on SQLite and PostgreSQL.
#[tokio::test]
async fn pending_figures_count_every_pending_dispatch_below_the_cap() {
    const N: usize = 25;
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(db) = TestDb::create(backend).await else {
            continue;
        };
        let daemon = Daemon::start(&db, &config(&db, WORKED_EXAMPLE), &[]).await;
        for i in 0..N {
            let ticket = event("webhook", "ticket.created", "acme", &format!("TCK-P{i}"));
            let (_, answer) = daemon.post_event(&format!("p{i}"), &ticket).await;
            assert_eq!(answer["outcome"], "routed", "{backend:?}: {answer}");
        }
        let values = samples(&daemon.metrics().await);
        assert_eq!(
            values.get(r#"switchyard_pending_dispatches{target="pull"}"#),
            Some(&(N as f64)),
            "{backend:?}"
        );
        // `/readyz` keeps its figures for a second: wait for one read after the deliveries.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let ready = daemon.get("/readyz").await;
            let pull = &ready["targets"]["pull"];
            if pull["pending"] == json!(N) {
                assert_eq!(pull["pending_capped"], json!(false), "{ready}");
                assert!(pull["oldest_pending_age_secs"].is_u64(), "{ready}");
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{backend:?}: /readyz never showed {N} pending: {ready}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        drop(daemon);
        db.drop_database().await;
    }
}
