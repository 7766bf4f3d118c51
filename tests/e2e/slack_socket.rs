//! Slack Socket Mode end to end (issue 34): the daemon opens its connections at a local Slack
//! (`slack_socket/peer.rs`: `apps.connections.open`, a WebSocket server speaking Slack's
//! envelope protocol, the Web API), takes every envelope down the HTTP callback's path and
//! acknowledges it only after the commit; refreshes leave no gap; replicas on one PostgreSQL
//! database make one run per event; Enterprise Grid events land in their workspaces' tenants.

pub mod peer;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use self::peer::{APP_TOKEN, BOT_TOKEN, Happening, Peer};
use super::harness::{Backend, Daemon, TestDb, config, unique};

const SOURCE: &str = "acme-socket";

/// Distinct message timestamps: one message's copies share a message key (a duplicate).
static TS: AtomicU64 = AtomicU64::new(1);

/// A socket source of `connections` connections at `peer`, with `teams` (TOML inline table
/// body) and `extra` keys, and a `message` workflow per tenant.
fn setup(peer: &Peer, connections: u8, teams: &str, extra: &str) -> String {
    format!(
        r#"
[[source]]
kind = "slack"
name = "{SOURCE}"
mode = "socket"
app_token_env = "SLACK_APP_TOKEN"
bot_token_env = "SLACK_BOT_TOKEN"
api_base_url = "{}"
connections = {connections}
teams = {{ {teams} }}
{extra}

[[workflow]]
id = "acme-triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ {{ channel = "slack", event_type = "message", priority = 10 }} ]

[[workflow]]
id = "globex-triage"
tenant = "globex"
status = "live"
run_as = "globex-agent"
triggers = [ {{ channel = "slack", event_type = "message", priority = 10 }} ]
"#,
        peer.api_base_url
    )
}

const ENV: [(&str, &str); 2] = [
    ("SLACK_APP_TOKEN", APP_TOKEN),
    ("SLACK_BOT_TOKEN", BOT_TOKEN),
];

async fn start(db: &TestDb, text: &str) -> Daemon {
    Daemon::start(db, &config(db, text), &ENV).await
}

/// An Events API `event_callback` of a plain message by a person in `team`.
fn message(team: &str, event_id: &str, text: &str) -> Value {
    json!({
        "token": "unused", "team_id": team, "api_app_id": "A0APP", "type": "event_callback",
        "event_id": event_id, "event_time": 1764633600,
        "event": {"type": "message", "channel": "C0GENERAL", "user": "U0PERSON", "text": text,
                  "ts": format!("1764633600.{:06}", TS.fetch_add(1, Ordering::Relaxed) % 1_000_000),
                  "channel_type": "channel", "team": team},
        "authorizations": [{"team_id": team, "user_id": "U0BOT", "is_bot": true,
                            "is_enterprise_install": false, "enterprise_id": null}],
    })
}

/// The ledger rows of `delivery_id`.
async fn rows(daemon: &Daemon, delivery_id: &str) -> Vec<Value> {
    daemon
        .intake(&format!("source={SOURCE}&delivery_id={delivery_id}"))
        .await
}

