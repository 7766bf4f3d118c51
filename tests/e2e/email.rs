//! Support mailboxes end to end: a real Dovecot (`.ci/dovecot.sh`), the real daemon, messages
//! appended over IMAP as a mail server would deliver them.

use std::time::Duration;

use async_imap::Session;
use serde_json::Value;
use tokio::net::TcpStream;

use super::harness::{Backend, Daemon, TestDb, config, in_ci, unique};

// The one Dovecot every email test uses: `exclusive` to stop it, `shared` otherwise.
#[path = "../support/dovecot.rs"]
mod shared_dovecot;
use shared_dovecot::{StartOnDrop, dovecot};
pub(super) use shared_dovecot::{exclusive, shared};
const USER: &str = "support@example.com";
const PASSWORD: &str = "secret";

/// The Dovecot address, or `None` (after saying so) when there is none and this is not CI.
pub(super) fn imap_server() -> Option<String> {
    match std::env::var("SWITCHYARD_TEST_IMAP") {
        Ok(addr) => Some(addr),
        Err(_) => {
            assert!(
                !in_ci(),
                "CI=true but SWITCHYARD_TEST_IMAP is not set: .ci/run starts Dovecot"
            );
            super::harness::skipped(
                "SKIPPED: email end-to-end tests need Dovecot; run `bash .ci/dovecot.sh start` and set \
                 SWITCHYARD_TEST_IMAP=127.0.0.1:10143",
            );
            None
        }
    }
}

pub(super) type Client = Session<TcpStream>;

pub(super) async fn imap(addr: &str) -> Client {
    let tcp = TcpStream::connect(addr).await.expect("connect to Dovecot");
    let mut client = async_imap::Client::new(tcp);
    client
        .read_response()
        .await
        .expect("greeting")
        .expect("greeting");
    client
        .login(USER, PASSWORD)
        .await
        .map_err(|e| e.0)
        .expect("login")
}

pub(super) async fn recreate(client: &mut Client, mailbox: &str) {
    let _ = client.delete(mailbox).await;
    client.create(mailbox).await.expect("create mailbox");
}

/// A new, empty mailbox with a unique name, a unique source name to read it as, and a client.
pub(super) async fn fresh_mailbox(addr: &str) -> (String, String, Client) {
    let (source, mailbox) = (unique("inbox"), unique("box"));
    let mut client = imap(addr).await;
    recreate(&mut client, &mailbox).await;
    (source, mailbox, client)
}

pub(super) async fn append(client: &mut Client, mailbox: &str, raw: &[u8]) {
    client
        .append(mailbox, None, None, raw)
        .await
        .expect("append");
}

pub(super) fn message(tag: &str, n: u32, headers: &str) -> Vec<u8> {
    format!(
        "From: Customer {n} <customer{n}@customer.example>\r\nTo: support@example.com\r\n\
         Subject: {tag} message {n}\r\nDate: Tue, 10 Nov 2026 09:15:00 +0100\r\n\
         Message-ID: <{tag}-{n}@test.example>\r\n{headers}Content-Type: text/plain; charset=utf-8\r\n\r\n\
         Body of {tag} message {n}.\r\n"
    )
    .into_bytes()
}

fn email_config(db: &TestDb, addr: &str, name: &str, mailbox: &str) -> String {
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    config(
        db,
        &format!(
            r#"
[[source]]
kind = "email"
name = "{name}"
tenant = "acme"
host = "{host}"
port = {port}
security = "plain"
username = "{USER}"
password_env = "SUPPORT_IMAP_PASSWORD"
mailbox = "{mailbox}"
poll_interval = "200ms"
# These tests append mail before the first connection and expect all of it.
start_from = "beginning"

[[workflow]]
id = "mail-triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [
  {{ channel = "email", event_type = "email.received", priority = 10 }},
  {{ channel = "email", event_type = "email.reply", priority = 10 }},
]
"#
        ),
    )
}

async fn start(db: &TestDb, text: &str) -> Daemon {
    Daemon::start(db, text, &[("SUPPORT_IMAP_PASSWORD", PASSWORD)]).await
}

