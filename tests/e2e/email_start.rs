//! Where a mailbox seen for the first time starts (`start_from`), against the real Dovecot:
//! by default mail already there starts nothing and is counted as left behind; `beginning`
//! takes all of it; a date takes exactly the messages received since then, once each.

use std::time::Duration;

use serde_json::Value;

use super::email::{append, fresh_mailbox, imap_server, message, outcomes, wait_for_rows};
use super::harness::{Backend, Daemon, TestDb, config};

pub(super) const TRIAGE: &str = r#"
[[workflow]]
id = "mail-triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [
  { channel = "email", event_type = "email.received", priority = 10 },
  { channel = "email", event_type = "email.reply", priority = 10 },
]
"#;

fn source(addr: &str, name: &str, mailbox: &str, start_from: Option<&str>) -> String {
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    let start = start_from.map_or(String::new(), |s| format!("start_from = \"{s}\"\n"));
    format!(
        r#"
[[source]]
kind = "email"
name = "{name}"
tenant = "acme"
host = "{host}"
port = {port}
security = "plain"
username = "support@example.com"
password_env = "SUPPORT_IMAP_PASSWORD"
mailbox = "{mailbox}"
poll_interval = "200ms"
{start}"#
    )
}

/// The `/v1/sources` entry of `name`.
async fn listed(daemon: &Daemon, name: &str) -> Value {
    let sources = daemon.get("/v1/sources").await;
    sources["sources"]
        .as_array()
        .and_then(|all| all.iter().find(|s| s["name"] == name).cloned())
        .unwrap_or(Value::Null)
}

/// Waits until the poller of `name` has started its mailbox (and says where).
async fn started(daemon: &Daemon, name: &str) -> Value {
    for _ in 0..200 {
        let entry = listed(daemon, name).await;
        if entry["status"]["started"].is_object() && entry["status"]["connected"] == true {
            return entry["status"]["started"].clone();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{name} never started: {}\n{}",
        listed(daemon, name).await,
        daemon.logs()
    );
}

#[tokio::test]
async fn old_mail_starts_nothing_by_default_and_beginning_or_a_date_take_exactly_what_they_name() {
    let Some(addr) = imap_server() else { return };
    let _shared = super::email::shared().await;
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let (now_source, now_box, mut client) = fresh_mailbox(&addr).await;
    let (all_source, all_box, _) = fresh_mailbox(&addr).await;
    let (dated_source, dated_box, _) = fresh_mailbox(&addr).await;
    super::email::recreate(&mut client, &all_box).await;
    super::email::recreate(&mut client, &dated_box).await;
    for n in 0..3 {
        append(&mut client, &now_box, &message("history", n, "")).await;
        append(&mut client, &all_box, &message("all", n, "")).await;
    }
    // Old, new, old, new by internal date: the dated start takes exactly the two new ones.
    for n in 0..4 {
        // An IMAP date-time, quoted; none: now.
        let date = (n % 2 == 0).then_some("\"01-Mar-2020 10:00:00 +0000\"");
        client
            .append(&dated_box, None, date, message("dated", n, ""))
            .await
            .expect("append");
    }
    let text = config(
        &db,
        &format!(
            "{}{}{}{TRIAGE}",
            source(&addr, &now_source, &now_box, None),
            source(&addr, &all_source, &all_box, Some("beginning")),
            source(
                &addr,
                &dated_source,
                &dated_box,
                Some("2025-06-01T00:00:00Z")
            ),
        ),
    );
    let daemon = Daemon::start(&db, &text, &[("SUPPORT_IMAP_PASSWORD", "secret")]).await;

    let now_start = started(&daemon, &now_source).await;
    assert_eq!(now_start["start_from"], "now", "{now_start}");
    assert_eq!(now_start["left_behind"], 3, "{now_start}");
    assert_eq!(now_start["first_uid"], 4, "{now_start}");
    let all_start = started(&daemon, &all_source).await;
    assert_eq!(all_start["start_from"], "beginning");
    assert_eq!(all_start["left_behind"], 0);
    let dated_start = started(&daemon, &dated_source).await;
    assert_eq!(dated_start["start_from"], "2025-06-01T00:00:00+00:00");
    assert_eq!(dated_start["left_behind"], 2, "{dated_start}");

    // Mail that arrives later is taken from every mailbox.
    append(&mut client, &now_box, &message("later", 1, "")).await;
    append(&mut client, &dated_box, &message("dated-later", 1, "")).await;
    let rows = wait_for_rows(&daemon, &now_source, 1, Duration::from_secs(20)).await;
    let all = wait_for_rows(&daemon, &all_source, 3, Duration::from_secs(20)).await;
    wait_for_rows(&daemon, &dated_source, 3, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let rows_after = daemon
        .intake(&format!("source={now_source}&limit=100"))
        .await;
    assert_eq!(rows_after.len(), 1, "only the new message: {rows_after:#?}");
    assert_eq!(rows[0]["event"]["target_entity_id"], "later-1@test.example");
    assert_eq!(outcomes(&all), ["routed", "routed", "routed"]);
    let dated = daemon
        .intake(&format!("source={dated_source}&limit=100"))
        .await;
    let mut entities: Vec<&str> = dated
        .iter()
        .filter_map(|r| r["event"]["target_entity_id"].as_str())
        .collect();
    entities.sort_unstable();
    assert_eq!(
        entities,
        [
            "dated-1@test.example",
            "dated-3@test.example",
            "dated-later-1@test.example"
        ],
        "exactly the messages since the date, once each"
    );
    let sources_metrics = daemon.metrics().await;
    assert!(
        sources_metrics.contains(&format!(
            "switchyard_mailbox_left_behind_messages{{source=\"{now_source}\"}} 3"
        )),
        "{sources_metrics}"
    );
    // The console's Sources page says where each started.
    let console = super::console::Console::login(&daemon, super::harness::TOKEN).await;
    let (_, page) = console.get("/ui/sources").await;
    assert!(page.contains("3 messages left behind"), "{page}");
    daemon.stop();

    // A restart does not start the mailbox again: nothing old comes back.
    let daemon = Daemon::start(&db, &text, &[("SUPPORT_IMAP_PASSWORD", "secret")]).await;
    let again = started(&daemon, &now_source).await;
    assert_eq!(again, now_start, "the recorded start is kept");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        daemon
            .intake(&format!("source={now_source}&limit=100"))
            .await
            .len(),
        1
    );
    daemon.stop();
}
