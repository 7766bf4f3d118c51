//! Alerts each replica judges from its own health, shared across replicas on one PostgreSQL
//! database: a refused reload on both replicas is one alert (scope `config`) and one signed
//! webhook; it stays firing while either replica still refuses (no resolve, no second firing)
//! and resolves, with one `resolved` notification, once both took a good config. A source never
//! heard from stays one quiet alert when a replica starts later or restarts.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::super::harness::{Backend, Daemon, TestDb, config};
use super::{alerts, env, eventually, firing_alerts, notifiers, peers, secret, two_replicas};

const RULE: &str = r#"
[[alert]]
name = "reloads"
kind = "reload_refused"
notify = ["ops-webhook"]
"#;

/// The replicas `observed_by` lists for the alert of `rule`.
pub(super) fn observers(listed: &[Value], rule: &str) -> Vec<String> {
    listed
        .iter()
        .find(|a| a["rule"] == rule)
        .and_then(|a| a["observed_by"].as_array())
        .map(|o| {
            o.iter()
                .filter_map(|o| o["replica"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until the alert of `rule` lists exactly `count` observers; returns them.
pub(super) async fn wait_observers(daemon: &Daemon, rule: &str, count: usize) -> Vec<String> {
    let started = Instant::now();
    loop {
        let listed = alerts(daemon).await;
        let seen = observers(&listed, rule);
        if seen.len() == count {
            return seen;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{rule}: not {count} observers: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_reload_refused_on_two_replicas_is_one_alert_that_resolves_only_once_both_recover() {
    let Some(db) = TestDb::create(Backend::Postgres).await else {
        return;
    };
    let (peers, text, first, second) = two_replicas(&db, RULE).await;

    first.reload("this is not toml [");
    let listed = firing_alerts(&first).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["kind"], "reload_refused");
    assert_eq!(
        listed[0]["scope"], "config",
        "the scope names what is wrong, not the replica"
    );
    let first_id = wait_observers(&first, "reloads", 1).await.remove(0);
    assert_eq!(listed[0]["numbers"]["replica"], first_id.as_str());

    // The second replica refuses it too: the same alert, now observed by both; no new one.
    second.reload("this is not toml [");
    let both = wait_observers(&second, "reloads", 2).await;
    assert!(both.contains(&first_id), "{both:?}");
    eventually("the firing's webhook", Duration::from_secs(20), || {
        !peers.seen.lock().expect("seen").webhooks.is_empty()
    })
    .await;

    // The first replica takes a good config: it withdraws its observation, but the second
    // still refuses, so the alert stays firing and nobody is told it resolved.
    first.reload(&text);
    let left = wait_observers(&first, "reloads", 1).await;
    assert_ne!(
        left,
        std::slice::from_ref(&first_id),
        "the first replica withdrew: {left:?}"
    );
    // Several evaluations of both replicas (200 ms each) pass; nothing changes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for daemon in [&first, &second] {
        let listed = alerts(daemon).await;
        assert_eq!(listed.len(), 1, "one alert across replicas: {listed:?}");
        assert_eq!(listed[0]["state"], "firing", "{listed:?}");
        assert_eq!(
            listed[0]["episode"], 1,
            "never resolved and refired: {listed:?}"
        );
    }
    {
        let seen = peers.seen.lock().expect("seen");
        assert_eq!(
            seen.webhooks.len(),
            1,
            "one notification: {:?}",
            seen.webhooks
        );
        assert_eq!(seen.webhooks[0]["type"], "switchyard.alert.fired");
        assert_eq!(seen.webhooks[0]["data"]["rule"], "reloads");
        assert_eq!(seen.webhooks[0]["data"]["scope"], "config");
    }

    // The second replica recovers too: resolved, one `resolved` notification.
    second.reload(&text);
    eventually("the resolve's webhook", Duration::from_secs(20), || {
        peers.seen.lock().expect("seen").webhooks.len() >= 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let listed = alerts(&first).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["state"], "resolved", "{listed:?}");
    assert_eq!(observers(&listed, "reloads"), Vec::<String>::new());
    {
        let seen = peers.seen.lock().expect("seen");
        assert_eq!(seen.webhooks.len(), 2, "{:?}", seen.webhooks);
        assert_eq!(seen.webhooks[1]["type"], "switchyard.alert.resolved");
        assert_eq!(seen.refused, 0, "every webhook was signed");
    }
    first.stop();
    second.stop();
    db.drop_database().await;
}

#[tokio::test]
async fn a_replica_started_later_keeps_a_never_heard_from_source_quiet_and_a_restart_too() {
    let Some(db) = TestDb::create(Backend::Postgres).await else {
        return;
    };
    let (peers, hook, slack) = peers().await;
    let secret = secret();
    let env = env(&secret);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let rule = r#"
[[alert]]
name = "api-quiet"
kind = "source_quiet"
source = "api"
expect_within = "3s"
notify = ["ops-webhook"]
"#;
    let text = config(&db, &format!("{}{rule}", notifiers(&hook, &slack)));
    let first = Daemon::start(&db, &text, &env).await;
    let listed = firing_alerts(&first).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    // A second replica starts now: by its own clock the source has been quiet for less than
    // 3 s, but the alert already firing says since when; it must not resolve it.
    let second = Daemon::start(&db, &text, &env).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The first replica restarts: the same.
    first.stop();
    let first = Daemon::start(&db, &text, &env).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let listed = alerts(&second).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["state"], "firing", "{listed:?}");
    assert_eq!(
        listed[0]["episode"], 1,
        "never resolved and re-raised: {listed:?}"
    );
    eventually("the firing's webhook", Duration::from_secs(20), || {
        !peers.seen.lock().expect("seen").webhooks.is_empty()
    })
    .await;
    let sent = peers.seen.lock().expect("seen").webhooks.len();
    assert_eq!(sent, 1, "one notification");
    first.stop();
    second.stop();
    db.drop_database().await;
}
