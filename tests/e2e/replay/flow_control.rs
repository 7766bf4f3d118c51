//! Coalesced and rate-limited deliveries replay as recorded.

use super::*;

/// Coalescing and a tenant rate: flow control's own state.
const FLOW: &str = r#"
[[workflow]]
id = "ticket-sync"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "webhook", event_type = "ticket.updated", priority = 10, coalesce = { quiet = "30s", max_wait = "5m" } } ]

[[workflow]]
id = "globex-triage"
tenant = "globex"
status = "live"
run_as = "globex-agent"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 10 } ]

[rates.tenant]
globex = { limit = 1, per = "1h" }
"#;

#[tokio::test]
async fn coalesced_and_rate_limited_deliveries_replay_as_recorded() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = Daemon::start(&db, &config(&db, FLOW), &ENV).await;
        let updated = event("webhook", "ticket.updated", "acme", "T-77");
        let (_, first) = daemon.post_event(&unique("k"), &updated).await;
        assert_eq!(first["outcome"], "routed", "{backend:?}: {first}");
        let (_, joined) = daemon.post_event(&unique("k"), &updated).await;
        assert_eq!(joined["outcome"], "coalesced", "{backend:?}: {joined}");
        let created = |entity: &str| event("webhook", "ticket.created", "globex", entity);
        let (_, admitted) = daemon.post_event(&unique("k"), &created("G-1")).await;
        assert_eq!(admitted["outcome"], "routed", "{backend:?}: {admitted}");
        let (status, refused) = daemon.post_event(&unique("k"), &created("G-2")).await;
        assert_eq!(
            status,
            StatusCode::TOO_MANY_REQUESTS,
            "{backend:?}: {refused}"
        );
        assert_eq!(refused["outcome"], "rate_limited", "{backend:?}: {refused}");

        let store = Database::connect(&db.url).await.expect("connect");
        let before = live_rows(&store).await;
        let report = replay(&daemon, &json!({})).await;
        assert_eq!(report["status"], "completed", "{backend:?}: {report}");
        assert_eq!(report["progress"]["total"], 4, "{report}");
        assert_eq!(report["progress"]["differ"], 0, "{backend:?}: {report}");
        let mut originals = Vec::new();
        for (_, original, replayed, differs) in outcomes(&report) {
            assert!(!differs, "{backend:?}: {original} -> {replayed}");
            assert_eq!(original, replayed, "{backend:?}: {report}");
            originals.push(original);
        }
        originals.sort();
        assert_eq!(
            originals,
            [
                "coalesced:ticket-sync",
                "rate_limited:globex-triage",
                "routed:globex-triage",
                "routed:ticket-sync"
            ],
            "{backend:?}: {report}"
        );
        let why = |word: &str| {
            report["results"]
                .as_array()
                .expect("results")
                .iter()
                .find(|r| r["original"]["outcome"] == word)
                .and_then(|r| r["why"].as_str())
                .unwrap_or_default()
                .to_owned()
        };
        assert!(
            why("rate_limited").contains("does not model rates"),
            "{backend:?}: {report}"
        );
        assert!(
            why("coalesced").contains(run_id(&first).as_str()),
            "{backend:?}: {report}"
        );
        assert_eq!(
            live_rows(&store).await,
            before,
            "{backend:?}: a diagnostic replay wrote live rows"
        );

        // A live replay re-admits the refused delivery through intake, whose rate decides it
        // for real: the tenant's one event an hour is spent, so it is refused again, recorded.
        let live = replay(
            &daemon,
            &json!({"mode": "live", "revision": "current", "outcome": "rate_limited"}),
        )
        .await;
        assert_eq!(live["status"], "completed", "{backend:?}: {live}");
        assert_eq!(live["progress"]["total"], 1, "{backend:?}: {live}");
        let result = &live["results"][0];
        assert_eq!(result["replayed"]["outcome"], "rate_limited", "{live}");
        assert!(result["new_intake_id"].is_string(), "{backend:?}: {live}");
        daemon.stop();
        db.drop_database().await;
    }
}