/// Waits until `delivery_id` has `count` ledger rows.
async fn wait_rows(daemon: &Daemon, delivery_id: &str, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rows = rows(daemon, delivery_id).await;
        if rows.len() >= count {
            return rows;
        }
        assert!(
            Instant::now() < deadline,
            "{delivery_id}: {} of {count} rows in 30 s: {rows:#?}",
            rows.len()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Slack deliveries this daemon answered `duplicate` (copies are answered, not recorded).
async fn duplicates(daemon: &Daemon) -> u64 {
    daemon
        .metrics()
        .await
        .lines()
        .find(|line| {
            line.starts_with("switchyard_deliveries_total{")
                && line.contains("source_kind=\"slack\"")
                && line.contains("outcome=\"duplicate\"")
        })
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

fn outcomes(rows: &[Value]) -> Vec<String> {
    let mut outcomes: Vec<String> = rows
        .iter()
        .map(|r| r["outcome"].as_str().unwrap_or_default().to_owned())
        .collect();
    outcomes.sort();
    outcomes
}

fn runs_of(rows: &[Value]) -> Vec<String> {
    rows.iter()
        .filter(|r| r["outcome"] == "routed")
        .filter_map(|r| r["run_id"].as_str().map(str::to_owned))
        .collect()
}

/// Events and clicks over Socket Mode: acked after the ledger row, the same outcomes as the
/// HTTP callback (routed, a Slack retry as `duplicate`, a button click judged as a resume); the
/// source's HTTP endpoint refuses unsigned callbacks (no signing secret configured); two
/// connections open, and `/readyz` and `/metrics` show them.
#[tokio::test]
async fn events_and_clicks_over_socket_mode_take_the_http_path_and_are_acked_after_commit() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let peer = Peer::start().await;
    let daemon = start(&db, &setup(&peer, 2, "T0ACME = \"acme\"", "")).await;
    let open = peer.wait_open(2).await;
    assert_eq!(open.len(), 2, "two connections by default");

    let event_id = unique("Ev");
    let envelope = peer.envelope_on(
        open[0],
        "events_api",
        message("T0ACME", &event_id, "printer on fire"),
    );
    assert!(peer.wait_acked(&envelope, Duration::from_secs(10)).await);
    // The ack came after the commit: the ledger row is already there.
    let first = rows(&daemon, &event_id).await;
    assert_eq!(outcomes(&first), ["routed"], "{first:#?}");
    assert_eq!(first[0]["event"]["tenant_id"], "acme");
    assert_eq!(first[0]["workflow_id"], "acme-triage");
    let raw = daemon
        .raw(first[0]["raw_ref"].as_str().expect("raw_ref"))
        .await
        .expect("raw bytes stored");
    assert_eq!(
        serde_json::from_slice::<Value>(&raw).expect("JSON")["event_id"],
        json!(event_id)
    );

    // Slack's retry of the same event over the other connection is a duplicate: answered with
    // the first copy's outcome, nothing new recorded.
    let duplicates = duplicates(&daemon).await;
    let retry = peer.envelope_on(
        open[1],
        "events_api",
        message("T0ACME", &event_id, "printer on fire"),
    );
    assert!(peer.wait_acked(&retry, Duration::from_secs(10)).await);
    assert_eq!(outcomes(&rows(&daemon, &event_id).await), ["routed"]);
    assert_eq!(self::duplicates(&daemon).await, duplicates + 1);

    // A team no tenant claims: refused for good (acked, so Slack stops), no run.
    let stranger = peer.envelope_on(
        open[0],
        "events_api",
        message("T0STRANGER", &unique("Ev"), "hi"),
    );
    assert!(peer.wait_acked(&stranger, Duration::from_secs(10)).await);

    // A button click whose value names no wait: judged as a resume, recorded no_wait_match.
    let trigger = unique("trigger");
    let click = json!({
        "type": "block_actions", "team": {"id": "T0ACME", "domain": "acme"},
        "user": {"id": "U0MANAGER", "username": "manager"}, "api_app_id": "A0APP",
        "trigger_id": trigger,
        "container": {"type": "message", "channel_id": "C0APPROVALS", "message_ts": "1764633600.000100"},
        "actions": [{"action_id": "approve", "type": "button", "value": "swyw_nothing", "action_ts": "1764633601.1"}],
    });
    let click_envelope = peer.envelope_on(open[1], "interactive", click);
    assert!(
        peer.wait_acked(&click_envelope, Duration::from_secs(10))
            .await
    );
    let clicked = rows(&daemon, &trigger).await;
    assert_eq!(outcomes(&clicked), ["no_wait_match"], "{clicked:#?}");
    assert!(
        !clicked[0].to_string().contains("swyw_nothing"),
        "the button's value is redacted in the ledger"
    );

    // Slash commands are not taken: acked, nothing recorded.
    let slash = peer.envelope_on(
        open[0],
        "slash_commands",
        json!({"command": "/x", "team_id": "T0ACME"}),
    );
    assert!(peer.wait_acked(&slash, Duration::from_secs(10)).await);

    // HTTP callbacks to a socket source without a signing secret are refused.
    let response = daemon
        .client()
        .post(daemon.url(&format!("/v1/ingest/slack/{SOURCE}")))
        .json(&message("T0ACME", &unique("Ev"), "forged"))
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    // Readiness and metrics show the connections.
    let (status, ready) = daemon.get_status("/readyz").await;
    assert_eq!(status, StatusCode::OK, "{ready:#}");
    let sockets = &ready["socket_mode"][SOURCE];
    assert_eq!(
        sockets["connections"].as_object().map(|c| c.len()),
        Some(2),
        "{ready:#}"
    );
    assert!(sockets["last_envelope_at"].is_i64(), "{ready:#}");
    let metrics = daemon.metrics().await;
    assert!(
        metrics.contains(&format!(
            "slack_socket_connections_open{{source=\"{SOURCE}\"}} 2"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "slack_socket_envelopes_total{{source=\"{SOURCE}\"}}"
        )),
        "{metrics}"
    );
    // The console's sources page shows them too.
    let console = super::console::Console::login(&daemon, super::harness::TOKEN).await;
    let page = console.page("/ui/sources").await;
    assert!(
        page.contains("Socket Mode: 2 of 2 connections open"),
        "{page}"
    );
}

/// An envelope whose ack never reached Slack, the daemon killed (-9) after the commit: Slack
/// sends it again to the restarted daemon, which answers it as a duplicate. One run.
#[tokio::test]
async fn an_unacked_envelope_redelivered_after_kill_9_makes_one_run() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let peer = Peer::start().await;
    let daemon = start(&db, &setup(&peer, 2, "T0ACME = \"acme\"", "")).await;
    peer.wait_open(2).await;
    peer.lose_acks(true);
    let event_id = unique("Ev");
    let envelope = peer
        .envelope("events_api", message("T0ACME", &event_id, "lost ack"))
        .await;
    let first = wait_rows(&daemon, &event_id, 1).await;
    assert_eq!(outcomes(&first), ["routed"]);
    let config_path = daemon.config_path.clone();
    drop(daemon); // SIGKILL
    // Every frame the killed daemon wrote is read (and its ack lost) before acks count again:
    // an ack still in the socket buffer would otherwise be taken after `lose_acks(false)`.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !peer.open().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        peer.open().is_empty(),
        "the killed daemon's Socket Mode connections were not closed within 30 s"
    );
    peer.lose_acks(false);
    assert!(!peer.acked(&envelope));

    let daemon = Daemon::start_with_file(&config_path, &ENV).await;
    // The killed daemon's connections are gone; the new ones open.
    let deadline = Instant::now() + Duration::from_secs(30);
    while peer.open().len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(peer.redeliver_unacked().await, 1);
    assert!(peer.wait_acked(&envelope, Duration::from_secs(10)).await);
    let all = rows(&daemon, &event_id).await;
    assert_eq!(outcomes(&all), ["routed"], "{all:#?}");
    assert_eq!(runs_of(&all).len(), 1);
    assert_eq!(
        duplicates(&daemon).await,
        1,
        "the redelivery was answered duplicate"
    );
}

