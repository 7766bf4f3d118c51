//! Coalescing end to end (issue 14): updates on one ticket inside a trigger's window join the
//! pending run (`coalesced`, naming it), the run is dispatched once with the newest event and
//! every member's id; a redelivery is a `duplicate`, not a member; `max_wait` bounds a steady
//! stream; a kill -9 inside a window still ends in exactly one run.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::harness::{Backend, Daemon, TestDb, config, run_id, unique};

const SETUP: &str = r#"
[[workflow]]
id = "updates"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [
  { channel = "webhook", event_type = "ticket.updated", priority = 10, coalesce = { quiet = "2s", max_wait = "1m" } },
  { channel = "webhook", event_type = "ticket.created", priority = 10 },
]

[[workflow]]
id = "stream"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [
  { channel = "webhook", event_type = "ticket.status_changed", priority = 10, coalesce = { quiet = "4s", max_wait = "6s" } },
]
"#;

fn update(event_type: &str, entity: &str, n: u64) -> Value {
    json!({
        "channel": "webhook",
        "event_type": event_type,
        "tenant_id": "acme",
        "target_entity_id": entity,
        "payload": {"n": n},
    })
}

/// Claims a run of `workflow` as soon as one is due (at most 60 s).
async fn claim_when_due(daemon: &Daemon, workflow: &str) -> Vec<Value> {
    for _ in 0..600 {
        let claims = daemon.claim(&[workflow], 10).await;
        if !claims.is_empty() {
            return claims;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no run of {workflow} became due within 60 s");
}

#[tokio::test]
async fn five_updates_in_the_quiet_window_make_one_run_dispatched_with_the_newest() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = Daemon::start(&db, &config(&db, SETUP), &[]).await;
        let entity = unique("T");
        let mut intake_ids = Vec::new();
        let mut run = String::new();
        for n in 0..5 {
            let (status, answer) = daemon
                .post_event(
                    &format!("u{n}-{entity}"),
                    &update("ticket.updated", &entity, n),
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{backend:?}: {answer}");
            if n == 0 {
                assert_eq!(answer["outcome"], "routed", "{backend:?}: {answer}");
                run = run_id(&answer);
            } else {
                assert_eq!(answer["outcome"], "coalesced", "{backend:?}: {answer}");
                assert_eq!(answer["run_id"], run.as_str(), "names the run it joined");
                assert_eq!(answer["workflow_id"], "updates");
            }
            intake_ids.push(answer["intake_id"].as_str().expect("intake id").to_owned());
        }
        // A redelivery inside the window is a duplicate, not a sixth member.
        let (_, again) = daemon
            .post_event(
                &format!("u2-{entity}"),
                &update("ticket.updated", &entity, 2),
            )
            .await;
        assert_eq!(again["outcome"], "duplicate", "{backend:?}: {again}");

        let claims = claim_when_due(&daemon, "updates").await;
        assert_eq!(claims.len(), 1, "{backend:?}: one run");
        let data = &claims[0]["message"]["data"];
        assert_eq!(data["run"]["id"], run.as_str());
        assert_eq!(
            data["event"]["payload"]["n"], 4,
            "{backend:?}: the newest event"
        );
        assert_eq!(
            data["run"]["members"],
            json!(intake_ids),
            "{backend:?}: every member"
        );
        assert_eq!(data["run"]["intake_id"], intake_ids[0].as_str());

        let rows = daemon.intake(&format!("entity={entity}")).await;
        assert_eq!(rows.len(), 5, "{backend:?}: five ledger rows");
        let coalesced: Vec<&Value> = rows
            .iter()
            .filter(|r| r["outcome"] == "coalesced")
            .collect();
        assert_eq!(coalesced.len(), 4, "{backend:?}");
        assert!(coalesced.iter().all(|r| r["run_id"] == run.as_str()));
        assert_eq!(daemon.runs(&format!("entity={entity}")).await.len(), 1);

        // Where the provider says when an event happened, that orders the members, not
        // arrival: a late-arriving older update does not become the dispatched one.
        let reordered = unique("R");
        let times = ["2026-01-05T10:05:00Z", "2026-01-05T10:01:00.5Z"];
        for (n, time) in times.iter().enumerate() {
            let mut event = update("ticket.updated", &reordered, n as u64);
            event["payload"]["updated_at"] = json!(time);
            let (_, answer) = daemon.post_event(&unique("r"), &event).await;
            let expected = if n == 0 { "routed" } else { "coalesced" };
            assert_eq!(answer["outcome"], expected, "{backend:?}: {answer}");
        }
        let claims = claim_when_due(&daemon, "updates").await;
        assert_eq!(claims.len(), 1, "{backend:?}");
        let event = &claims[0]["message"]["data"]["event"];
        assert_eq!(event["target_entity_id"], reordered.as_str());
        assert_eq!(
            event["payload"]["n"], 0,
            "{backend:?}: the provider's newest (10:05), though it arrived first"
        );

        // A run its trigger did not open as a window is joined by nothing: an update on a
        // ticket whose run came from `ticket.created` finds it locked.
        let created = unique("C");
        let (_, first) = daemon
            .post_event(&unique("c"), &update("ticket.created", &created, 0))
            .await;
        assert_eq!(first["outcome"], "routed", "{backend:?}: {first}");
        let (_, next) = daemon
            .post_event(&unique("c"), &update("ticket.updated", &created, 1))
            .await;
        assert_eq!(next["outcome"], "entity_locked", "{backend:?}: {next}");

        // After dispatch the entity is locked as before.
        let (_, locked) = daemon
            .post_event(&unique("late"), &update("ticket.updated", &entity, 9))
            .await;
        assert_eq!(locked["outcome"], "entity_locked", "{backend:?}: {locked}");
        assert_eq!(locked["held_by_run_id"], run.as_str());
        daemon.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn max_wait_bounds_a_steady_stream() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(db) = TestDb::create(backend).await else {
            continue;
        };
        let daemon = Daemon::start(&db, &config(&db, SETUP), &[]).await;
        let entity = unique("S");
        let started = Instant::now();
        let mut last_post = Instant::now();
        let mut widest_gap = Duration::ZERO;
        let mut members = 0;
        let mut dispatched = None;
        // An update every 300 ms: the 4 s quiet never passes, yet the run is dispatched once
        // max_wait (6 s) after the first.
        for n in 0..400 {
            let (_, answer) = daemon
                .post_event(&unique("s"), &update("ticket.status_changed", &entity, n))
                .await;
            widest_gap = widest_gap.max(last_post.elapsed());
            last_post = Instant::now();
            match answer["outcome"].as_str() {
                Some("routed" | "coalesced") => members += 1,
                Some("entity_locked") => {
                    assert!(
                        dispatched.is_some(),
                        "{backend:?}: locked before dispatch: {answer}"
                    );
                    break;
                }
                _ => panic!("{backend:?}: {answer}"),
            }
            if dispatched.is_none() {
                let claims = daemon.claim(&["stream"], 10).await;
                if let Some(claim) = claims.first() {
                    assert_eq!(claims.len(), 1);
                    dispatched = Some(claim["message"]["data"]["run"]["members"].clone());
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "{backend:?}: a steady stream kept the run from dispatch"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let members_seen = dispatched.expect("dispatched");
        assert!(members > 1, "{backend:?}: the stream coalesced");
        assert_eq!(
            members_seen.as_array().map_or(0, Vec::len),
            members,
            "{backend:?}: every member before dispatch is carried"
        );
        if widest_gap >= Duration::from_secs(4) {
            eprintln!(
                "{backend:?}: the machine paused {widest_gap:?} between updates; the quiet may have ended the window"
            );
        }
        assert_eq!(daemon.runs(&format!("entity={entity}")).await.len(), 1);
        daemon.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn kill_9_inside_a_window_still_makes_exactly_one_run() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(db) = TestDb::create(backend).await else {
            continue;
        };
        let daemon = Daemon::start(&db, &config(&db, SETUP), &[]).await;
        let config_path = daemon.config_path.clone();
        let entity = unique("K");
        for n in 0..3 {
            let (_, answer) = daemon
                .post_event(
                    &format!("k{n}-{entity}"),
                    &update("ticket.updated", &entity, n),
                )
                .await;
            let expected = if n == 0 { "routed" } else { "coalesced" };
            assert_eq!(answer["outcome"], expected, "{backend:?}: {answer}");
        }
        drop(daemon); // SIGKILL inside the window.
        let daemon = Daemon::start_with_file(&config_path, &[]).await;
        // The sender retries one it is unsure of, and two more arrive.
        let (_, retried) = daemon
            .post_event(
                &format!("k2-{entity}"),
                &update("ticket.updated", &entity, 2),
            )
            .await;
        assert_eq!(retried["outcome"], "duplicate", "{backend:?}: {retried}");
        for n in 3..5 {
            let (_, answer) = daemon
                .post_event(
                    &format!("k{n}-{entity}"),
                    &update("ticket.updated", &entity, n),
                )
                .await;
            assert_eq!(answer["outcome"], "coalesced", "{backend:?}: {answer}");
        }
        let claims = claim_when_due(&daemon, "updates").await;
        assert_eq!(claims.len(), 1, "{backend:?}");
        let data = &claims[0]["message"]["data"];
        assert_eq!(data["event"]["payload"]["n"], 4);
        assert_eq!(data["run"]["members"].as_array().map_or(0, Vec::len), 5);
        assert_eq!(daemon.runs(&format!("entity={entity}")).await.len(), 1);
        daemon.stop();
        db.drop_database().await;
    }
}
