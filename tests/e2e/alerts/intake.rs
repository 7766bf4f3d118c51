//! `intake_unhealthy` end to end on two replicas sharing PostgreSQL: a writer that fails batch
//! after batch (the `writer_panic` failpoint) on one replica fires one alert (scope `intake`,
//! observed by that replica only) and one signed webhook; the healthy replica does not resolve
//! it; it resolves once the failing writer commits again.

use std::time::Duration;

use reqwest::StatusCode;

use super::super::harness::{Backend, Daemon, TestDb, config, event, unique};
use super::replicas::{observers, wait_observers};
use super::{alerts, env, eventually, firing_alerts, notifiers, peers, secret};

const RULE: &str = r#"
[[alert]]
name = "intake"
kind = "intake_unhealthy"
notify = ["ops-webhook"]
"#;

#[tokio::test]
async fn a_failing_intake_writer_fires_intake_unhealthy_once_and_it_resolves_when_it_commits_again()
{
    let Some(db) = TestDb::create(Backend::Postgres).await else {
        return;
    };
    let (peers, hook, slack) = peers().await;
    let poison = unique("poison");
    let failpoint = format!("writer_panic:{poison}");
    let secret = secret();
    let env = env(&secret);
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let text = config(&db, &format!("{}{RULE}", notifiers(&hook, &slack)));
    let healthy = Daemon::start(&db, &text, &env).await;
    env.push(("SWITCHYARD_FAILPOINT", failpoint.as_str()));
    let failing = Daemon::start(&db, &text, &env).await;

    // A sender retries a delivery its writer panics on: three failed batches in a row.
    for _ in 0..3 {
        let (status, answer) = failing
            .post_event(&poison, &event("webhook", "ticket.created", "acme", "p-1"))
            .await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    }
    let (_, ready) = failing.get_status("/readyz").await;
    assert_eq!(ready["intake"]["ok"], false, "{ready}");

    let listed = firing_alerts(&healthy).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let alert = &listed[0];
    assert_eq!(alert["rule"], "intake");
    assert_eq!(alert["kind"], "intake_unhealthy");
    assert_eq!(alert["scope"], "intake");
    assert!(
        alert["summary"]
            .as_str()
            .is_some_and(|s| s.contains("1 of 1 intake writers")),
        "{alert}"
    );
    let writers = alert["numbers"]["writers"].as_array().expect("writers");
    assert_eq!(writers[0]["consecutive_failures"], 3, "{alert}");
    assert_eq!(wait_observers(&healthy, "intake", 1).await.len(), 1);
    eventually("the firing's webhook", Duration::from_secs(20), || {
        !peers.seen.lock().expect("seen").webhooks.is_empty()
    })
    .await;

    // The healthy replica keeps evaluating and finds nothing wrong with its own writer: it
    // must not resolve what the other replica still sees.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let listed = alerts(&healthy).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["state"], "firing", "{listed:?}");
    assert_eq!(listed[0]["episode"], 1, "{listed:?}");
    assert_eq!(observers(&listed, "intake").len(), 1, "{listed:?}");
    assert_eq!(peers.seen.lock().expect("seen").webhooks.len(), 1);

    // The next delivery commits: the writer is healthy again, the alert resolves.
    let (status, answer) = failing
        .post_event(
            &unique("good"),
            &event("webhook", "ticket.created", "acme", "g-1"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    eventually("the resolve's webhook", Duration::from_secs(20), || {
        peers.seen.lock().expect("seen").webhooks.len() >= 2
    })
    .await;
    let (_, ready) = failing.get_status("/readyz").await;
    assert_eq!(ready["intake"]["ok"], true, "{ready}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let listed = alerts(&failing).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["state"], "resolved", "{listed:?}");
    {
        let seen = peers.seen.lock().expect("seen");
        assert_eq!(seen.webhooks.len(), 2, "{:?}", seen.webhooks);
        assert_eq!(seen.webhooks[0]["type"], "switchyard.alert.fired");
        assert_eq!(seen.webhooks[0]["data"]["kind"], "intake_unhealthy");
        assert_eq!(seen.webhooks[1]["type"], "switchyard.alert.resolved");
    }
    healthy.stop();
    failing.stop();
    db.drop_database().await;
}