/// `refresh_requested` and `warning`: the replacement connection opens before the old one
/// closes, so the source is never unconnected, and envelopes keep flowing. `link_disabled`:
/// no reconnect loop, and the source is unready.
#[tokio::test]
async fn a_refresh_opens_the_replacement_first_and_link_disabled_stops() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let peer = Peer::start().await;
    let daemon = start(&db, &setup(&peer, 1, "T0ACME = \"acme\"", "")).await;
    for reason in ["refresh_requested", "warning"] {
        let old = peer.wait_open(1).await[0];
        peer.disconnect(old, reason, Duration::from_secs(2));
        let deadline = Instant::now() + Duration::from_secs(15);
        while !peer.happenings().contains(&Happening::Closed(old)) {
            assert!(
                Instant::now() < deadline,
                "{reason}: old connection not closed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let happenings = peer.happenings();
        let closed_at = happenings
            .iter()
            .position(|h| *h == Happening::Closed(old))
            .expect("closed");
        let replacement = happenings[..closed_at].iter().rev().find_map(|h| match h {
            Happening::Opened(id) if *id > old => Some(*id),
            _ => None,
        });
        assert!(
            replacement.is_some(),
            "{reason}: no replacement opened before connection {old} closed: {happenings:?}"
        );
        let event_id = unique("Ev");
        let envelope = peer
            .envelope("events_api", message("T0ACME", &event_id, reason))
            .await;
        assert!(peer.wait_acked(&envelope, Duration::from_secs(10)).await);
        assert_eq!(outcomes(&rows(&daemon, &event_id).await), ["routed"]);
    }
    let (_, ready) = daemon.get_status("/readyz").await;
    assert!(
        ready["socket_mode"][SOURCE]["reconnects"].as_u64() >= Some(2),
        "{ready:#}"
    );

    let old = peer.wait_open(1).await[0];
    peer.disconnect(old, "link_disabled", Duration::from_millis(300));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        peer.open().is_empty(),
        "no reconnect after link_disabled: {:?}",
        peer.happenings()
    );
    let (status, ready) = daemon.get_status("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{ready:#}");
    assert_eq!(
        ready["socket_mode"][SOURCE]["link_disabled"], true,
        "{ready:#}"
    );
    assert!(
        ready["unready_socket_sources"]
            .as_array()
            .is_some_and(|s| s.contains(&json!(SOURCE))),
        "{ready:#}"
    );
}

