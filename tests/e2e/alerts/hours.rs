//! `source_quiet` with business hours: quiet time counts only inside the hours of the rule's
//! time zone. The test sets the clock the rule reads by choosing the zone: a fixed-offset zone
//! (`Etc/GMT±N`) in which it is now about noon, so "09:00-17:00" holds the test's whole run
//! and "00:00-06:00" none of it, whatever the machine's time. The same quiet source then fires
//! the rule inside its hours and nothing for the rule outside them, and a delivery resolves
//! the first.

use std::time::{Duration, Instant};

use chrono::Timelike;

use super::super::harness::{Backend, Daemon, TestDb, config, event, unique};
use super::{alerts, env, eventually, notifiers, peers, secret};

/// A zone in which it is now between 12:00 and 12:59 (`Etc/GMT-3` is three hours *ahead* of
/// UTC: the sign of the Etc names is inverted).
fn zone_at_noon() -> String {
    let offset = 12 - i64::from(chrono::Utc::now().hour());
    match offset {
        0 => "Etc/GMT".to_owned(),
        o if o > 0 => format!("Etc/GMT-{o}"),
        o => format!("Etc/GMT+{}", -o),
    }
}

#[tokio::test]
async fn a_quiet_source_fires_only_the_rule_whose_business_hours_are_now_and_resolves_on_delivery()
{
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let (peers, hook, slack) = peers().await;
    let secret = secret();
    let env = env(&secret);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let zone = zone_at_noon();
    let days = r#"["mon", "tue", "wed", "thu", "fri", "sat", "sun"]"#;
    let rules = format!(
        r#"
[[alert]]
name = "office-hours"
kind = "source_quiet"
source = "api"
expect_within = "2s"
notify = ["ops-webhook"]
business_hours = {{ time_zone = "{zone}", days = {days}, start = "09:00", end = "17:00" }}

[[alert]]
name = "night-shift"
kind = "source_quiet"
source = "api"
expect_within = "1s"
notify = ["ops-webhook"]
business_hours = {{ time_zone = "{zone}", days = {days}, start = "00:00", end = "06:00" }}
"#
    );
    let daemon = Daemon::start(
        &db,
        &config(&db, &format!("{}{rules}", notifiers(&hook, &slack))),
        &env,
    )
    .await;

    // Quiet from the start: inside office hours that counts, and the rule fires.
    let started = Instant::now();
    let fired = loop {
        let listed = alerts(&daemon).await;
        if let Some(alert) = listed.iter().find(|a| a["rule"] == "office-hours") {
            break alert.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "office-hours did not fire: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(fired["state"], "firing", "{fired}");
    assert!(
        fired["numbers"]["quiet_secs"]
            .as_i64()
            .is_some_and(|s| s >= 1),
        "{fired}"
    );
    // Several more evaluations (200 ms each) of the same quiet: the night-shift rule, whose
    // hours are not now, counts no quiet time and fires nothing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let listed = alerts(&daemon).await;
    assert!(
        !listed.iter().any(|a| a["rule"] == "night-shift"),
        "quiet outside business hours fired: {listed:?}"
    );
    assert_eq!(listed.len(), 1, "{listed:?}");
    eventually("the firing's webhook", Duration::from_secs(20), || {
        !peers.seen.lock().expect("seen").webhooks.is_empty()
    })
    .await;

    // A delivery: office-hours resolves; night-shift still never fired.
    let (status, _) = daemon
        .post_event(
            &unique("hours"),
            &event("web_form", "ticket.created", "acme", "t-1"),
        )
        .await;
    assert!(status.is_success());
    eventually("the resolve's webhook", Duration::from_secs(20), || {
        peers.seen.lock().expect("seen").webhooks.len() >= 2
    })
    .await;
    // (The source may go quiet again right after: only the transitions are checked.)
    let listed = alerts(&daemon).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["rule"], "office-hours");
    assert!(
        listed[0]["resolved_at"].is_string() || listed[0]["episode"] != 1,
        "{listed:?}"
    );
    let seen = peers.seen.lock().expect("seen");
    assert_eq!(seen.webhooks[0]["type"], "switchyard.alert.fired");
    assert_eq!(seen.webhooks[1]["type"], "switchyard.alert.resolved");
    assert!(
        seen.webhooks
            .iter()
            .all(|w| w["data"]["rule"] == "office-hours"),
        "{:?}",
        seen.webhooks
    );
    drop(seen);
    daemon.stop();
}
