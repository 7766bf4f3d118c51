//! Retention on every database: rows past their window go, in the background, while active
//! runs, newer rows and deduplication stay; on SQLite the file gives the space back.

use std::future::Future;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement};
use serde_json::{Value, json};

use super::harness::{Backend, Daemon, TOKEN, TestDb, binary, config, event, run_id, unique};

const SHORT_RETENTION: &str = r#"
[retention]
ledger = "3s"
raw = "2s"
finished_runs = "3s"
interval = "200ms"

[[workflow]]
id = "work"
tenant = "acme"
status = "live"
run_as = "acme-agent"
lock_ttl = "1h"
triggers = [ { channel = "chat", event_type = "message", priority = 1 } ]
"#;

/// Polls `condition` until it holds; fails with `what` after `timeout`.
async fn eventually<F, Fut>(what: &str, timeout: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !condition().await {
        assert!(
            Instant::now() < deadline,
            "{what}: still not so after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `SELECT COUNT(*) ...` on the test database.
async fn count(conn: &DatabaseConnection, sql: &str) -> i64 {
    let backend = conn.get_database_backend();
    let row = conn
        .query_one_raw(Statement::from_string(
            backend,
            format!("SELECT COUNT(*) AS n {sql}"),
        ))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .expect("a count");
    row.try_get_by_index::<i64>(0).expect("count")
}

fn quoted(ids: &[&str]) -> String {
    ids.iter()
        .map(|id| format!("'{id}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn ledger_ids(daemon: &Daemon) -> Vec<String> {
    daemon.get("/v1/intake?limit=1000").await["intake"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|row| row["id"].as_str().map(str::to_owned))
        .collect()
}

fn intake_id(answer: &Value) -> String {
    answer["intake_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no intake_id in {answer}"))
        .to_owned()
}

#[tokio::test]
async fn expired_rows_go_while_active_runs_newer_rows_and_dedup_stay() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = Daemon::start(&db, &config(&db, SHORT_RETENTION), &[]).await;
        let conn = Database::connect(&db.url).await.expect("test connection");

        // Old: two runs that finish, one that stays active, one delivery that routes nowhere.
        let mut finished = Vec::new();
        let mut old_intake = Vec::new();
        for n in 0..2 {
            let (_, answer) = daemon
                .post_event(
                    &unique("done"),
                    &event("chat", "message", "acme", &format!("done-{n}")),
                )
                .await;
            assert_eq!(answer["outcome"], "routed", "{backend:?}: {answer}");
            finished.push(run_id(&answer));
            old_intake.push(intake_id(&answer));
        }
        let active_key = unique("active");
        let (_, active) = daemon
            .post_event(
                &active_key,
                &event("chat", "message", "acme", &unique("active")),
            )
            .await;
        let active_run = run_id(&active);
        let active_intake = intake_id(&active);
        let (_, unrouted) = daemon
            .post_event(
                &unique("unrouted"),
                &event("chat", "other", "acme", "nobody"),
            )
            .await;
        assert_eq!(unrouted["outcome"], "no_trigger_match", "{unrouted}");
        old_intake.push(intake_id(&unrouted));
        // The workers claim every run and finish two of them.
        assert_eq!(daemon.claim(&["work"], 10).await.len(), 3);
        for run in &finished {
            let (status, body) = daemon.finish(run, "completed").await;
            assert_eq!(status, StatusCode::OK, "{backend:?}: finish {run}: {body}");
        }
        let finished_refs: Vec<&str> = finished.iter().map(String::as_str).collect();
        let dispatch_rows = format!(
            "FROM dispatches WHERE run_id IN ({})",
            quoted(&finished_refs)
        );
        let history_rows = format!(
            "FROM run_history WHERE run_id IN ({})",
            quoted(&finished_refs)
        );
        let attempt_rows = format!(
            "FROM dispatch_attempts WHERE run_id IN ({})",
            quoted(&finished_refs)
        );
        assert_eq!(count(&conn, &dispatch_rows).await, 2);
        assert!(count(&conn, &history_rows).await >= 4, "routed + finished");

        // Younger than the ledger window when the old rows go, older than the raw one.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let (_, kept) = daemon
            .post_event(&unique("kept"), &event("chat", "other", "acme", "nobody"))
            .await;
        let kept_intake = intake_id(&kept);

        eventually(
            &format!("{backend:?}: the raw bytes of the kept row are pruned (410)"),
            Duration::from_secs(15),
            || async { daemon.raw(&format!("raw:{kept_intake}")).await.is_err() },
        )
        .await;
        let (status, body) = daemon.get_status(&format!("/v1/raw/{kept_intake}")).await;
        assert_eq!(
            status,
            StatusCode::GONE,
            "{backend:?}: raw bytes pruned, ledger row kept: {body}"
        );
        assert_eq!(body["error"], "expired", "{body}");

        eventually(
            &format!("{backend:?}: the finished runs and old ledger rows are pruned"),
            Duration::from_secs(15),
            || async {
                let ids = ledger_ids(&daemon).await;
                let mut gone = old_intake.iter().all(|id| !ids.contains(id));
                for run in &finished {
                    gone &= daemon.get_status(&format!("/v1/runs/{run}")).await.0
                        == StatusCode::NOT_FOUND;
                }
                gone
            },
        )
        .await;
        assert_eq!(count(&conn, &dispatch_rows).await, 0, "{backend:?}");
        assert_eq!(count(&conn, &attempt_rows).await, 0, "{backend:?}");
        assert_eq!(count(&conn, &history_rows).await, 0, "{backend:?}");
        for id in &old_intake {
            assert_eq!(
                daemon.raw(&format!("raw:{id}")).await,
                Err(StatusCode::NOT_FOUND),
                "{backend:?}: neither bytes nor ledger row are left"
            );
        }
        // The finished runs' entities keep their lock rows: fencing tokens only grow.
        assert_eq!(
            count(
                &conn,
                "FROM entity_locks WHERE target_entity_id IN ('done-0', 'done-1')"
            )
            .await,
            2,
            "{backend:?}: entity locks are never pruned"
        );

        // The active run, older than every window, is untouched, and so is its ledger row.
        let run = daemon.get(&format!("/v1/runs/{active_run}")).await;
        assert_eq!(run["status"], "dispatched", "{backend:?}: {run}");
        assert_eq!(run["dispatch"]["status"], "pending", "{run}");
        assert_eq!(run["history"].as_array().map(Vec::len), Some(2), "{run}");
        assert!(
            ledger_ids(&daemon).await.contains(&active_intake),
            "{backend:?}: the active run's ledger row is kept"
        );
        let (_, again) = daemon
            .post_event(
                &active_key,
                &event("chat", "message", "acme", &unique("active")),
            )
            .await;
        assert_eq!(again["outcome"], "duplicate", "{backend:?}: {again}");

        // Newer deliveries survive the passes that run meanwhile, and still deduplicate.
        let newer_key = unique("newer");
        let (_, newer) = daemon
            .post_event(&newer_key, &event("chat", "other", "acme", "nobody"))
            .await;
        let newer_intake = intake_id(&newer);
        let passes = daemon
            .logs()
            .matches("retention deleted expired rows")
            .count();
        assert!(passes > 0, "{backend:?}: every deleting pass is logged");
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert!(
            ledger_ids(&daemon).await.contains(&newer_intake),
            "{backend:?}"
        );
        assert!(
            daemon.raw(&format!("raw:{newer_intake}")).await.is_ok(),
            "{backend:?}: raw bytes younger than `raw` are kept"
        );
        let (_, redelivered) = daemon
            .post_event(&newer_key, &event("chat", "other", "acme", "nobody"))
            .await;
        assert_eq!(
            redelivered["outcome"], "duplicate",
            "{backend:?}: {redelivered}"
        );
        assert_eq!(redelivered["intake_id"], newer_intake, "{redelivered}");

        drop(conn);
        daemon.stop();
        db.drop_database().await;
    }
}

/// Bytes of the SQLite database and its WAL.
fn sqlite_bytes(dir: &Path) -> u64 {
    ["switchyard.db", "switchyard.db-wal"]
        .iter()
        .filter_map(|name| std::fs::metadata(dir.join(name)).ok())
        .map(|meta| meta.len())
        .sum()
}

/// Bytes of the SQLite database file alone.
fn file_bytes(dir: &Path) -> u64 {
    std::fs::metadata(dir.join("switchyard.db")).map_or(0, |meta| meta.len())
}

/// Deliveries per second of the churn test, and payload bytes each.
const RATE: u64 = 100;
const PAYLOAD: usize = 20 * 1024;

/// Posts `RATE` deliveries per second with `PAYLOAD`-byte payloads for `duration`; returns the
/// request bytes sent and the largest database size seen meanwhile.
async fn churn(daemon: &Daemon, dir: &Path, duration: Duration) -> (u64, u64) {
    let filler = "x".repeat(PAYLOAD);
    let start = Instant::now();
    let mut sent = 0u64;
    let mut largest = 0u64;
    let mut n = 0u64;
    while start.elapsed() < duration {
        // Ten concurrent deliveries per tick, ten ticks a second.
        let tick = start + Duration::from_millis(n * 1000 * 10 / RATE);
        tokio::time::sleep_until(tick.into()).await;
        let mut posts = Vec::new();
        for _ in 0..10 {
            let body = json!({
                "channel": "chat",
                "event_type": "other",
                "tenant_id": "acme",
                "target_entity_id": "churn",
                "payload": {"filler": filler},
            });
            sent += body.to_string().len() as u64;
            posts.push(async move {
                let (status, answer) = daemon.post_event(&unique("churn"), &body).await;
                assert_eq!(status, StatusCode::OK, "churn delivery: {answer}");
            });
        }
        futures::future::join_all(posts).await;
        n += 1;
        largest = largest.max(sqlite_bytes(dir));
    }
    (sent, largest)
}

/// On SQLite a steady load at a 2 s retention keeps the file (and WAL) bounded, also after the
/// windows shrink on a database that held much more: freed pages go back to the file system.
#[tokio::test]
async fn sqlite_gives_the_space_back_under_steady_churn() {
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let long = "[retention]\nledger = \"1h\"\nraw = \"1h\"\ninterval = \"200ms\"\n";
    let short = "[retention]\nledger = \"2s\"\nraw = \"2s\"\nfinished_runs = \"2s\"\n\
                 interval = \"200ms\"\n";
    let daemon = Daemon::start(&db, &config(&db, long), &[]).await;
    // Phase 1: ten seconds of traffic kept (a database from before a shorter retention).
    let (sent_before, grown) = churn(&daemon, db.dir.path(), Duration::from_secs(10)).await;
    let grown_file = file_bytes(db.dir.path());
    daemon.reload(&config(&db, short));
    eventually(
        "the shorter retention is in force",
        Duration::from_secs(10),
        || async { daemon.logs().matches("config revision in force").count() >= 2 },
    )
    .await;
    // Phase 2: the same load under a 2 s retention. Let the first passes catch up, then
    // watch the size for the rest.
    churn(&daemon, db.dir.path(), Duration::from_secs(3)).await;
    let (sent, largest) = churn(&daemon, db.dir.path(), Duration::from_secs(5)).await;
    // Under churn the file and WAL stay below what ten seconds of kept deliveries took: a
    // 2 s window plus one 200 ms interval keeps about three seconds' worth. Passes run late on
    // a loaded machine (phase 2 measured 0.48 of phase 1 on a quiet one, 0.76-0.78 on loaded
    // ones), so this bound is phase 1 itself, relative so a slower machine moves both sides.
    assert!(
        largest < grown,
        "the SQLite file and WAL reached {largest} bytes under steady churn ({} bytes/s sent); \
         phase 1 kept {grown} bytes after 10 s ({sent_before} bytes sent)",
        sent / 5
    );
    // Once the churn stops everything expires, and the database file itself shrinks to a
    // fraction of phase 1's. Without incremental vacuum it never shrinks: freed pages are
    // reused, never given back to the file system.
    let shrunk_below = grown_file / 4;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let file = file_bytes(db.dir.path());
        if file < shrunk_below {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the database file gives the space of expired rows back within 90 s: still {file} \
             bytes, not below {shrunk_below} (a quarter of phase 1's {grown_file}), WAL {} \
             bytes; the daemon's log:\n{}",
            sqlite_bytes(db.dir.path()) - file,
            daemon.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(daemon.logs().contains("retention deleted expired rows"));
    daemon.stop();
}

/// `check` warns when the ledger is kept for less time than a source's sender retries.
#[test]
fn check_warns_when_the_ledger_outlives_no_retry_window() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("switchyard.toml");
    let example = std::fs::read_to_string(format!(
        "{}/examples/all-sources.toml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("example");
    let check = |ledger: &str| {
        std::fs::write(
            &path,
            format!("{example}\n[retention]\nledger = \"{ledger}\"\nraw = \"1m\"\n"),
        )
        .expect("write");
        let output = Command::new(binary())
            .args(["check", "--config"])
            .arg(&path)
            .env("SWITCHYARD_API_TOKEN", TOKEN)
            .env("ZENDESK_ACME_SECRET", "s")
            .env("SLACK_SIGNING_SECRET", "s")
            .env("SUPPORT_IMAP_PASSWORD", "s")
            .env("GITHUB_WEBHOOK_SECRET", "s")
            .env("STRIPE_WEBHOOK_SECRET", "s")
            .env("SHOPIFY_WEBHOOK_SECRET", "s")
            .env("INTERCOM_CLIENT_SECRET", "s")
            .env(
                "TRIAGE_WORKER_SECRET",
                "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
            )
            .env(
                "BILLING_EVENTS_SECRET",
                "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
            )
            .output()
            .expect("run check");
        let out = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(output.status.success(), "{out}");
        out.lines()
            .filter(|line| line.contains("retention.ledger"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let warnings = check("1m");
    assert_eq!(
        warnings.len(),
        7,
        "slack, webhook, cloudevents and the four json_webhooks: {warnings:?}"
    );
    assert!(
        warnings
            .iter()
            .all(|w| w
                .contains("deduplication of redeliveries lasts only as long as the ledger row")),
        "{warnings:?}"
    );
    let warnings = check("1h");
    assert_eq!(warnings.len(), 6, "{warnings:?}");
    assert!(
        warnings[0].contains("webhook source `zendesk-acme`"),
        "{warnings:?}"
    );
    assert!(
        warnings[1].contains("cloudevents source `billing`"),
        "{warnings:?}"
    );
    assert!(
        warnings[3].contains("json_webhook source `stripe-payments`"),
        "{warnings:?}"
    );
    let warnings = check("2d");
    assert_eq!(
        warnings.len(),
        1,
        "only Stripe retries for longer: {warnings:?}"
    );
    assert!(
        warnings[0].contains("Stripe retries for up to three days"),
        "{warnings:?}"
    );
    assert!(check("4d").is_empty(), "email never warns");
}
