//! Config revisions are kept: one row per revision that came into force (none for an unchanged
//! reload), with when it came in and went out, on every backend; `route --revision` explains
//! an event against a past revision, not today's.

use std::process::Command;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::access::{TOKEN_ENV, TOKENS, WORKFLOWS, call};
use super::harness::{Daemon, TestDb, binary, config, event, unique};

async fn revisions(daemon: &Daemon) -> Vec<Value> {
    daemon.get("/v1/revisions").await["revisions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Waits until the daemon has logged `n` revisions coming into force (start and reloads).
async fn wait_for_reloads(daemon: &Daemon, n: usize) {
    for _ in 0..500 {
        if daemon.logs().matches("config revision in force").count() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("reload {n} not applied:\n{}", daemon.logs());
}

#[tokio::test]
async fn revisions_are_kept_and_a_past_decision_is_explained_against_its_own() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let original = config(&db, &format!("{TOKENS}\n{WORKFLOWS}"));
        let daemon = Daemon::start(&db, &original, &TOKEN_ENV).await;
        let entity = unique("TCK");
        let (_, first) = daemon
            .post_event(
                &unique("d"),
                &event("webhook", "ticket.created", "acme", &entity),
            )
            .await;
        assert_eq!(first["outcome"], "routed", "{backend:?}");
        let listed = revisions(&daemon).await;
        assert_eq!(listed.len(), 1, "{backend:?}: {listed:?}");
        assert!(listed[0]["in_force_until"].is_null());
        let first_hash = listed[0]["config_revision"]
            .as_str()
            .expect("hash")
            .to_owned();
        assert_eq!(
            daemon.intake("").await[0]["config_revision"],
            first_hash.as_str()
        );

        // The same file again: no new revision.
        daemon.reload(&original);
        wait_for_reloads(&daemon, 2).await;
        assert_eq!(
            revisions(&daemon).await.len(),
            1,
            "{backend:?}: unchanged reload"
        );

        // triage disabled: a new revision, the first one closed.
        let changed = original.replacen("status = \"live\"", "status = \"disabled\"", 1);
        daemon.reload(&changed);
        wait_for_reloads(&daemon, 3).await;
        let listed = revisions(&daemon).await;
        assert_eq!(listed.len(), 2, "{backend:?}: {listed:?}");
        assert!(listed[0]["in_force_until"].is_null(), "{listed:?}");
        assert_eq!(listed[1]["config_revision"], first_hash.as_str());
        assert!(
            listed[1]["in_force_until"].is_string(),
            "closed: {listed:?}"
        );
        let (_, second) = daemon
            .post_event(
                &unique("d"),
                &event("webhook", "ticket.created", "acme", &unique("TCK")),
            )
            .await;
        assert_eq!(
            second["outcome"], "no_trigger_match",
            "{backend:?}: {second}"
        );

        // One revision by hash (as the ledger names it) or id, with its workflows; the
        // tenant-limited token sees only its own tenant's.
        let old = daemon.get(&format!("/v1/revisions/{first_hash}")).await;
        let old_by_id = daemon
            .get(&format!(
                "/v1/revisions/{}",
                listed[1]["id"].as_str().unwrap_or_default()
            ))
            .await;
        assert_eq!(old, old_by_id);
        let statuses: Vec<(String, String)> = old["content"]["workflows"]
            .as_array()
            .expect("workflows")
            .iter()
            .map(|w| {
                (
                    w["id"].as_str().unwrap_or("").into(),
                    w["status"].as_str().unwrap_or("").into(),
                )
            })
            .collect();
        assert!(
            statuses.contains(&("triage".into(), "live".into())),
            "{old}"
        );
        assert!(
            statuses.contains(&("globex-triage".into(), "live".into())),
            "{old}"
        );
        assert!(
            !old.to_string().contains("secret"),
            "no secrets in a revision: {old}"
        );
        let (_, limited) = call(
            &daemon,
            Method::GET,
            &format!("/v1/revisions/{first_hash}"),
            Some("acme-token-secret"),
            None,
        )
        .await;
        let ids: Vec<&str> = limited["content"]["workflows"]
            .as_array()
            .expect("workflows")
            .iter()
            .filter_map(|w| w["id"].as_str())
            .collect();
        assert_eq!(ids, ["triage"], "{backend:?}: {limited}");
        let (status, _) = daemon.get_status("/v1/revisions/0000000000000000").await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        // `route` explains against the file by default, against the old revision when asked.
        if backend == super::harness::Backend::Sqlite {
            let sample = db.dir.path().join("sample.json");
            std::fs::write(
                &sample,
                event("webhook", "ticket.created", "acme", &unique("TCK")).to_string(),
            )
            .expect("write sample");
            let route = |extra: &[&str]| {
                let output = Command::new(binary())
                    .args(["route", "--config"])
                    .arg(&daemon.config_path)
                    .arg("--event")
                    .arg(&sample)
                    .args(extra)
                    .envs(TOKEN_ENV)
                    .output()
                    .expect("run route");
                assert!(output.status.success(), "{output:?}");
                String::from_utf8_lossy(&output.stdout).into_owned()
            };
            let today = route(&[]);
            assert!(today.contains("ignored: `triage` is disabled"), "{today}");
            assert!(today.contains("outcome: no_trigger_match"), "{today}");
            let then = route(&["--revision", &first_hash]);
            assert!(
                then.contains(&format!("stored config revision {first_hash}")),
                "{then}"
            );
            assert!(
                then.contains("1. `triage` at priority 100  <- wins"),
                "{then}"
            );
            assert!(then.contains("outcome: routed to `triage`"), "{then}");
        }
        daemon.stop();
        db.drop_database().await;
    }
}