/// Two replicas on one PostgreSQL database, each with its own connections: every event sent on
/// every connection at once (as Slack's retries over several connections can) makes one run.
#[tokio::test]
async fn two_replicas_on_postgres_never_both_create_a_run_for_one_event() {
    let Some(db) = TestDb::create(Backend::Postgres).await else {
        return;
    };
    let peer = Peer::start().await;
    let text = config(&db, &setup(&peer, 2, "T0ACME = \"acme\"", ""));
    let first = Daemon::start(&db, &text, &ENV).await;
    let second = Daemon::start(&db, &text, &ENV).await;
    let open = peer.wait_open(4).await;
    let mut envelopes = Vec::new();
    let mut events = Vec::new();
    for n in 0..10 {
        let event_id = unique(&format!("Ev{n}"));
        for connection in &open {
            envelopes.push(peer.envelope_on(
                *connection,
                "events_api",
                message("T0ACME", &event_id, "race"),
            ));
        }
        events.push(event_id);
    }
    for envelope in &envelopes {
        assert!(
            peer.wait_acked(envelope, Duration::from_secs(30)).await,
            "{envelope}"
        );
    }
    for event_id in &events {
        let all = wait_rows(&first, event_id, 1).await;
        assert_eq!(outcomes(&all), ["routed"], "{event_id}: {all:#?}");
        assert_eq!(runs_of(&all).len(), 1, "{event_id}: {all:#?}");
    }
    let copies = envelopes.len() as u64 - events.len() as u64;
    assert_eq!(
        duplicates(&first).await + duplicates(&second).await,
        copies,
        "every other copy was answered duplicate"
    );
    drop(second);
    db.drop_database().await;
}

/// Enterprise Grid, org-wide install: events of two workspaces of one org land in the tenants
/// their workspaces are bound to, a third workspace of the org in the org's tenant, and a
/// message from another organisation in an externally shared channel is `ineligible`.
#[tokio::test]
async fn grid_events_land_in_their_workspaces_tenants() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let peer = Peer::start().await;
    let daemon = start(
        &db,
        &setup(
            &peer,
            2,
            "T0EAST = \"acme\", T0WEST = \"globex\"",
            "enterprises = { E0ORG = \"acme\" }",
        ),
    )
    .await;
    let grid = |context_team: &str, event_id: &str| {
        let mut body = message("T0EAST", event_id, "grid");
        body["enterprise_id"] = json!("E0ORG");
        body["context_team_id"] = json!(context_team);
        body["context_enterprise_id"] = json!("E0ORG");
        body["event"]["team"] = json!(context_team);
        body["authorizations"] = json!([{"enterprise_id": "E0ORG", "team_id": null,
            "user_id": "U0BOT", "is_bot": true, "is_enterprise_install": true}]);
        body
    };
    let mut expected = Vec::new();
    for (team, tenant, outcome) in [
        ("T0EAST", "acme", "routed"),
        ("T0WEST", "globex", "routed"),
        ("T0NORTH", "acme", "routed"),
    ] {
        let event_id = unique("Ev");
        let envelope = peer.envelope("events_api", grid(team, &event_id)).await;
        expected.push((event_id, envelope, tenant, outcome));
    }
    let shared_id = unique("Ev");
    let mut shared = grid("T0WEST", &shared_id);
    shared["is_ext_shared_channel"] = json!(true);
    shared["event"]["user_team"] = json!("T0PARTNER");
    let shared_envelope = peer.envelope("events_api", shared).await;
    expected.push((shared_id, shared_envelope, "globex", "ineligible"));
    let outsider_id = unique("Ev");
    let mut outsider = grid("T0SOUTH", &outsider_id);
    outsider["context_enterprise_id"] = json!("E0OTHER");
    outsider["enterprise_id"] = json!("E0OTHER");
    outsider["authorizations"][0]["enterprise_id"] = json!("E0OTHER");
    let outsider_envelope = peer.envelope("events_api", outsider).await;

    for (event_id, envelope, tenant, outcome) in &expected {
        assert!(peer.wait_acked(envelope, Duration::from_secs(10)).await);
        let rows = rows(&daemon, event_id).await;
        assert_eq!(outcomes(&rows), [*outcome], "{rows:#?}");
        assert_eq!(rows[0]["event"]["tenant_id"], *tenant, "{rows:#?}");
        if *outcome == "ineligible" {
            assert_eq!(rows[0]["detail"], "external_shared_channel:T0PARTNER");
        } else {
            assert_eq!(rows[0]["workflow_id"], format!("{tenant}-triage"));
        }
    }
    // Another org's workspace: refused for good (acked), nothing recorded, no run.
    assert!(
        peer.wait_acked(&outsider_envelope, Duration::from_secs(10))
            .await
    );
    assert!(rows(&daemon, &outsider_id).await.is_empty());
}