/// Polls the ledger of `source` until it has `count` rows (or fails after `limit`).
pub(super) async fn wait_for_rows(
    daemon: &Daemon,
    source: &str,
    count: usize,
    limit: Duration,
) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let rows = daemon.intake(&format!("source={source}&limit=1000")).await;
        if rows.len() >= count {
            return rows;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "expected {count} ledger rows of {source}, have {}: {rows:#?}\n{}",
            rows.len(),
            daemon.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(super) fn outcomes(rows: &[Value]) -> Vec<String> {
    let mut rows: Vec<&Value> = rows.iter().collect();
    rows.sort_by_key(|r| r["id"].as_str().map(str::to_owned));
    rows.iter()
        .map(|r| r["outcome"].as_str().unwrap_or("?").to_owned())
        .collect()
}

#[tokio::test]
async fn new_mail_routes_and_a_reply_in_the_thread_is_entity_locked() {
    let Some(addr) = imap_server() else { return };
    let _shared = shared().await;
    for db in TestDb::all().await {
        let (source, mailbox, mut client) = fresh_mailbox(&addr).await;
        let daemon = start(&db, &email_config(&db, &addr, &source, &mailbox)).await;

        append(&mut client, &mailbox, &message("thread", 1, "")).await;
        let rows = wait_for_rows(&daemon, &source, 1, Duration::from_secs(20)).await;
        assert_eq!(rows[0]["outcome"], "routed", "{:?}: {rows:#?}", db.backend);
        let event = &rows[0]["event"];
        assert_eq!(event["channel"], "email");
        assert_eq!(event["event_type"], "email.received");
        assert_eq!(event["tenant_id"], "acme");
        assert_eq!(event["target_entity_id"], "thread-1@test.example");
        let run_id = rows[0]["run_id"].as_str().expect("run").to_owned();

        let reply =
            "In-Reply-To: <thread-1@test.example>\r\nReferences: <thread-1@test.example>\r\n";
        let mut raw = message("reply", 1, reply);
        raw = String::from_utf8_lossy(&raw)
            .replace("Subject: reply message 1", "Subject: Re: thread message 1")
            .into_bytes();
        append(&mut client, &mailbox, &raw).await;
        let rows = wait_for_rows(&daemon, &source, 2, Duration::from_secs(20)).await;
        assert_eq!(rows[0]["outcome"], "entity_locked", "{rows:#?}");
        assert_eq!(rows[0]["event"]["event_type"], "email.reply");
        assert_eq!(rows[0]["held_by_run_id"], run_id.as_str());

        // The raw RFC 5322 bytes are kept for raw_ref.
        let raw_ref = rows[1]["event"]["raw_ref"].as_str().expect("raw_ref");
        let stored =
            String::from_utf8(daemon.raw(raw_ref).await.expect("raw bytes")).expect("text");
        assert!(stored.contains("Message-ID: <thread-1@test.example>"));
        daemon.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn a_killed_daemon_neither_loses_nor_repeats_messages() {
    let Some(addr) = imap_server() else { return };
    let _shared = shared().await;
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let (source, mailbox, mut client) = fresh_mailbox(&addr).await;
    // The same file both times: a restarted daemon reclaims its own poller lease at once.
    let path = db.dir.path().join("crash.toml");
    std::fs::write(&path, email_config(&db, &addr, &source, &mailbox)).expect("write config");
    let env = [("SUPPORT_IMAP_PASSWORD", PASSWORD)];
    for n in 0..30 {
        append(&mut client, &mailbox, &message("crash", n, "")).await;
    }
    let daemon = Daemon::start_with_file(&path, &env).await;
    // Kill it (SIGKILL: no graceful anything) once it is part-way through.
    wait_for_rows(&daemon, &source, 3, Duration::from_secs(20)).await;
    drop(daemon);
    for n in 30..40 {
        append(&mut client, &mailbox, &message("crash", n, "")).await;
    }
    let daemon = Daemon::start_with_file(&path, &env).await;
    let rows = wait_for_rows(&daemon, &source, 40, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rows_after = daemon.intake(&format!("source={source}&limit=1000")).await;
    assert_eq!(rows_after.len(), rows.len(), "nothing more arrives");
    assert_eq!(rows.len(), 40, "every message exactly once");
    let mut ids: Vec<&str> = rows
        .iter()
        .filter_map(|r| r["delivery_id"].as_str())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 40);
    assert!(outcomes(&rows).iter().all(|o| o == "routed"), "{rows:#?}");
    daemon.stop();
}

#[tokio::test]
async fn a_uidvalidity_change_causes_no_duplicates_and_a_bad_message_blocks_nothing() {
    let Some(addr) = imap_server() else { return };
    let _shared = shared().await;
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let (source, mailbox, mut client) = fresh_mailbox(&addr).await;
    let daemon = start(&db, &email_config(&db, &addr, &source, &mailbox)).await;

    append(&mut client, &mailbox, &message("uv", 1, "")).await;
    append(
        &mut client,
        &mailbox,
        b"\x00\x01 this is not a mail message \xff",
    )
    .await;
    append(&mut client, &mailbox, &message("uv", 2, "")).await;
    let rows = wait_for_rows(&daemon, &source, 3, Duration::from_secs(20)).await;
    assert_eq!(
        outcomes(&rows),
        ["routed", "invalid_event", "routed"],
        "{rows:#?}"
    );

    // Recreate the mailbox (a new UIDVALIDITY) with the same two messages and one new one.
    recreate(&mut client, &mailbox).await;
    append(&mut client, &mailbox, &message("uv", 1, "")).await;
    append(&mut client, &mailbox, &message("uv", 2, "")).await;
    append(&mut client, &mailbox, &message("uv", 3, "")).await;
    wait_for_rows(&daemon, &source, 4, Duration::from_secs(20)).await;
    // Give a wrongly repeated uv-1/uv-2 time to show up.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let rows = daemon.intake(&format!("source={source}&limit=1000")).await;
    assert_eq!(
        rows.len(),
        4,
        "only uv-3 is new after the rescan: {rows:#?}"
    );
    assert_eq!(daemon.runs("tenant=acme&limit=1000").await.len(), 3);
    daemon.stop();
}

#[tokio::test]
async fn auto_replies_and_own_mail_are_ineligible() {
    let Some(addr) = imap_server() else { return };
    let _shared = shared().await;
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let (source, mailbox, mut client) = fresh_mailbox(&addr).await;
    let daemon = start(&db, &email_config(&db, &addr, &source, &mailbox)).await;
    append(
        &mut client,
        &mailbox,
        &message("auto", 1, "Auto-Submitted: auto-replied\r\n"),
    )
    .await;
    append(
        &mut client,
        &mailbox,
        &message("bulk", 1, "Precedence: bulk\r\n"),
    )
    .await;
    let own = String::from_utf8_lossy(&message("own", 1, "")).replace(
        "From: Customer 1 <customer1@customer.example>",
        "From: Support <support@example.com>",
    );
    append(&mut client, &mailbox, own.as_bytes()).await;
    let rows = wait_for_rows(&daemon, &source, 3, Duration::from_secs(20)).await;
    assert_eq!(
        outcomes(&rows),
        ["ineligible", "ineligible", "ineligible"],
        "{rows:#?}"
    );
    assert!(daemon.runs("").await.is_empty());
    daemon.stop();
}

#[tokio::test]
async fn a_server_outage_is_visible_in_readyz_and_survived() {
    let Some(addr) = imap_server() else { return };
    let _exclusive = exclusive().await;
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let (source, mailbox, mut client) = fresh_mailbox(&addr).await;
    let daemon = start(&db, &email_config(&db, &addr, &source, &mailbox)).await;
    append(&mut client, &mailbox, &message("outage", 1, "")).await;
    wait_for_rows(&daemon, &source, 1, Duration::from_secs(20)).await;
    drop(client);

    dovecot("stop");
    // Whatever happens next, the other tests need the server back.
    let _restart = StartOnDrop;
    let readyz = || async {
        // The detail (sources, their errors) is shown only to a token.
        let response = daemon
            .client()
            .get(daemon.url("/readyz"))
            .bearer_auth(super::harness::TOKEN)
            .send()
            .await
            .expect("readyz");
        (
            response.status().as_u16(),
            response.json::<Value>().await.expect("json"),
        )
    };
    let mut seen_unready = None;
    for _ in 0..300 {
        let (status, body) = readyz().await;
        if status == 503 {
            seen_unready = Some(body);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    dovecot("start");
    let body = seen_unready.expect("readyz turned 503 while the IMAP server was down");
    assert_eq!(body["unhealthy_sources"][0], source.as_str(), "{body}");
    let status = &body["sources"][source.as_str()];
    assert!(
        status["consecutive_failures"].as_u64().unwrap_or(0) >= 3,
        "{body}"
    );
    assert!(status["last_error"].is_string(), "{body}");

    let mut client = imap(&addr).await;
    append(&mut client, &mailbox, &message("outage", 2, "")).await;
    let rows = wait_for_rows(&daemon, &source, 2, Duration::from_secs(90)).await;
    assert_eq!(outcomes(&rows), ["routed", "routed"]);
    let (status, body) = readyz().await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["sources"][source.as_str()]["consecutive_failures"], 0);
    daemon.stop();
}

#[tokio::test]
async fn two_daemons_on_one_database_poll_a_mailbox_once() {
    let Some(addr) = imap_server() else { return };
    let _shared = shared().await;
    // PostgreSQL is how replicas share a database; SQLite (one file) stands in without it.
    let db = match TestDb::create(Backend::Postgres).await {
        Some(db) => db,
        None => TestDb::create(Backend::Sqlite).await.expect("sqlite"),
    };
    let (source, mailbox, mut client) = fresh_mailbox(&addr).await;
    let text = email_config(&db, &addr, &source, &mailbox);
    let a = start(&db, &text).await;
    let b = start(&db, &text).await;
    for n in 0..10 {
        append(&mut client, &mailbox, &message("pair", n, "")).await;
    }
    wait_for_rows(&a, &source, 10, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let rows = a.intake(&format!("source={source}&limit=1000")).await;
    assert_eq!(rows.len(), 10, "each message once: {rows:#?}");
    let mut holding = 0;
    for daemon in [&a, &b] {
        let sources = daemon.get("/v1/sources").await;
        if sources["sources"][0]["status"]["holds_lease"] == true {
            holding += 1;
        }
    }
    assert_eq!(holding, 1, "exactly one replica polls the mailbox");
    a.stop();
    b.stop();
    db.drop_database().await;
}

#[tokio::test]
async fn a_reload_starts_and_stops_mailbox_pollers() {
    let Some(addr) = imap_server() else { return };
    let _shared = shared().await;
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let (source, mailbox, mut client) = fresh_mailbox(&addr).await;
    let with_mailbox = email_config(&db, &addr, &source, &mailbox);
    let without = config(&db, "");
    let daemon = start(&db, &without).await;
    append(&mut client, &mailbox, &message("reload", 1, "")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(daemon.intake("").await.is_empty(), "no email source yet");

    daemon.reload(&with_mailbox);
    let rows = wait_for_rows(&daemon, &source, 1, Duration::from_secs(20)).await;
    assert_eq!(rows[0]["outcome"], "routed");
    let sources = daemon.get("/v1/sources").await;
    assert_eq!(sources["sources"][0]["name"], source.as_str());

    // Removing the source stops its poller: new mail stays unread.
    daemon.reload(&without);
    assert!(
        daemon
            .wait_for_log("stopping the mailbox poller", Duration::from_secs(10))
            .await,
        "{}",
        daemon.logs()
    );
    append(&mut client, &mailbox, &message("reload", 2, "")).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(daemon.intake("").await.len(), 1);
    assert_eq!(
        daemon.get("/v1/sources").await["sources"],
        serde_json::json!([])
    );
    daemon.stop();
}

/// A source `rate` on a mailbox: past it the poller stops taking mail for that poll, leaves
/// its cursor before the refused message and takes it later; the mailbox is the queue, so
/// every message ends routed exactly once, and the mailbox never counts as failing.
#[tokio::test]
async fn a_rate_limited_mailbox_stops_the_poll_and_takes_the_mail_later() {
    let Some(addr) = imap_server() else { return };
    let _shared = shared().await;
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(db) = TestDb::create(backend).await else {
            continue;
        };
        let (source, mailbox, mut client) = fresh_mailbox(&addr).await;
        let text = format!(
            "{}\n[rates.source]\n\"{source}\" = {{ limit = 2, per = \"8s\" }}\n",
            email_config(&db, &addr, &source, &mailbox)
        );
        let daemon = start(&db, &text).await;
        for n in 0..3 {
            append(&mut client, &mailbox, &message("limited", n, "")).await;
        }
        // The third message is refused (recorded), then taken once the rate admits it.
        let mut refused = false;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let rows = daemon.intake(&format!("source={source}&limit=1000")).await;
            refused |= rows.iter().any(|r| r["outcome"] == "rate_limited");
            let routed = rows.iter().filter(|r| r["outcome"] == "routed").count();
            if routed == 3 {
                assert_eq!(
                    rows.len(),
                    3,
                    "{backend:?}: the refusal was replaced: {rows:#?}"
                );
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{backend:?}: {rows:#?}\n{}",
                daemon.logs()
            );
            let ready = daemon.get_status("/readyz").await;
            assert_eq!(ready.0, reqwest::StatusCode::OK, "{backend:?}: {}", ready.1);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            refused,
            "{backend:?}: the rate refused the third message at first"
        );
        assert!(daemon.logs().contains("stopped taking mail for this poll"));
        daemon.stop();
        db.drop_database().await;
    }
}
