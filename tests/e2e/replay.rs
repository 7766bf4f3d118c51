//! Replays end to end on every backend: a diagnostic replay of a mixed day (routed,
//! duplicate, entity_locked after and before a run finished, invalid, ineligible,
//! no_trigger_match) under the original revision reproduces every outcome and writes nothing
//! live (row counts unchanged, the worker receives nothing); a candidate with a
//! higher-priority workflow moves exactly the deliveries it should (API, CLI and
//! `check --candidate --against-ledger`); a live replay run twice makes one new run per
//! delivery, linked back to the original and the replay.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::routing::post;
use chrono::{SecondsFormat, Utc};
use futures::StreamExt as _;
use reqwest::StatusCode;
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement};
use serde_json::{Value, json};

use super::harness::{Daemon, TOKEN, TestDb, binary, config, event, run_id, serve_local, unique};

const ZENDESK_SECRET: &str = "zendesk-acme-signing-secret";
const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const ENV: [(&str, &str); 2] = [
    ("ZENDESK_ACME_SECRET", ZENDESK_SECRET),
    ("SLACK_SIGNING_SECRET", SLACK_SECRET),
];

const TICKET_CREATED: &str =
    include_str!("../../adapters/webhook/tests/fixtures/ticket_created.json");
const COMMENT_ADDED: &str =
    include_str!("../../adapters/webhook/tests/fixtures/comment_added.json");
const BOT_MESSAGE: &str =
    include_str!("../../adapters/slack/tests/fixtures/bot_message_bot_id.json");

/// A Zendesk source, a Slack source, and workflows delivered to the test's worker.
fn setup(worker: &str) -> String {
    format!(
        r#"
[[source]]
kind = "webhook"
name = "zendesk-acme"
tenant = "acme"
signing_secret_env = "ZENDESK_ACME_SECRET"
account_id = 22129848

[[source]]
kind = "slack"
name = "acme-slack"
signing_secret_env = "SLACK_SIGNING_SECRET"
teams = {{ T0123ABC = "acme" }}

[[target]]
name = "worker"
kind = "http"
url = "{worker}"
insecure_skip_signature = true

[[workflow]]
id = "triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
target = "worker"
triggers = [ {{ channel = "webhook", event_type = "ticket.created", priority = 100 }} ]

[[workflow]]
id = "comment-reply"
tenant = "acme"
status = "live"
run_as = "acme-agent"
target = "worker"
triggers = [ {{ channel = "webhook", event_type = "ticket.comment_added", priority = 50 }} ]

[[workflow]]
id = "slack-triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
target = "worker"
triggers = [ {{ channel = "slack", event_type = "message", priority = 10 }} ]
"#
    )
}

/// The candidate: the same, plus a workflow that outranks `triage` on new tickets.
const VIP: &str = r#"
[[workflow]]
id = "vip-triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
target = "worker"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 200 } ]
"#;

/// A Zendesk subscription body about `ticket` with event id `id`.
fn zendesk(fixture: &str, id: &str, ticket: &str) -> Vec<u8> {
    let mut body: Value = serde_json::from_str(fixture).expect("fixture");
    body["id"] = json!(id);
    body["detail"]["id"] = json!(ticket);
    body["subject"] = json!(format!("zen:ticket:{ticket}"));
    serde_json::to_vec(&body).expect("json")
}

async fn send_zendesk(daemon: &Daemon, body: Vec<u8>) -> Value {
    let timestamp = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
    let signature = switchyard_webhook::sign(ZENDESK_SECRET.as_bytes(), &timestamp, &body);
    let response = daemon
        .client()
        .post(daemon.url("/v1/ingest/webhook/zendesk-acme"))
        .header("content-type", "application/json")
        .header(switchyard_webhook::SIGNATURE_HEADER, signature)
        .header(switchyard_webhook::TIMESTAMP_HEADER, timestamp)
        .body(body)
        .send()
        .await
        .expect("POST webhook");
    super::harness::read(response).await.1
}

async fn send_slack(daemon: &Daemon, body: Vec<u8>) -> Value {
    let timestamp = Utc::now().timestamp();
    let signature = switchyard_slack::sign(SLACK_SECRET, timestamp, &body);
    let response = daemon
        .client()
        .post(daemon.url("/v1/ingest/slack/acme-slack"))
        .header("content-type", "application/json")
        .header("X-Slack-Request-Timestamp", timestamp.to_string())
        .header("X-Slack-Signature", signature)
        .body(body)
        .send()
        .await
        .expect("POST slack");
    super::harness::read(response).await.1
}

/// A worker that answers 200 and counts what it receives.
async fn worker() -> (String, Arc<AtomicUsize>) {
    let received = Arc::new(AtomicUsize::new(0));
    let counter = received.clone();
    let app = axum::Router::new().route(
        "/runs",
        post(move || {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                "ok"
            }
        }),
    );
    let (addr, _server) = serve_local(app).await;
    (format!("http://{addr}/runs"), received)
}

/// Row counts of everything live: what a diagnostic replay must not change.
async fn live_rows(db: &DatabaseConnection) -> Vec<(&'static str, i64)> {
    let mut counts = Vec::new();
    for table in [
        "intake",
        "raw_deliveries",
        "runs",
        "entity_locks",
        "dispatches",
        "dispatch_attempts",
        "run_history",
    ] {
        let row = db
            .query_one_raw(Statement::from_string(
                db.get_database_backend(),
                format!("SELECT COUNT(*) AS n FROM {table}"),
            ))
            .await
            .expect("count")
            .expect("a row");
        counts.push((table, row.try_get::<i64>("", "n").expect("n")));
    }
    counts
}

/// Waits until `condition` holds, for at most a minute.
async fn until<F: std::future::Future<Output = bool>>(
    what: &str,
    mut condition: impl FnMut() -> F,
) {
    for _ in 0..1200 {
        if condition().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Starts a replay and waits for it to end; returns the final view (with report and results).
pub async fn replay(daemon: &Daemon, request: &Value) -> Value {
    let (status, started) = daemon.post("/v1/replays", request).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    wait_replay(daemon, started["id"].as_str().expect("id")).await
}

async fn wait_replay(daemon: &Daemon, id: &str) -> Value {
    let mut last = Value::Null;
    for _ in 0..1200 {
        last = daemon.get(&format!("/v1/replays/{id}?limit=1000")).await;
        if last["status"] != "running" {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("replay {id} did not end: {last}");
}

/// `(original intake id) -> (original outcome/workflow, replayed outcome/workflow, differs)`.
fn outcomes(report: &Value) -> Vec<(String, String, String, bool)> {
    report["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            let label = |v: &Value| match v["workflow_id"].as_str() {
                Some(w) => format!("{}:{w}", v["outcome"].as_str().unwrap_or("")),
                None => v["outcome"].as_str().unwrap_or("").to_owned(),
            };
            (
                r["intake_id"].as_str().unwrap_or("").to_owned(),
                label(&r["original"]),
                label(&r["replayed"]),
                r["differs"].as_bool().unwrap_or(true),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_mixed_day_replays_exactly_writes_nothing_live_and_a_candidate_moves_what_it_should() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let (worker_url, received) = worker().await;
        let text = config(&db, &setup(&worker_url));
        let daemon = Daemon::start(&db, &text, &ENV).await;

        // The day: routed, its duplicate, entity_locked, routed again once the run finished,
        // invalid, ineligible, no_trigger_match, and another routed ticket.
        let first = send_zendesk(&daemon, zendesk(TICKET_CREATED, "evt-1", "5158")).await;
        assert_eq!(first["outcome"], "routed", "{backend:?}: {first}");
        let again = send_zendesk(&daemon, zendesk(TICKET_CREATED, "evt-1", "5158")).await;
        assert_eq!(again["outcome"], "duplicate", "{backend:?}: {again}");
        let locked = send_zendesk(&daemon, zendesk(COMMENT_ADDED, "evt-2", "5158")).await;
        assert_eq!(locked["outcome"], "entity_locked", "{backend:?}: {locked}");
        until("the first run's dispatch", || async {
            received.load(Ordering::SeqCst) >= 1
        })
        .await;
        let (status, finished) = daemon.finish(&run_id(&first), "completed").await;
        assert_eq!(status, StatusCode::OK, "{finished}");
        let after = send_zendesk(&daemon, zendesk(COMMENT_ADDED, "evt-3", "5158")).await;
        assert_eq!(after["outcome"], "routed", "{backend:?}: {after}");
        let invalid = send_zendesk(&daemon, b"{not json".to_vec()).await;
        assert_eq!(
            invalid["outcome"], "invalid_event",
            "{backend:?}: {invalid}"
        );
        let mut bot: Value = serde_json::from_str(BOT_MESSAGE).expect("fixture");
        bot["event_id"] = json!(unique("Ev"));
        let ineligible = send_slack(&daemon, serde_json::to_vec(&bot).expect("json")).await;
        assert_eq!(
            ineligible["outcome"], "ineligible",
            "{backend:?}: {ineligible}"
        );
        let (_, unmatched) = daemon
            .post_event(
                &unique("k"),
                &event("chat", "nobody.listens", "acme", "c-1"),
            )
            .await;
        assert_eq!(unmatched["outcome"], "no_trigger_match", "{unmatched}");
        let other = send_zendesk(&daemon, zendesk(TICKET_CREATED, "evt-4", "6001")).await;
        assert_eq!(other["outcome"], "routed", "{backend:?}: {other}");
        until("every dispatch recorded", || async {
            let runs = daemon.runs("limit=100").await;
            runs.len() == 3 && runs.iter().all(|r| r["status"] != "queued")
        })
        .await;
        assert_eq!(received.load(Ordering::SeqCst), 3, "{backend:?}");

        let store = Database::connect(&db.url).await.expect("connect");
        let before = live_rows(&store).await;
        let ledger = daemon.intake("limit=100").await;
        assert_eq!(
            ledger.len(),
            7,
            "{backend:?}: the duplicate has no row of its own: {:?}",
            ledger
                .iter()
                .map(|r| (r["source"].clone(), r["outcome"].clone()))
                .collect::<Vec<_>>()
        );

        // Under the original revision: every outcome exactly as it was.
        let original = replay(&daemon, &json!({})).await;
        assert_eq!(original["status"], "completed", "{backend:?}: {original}");
        assert_eq!(original["progress"]["total"], 7, "{original}");
        assert_eq!(original["progress"]["done"], 7, "{original}");
        assert_eq!(original["progress"]["differ"], 0, "{backend:?}: {original}");
        assert_eq!(original["mode"], "diagnostic");
        assert_eq!(original["actor"], "token:api_token");
        let replayed = outcomes(&original);
        assert_eq!(replayed.len(), 7);
        for row in &ledger {
            let id = row["id"].as_str().expect("id");
            let found = replayed
                .iter()
                .find(|(intake, ..)| intake == id)
                .unwrap_or_else(|| panic!("{backend:?}: {id} not replayed: {original}"));
            assert_eq!(found.1, found.2, "{backend:?}: {found:?}");
            assert!(!found.3, "{found:?}");
        }
        let mut words: Vec<&str> = ledger
            .iter()
            .map(|r| r["outcome"].as_str().unwrap_or(""))
            .collect();
        words.sort_unstable();
        assert_eq!(
            words,
            [
                "entity_locked",
                "ineligible",
                "invalid_event",
                "no_trigger_match",
                "routed",
                "routed",
                "routed"
            ],
            "{backend:?}"
        );

        // Under a candidate that adds a higher-priority workflow: the two new tickets move.
        let candidate_text = format!("{text}{VIP}");
        let moved = replay(
            &daemon,
            &json!({"revision": "candidate", "candidate": candidate_text}),
        )
        .await;
        assert_eq!(moved["status"], "completed", "{moved}");
        assert_eq!(moved["progress"]["differ"], 2, "{backend:?}: {moved}");
        let changed: Vec<(String, String, String, bool)> =
            outcomes(&moved).into_iter().filter(|r| r.3).collect();
        let mut expected = [first["intake_id"].clone(), other["intake_id"].clone()];
        expected.sort_by_key(|v| v.as_str().unwrap_or("").to_owned());
        assert_eq!(
            changed
                .iter()
                .map(|r| (r.0.as_str(), r.1.as_str(), r.2.as_str()))
                .collect::<Vec<_>>(),
            expected
                .iter()
                .map(|id| (
                    id.as_str().unwrap_or(""),
                    "routed:triage",
                    "routed:vip-triage"
                ))
                .collect::<Vec<_>>(),
            "{backend:?}: {moved}"
        );
        let table = moved["report"]["text"].as_str().expect("report text");
        assert!(
            table.contains(
                "ticket.created: triage 2 -> 0, vip-triage 0 -> 2\n  triage -> vip-triage: 2, e.g."
            ),
            "{backend:?}: {table}"
        );
        assert!(
            table.contains(
                "ticket.comment_added: comment-reply 1 -> 1, entity_locked (comment-reply) 1 -> 1\n"
            ),
            "{backend:?}: {table}"
        );

        // The console lists both replays and shows the candidate's report.
        let console = super::console::Console::login(&daemon, super::harness::TOKEN).await;
        let list = console.page("/ui/replays").await;
        let moved_id = moved["id"].as_str().expect("id");
        assert!(list.contains(&format!("/ui/replays/{moved_id}")), "{list}");
        assert!(
            list.contains(original["id"].as_str().expect("id")),
            "{list}"
        );
        let page = console.page(&format!("/ui/replays/{moved_id}")).await;
        assert!(page.contains("candidate "), "{page}");
        assert!(
            page.contains(
                "<span class=\"mono\">triage</span> → <span class=\"mono\">vip-triage</span>: 2"
            ),
            "{page}"
        );
        assert!(
            page.contains(&format!(
                "/ui/deliveries/{}",
                first["intake_id"].as_str().unwrap_or("")
            )),
            "{page}"
        );

        // Nothing live was written, and the worker received nothing more.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(live_rows(&store).await, before, "{backend:?}");
        assert_eq!(received.load(Ordering::SeqCst), 3, "{backend:?}");

        // The CLI: the same report, and `check --against-ledger` prints the same table.
        let candidate_path = db.dir.path().join(format!("{}.toml", unique("candidate")));
        std::fs::write(&candidate_path, &candidate_text).expect("write candidate");
        let out = Command::new(binary())
            .args(["replay", "--config"])
            .arg(&daemon.config_path)
            .arg("--candidate")
            .arg(&candidate_path)
            .output()
            .expect("run replay");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{backend:?}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("completed: 7 replayed, 2 differ"),
            "{stdout}"
        );
        assert!(
            stdout.contains("ticket.created: triage 2 -> 0, vip-triage 0 -> 2"),
            "{stdout}"
        );
        let listed = daemon.get("/v1/replays").await;
        assert_eq!(
            listed["replays"].as_array().map(Vec::len),
            Some(3),
            "{listed}"
        );
        assert!(
            listed["replays"][0]["actor"]
                .as_str()
                .unwrap_or("")
                .starts_with("cli:")
        );

        let check = |extra: &[&str], candidate: &std::path::Path| {
            Command::new(binary())
                .args(["check", "--config"])
                .arg(&daemon.config_path)
                .arg("--candidate")
                .arg(candidate)
                .args(["--against-ledger", "1d"])
                .args(extra)
                .envs(ENV)
                .env("SWITCHYARD_API_TOKEN", TOKEN)
                .output()
                .expect("run check")
        };
        let out = check(&[], &candidate_path);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("7 deliveries, 2 would come out differently"),
            "{stdout}"
        );
        let table = format!(
            "(no event): invalid_event 1 -> 1\n\
             message: ineligible 1 -> 1\n\
             nobody.listens: no_trigger_match 1 -> 1\n\
             ticket.comment_added: comment-reply 1 -> 1, entity_locked (comment-reply) 1 -> 1\n\
             ticket.created: triage 2 -> 0, vip-triage 0 -> 2\n  \
             triage -> vip-triage: 2, e.g. {} (delivery evt-1), {} (delivery evt-4)\n",
            first["intake_id"].as_str().unwrap_or(""),
            other["intake_id"].as_str().unwrap_or("")
        );
        assert!(
            stdout.ends_with(&table),
            "{backend:?}: expected\n{table}\ngot\n{stdout}"
        );
        let out = check(&["--fail-on-change"], &candidate_path);
        assert!(
            !out.status.success(),
            "--fail-on-change with changes must fail"
        );
        let out = check(&["--fail-on-change"], &daemon.config_path);
        assert!(
            out.status.success(),
            "no change: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            live_rows(&store).await,
            before,
            "{backend:?}: the CLI wrote nothing live"
        );

        // Filters take only what they name; bad requests are refused, naming the field.
        let only_locked = replay(&daemon, &json!({"outcome": "entity_locked"})).await;
        assert_eq!(only_locked["progress"]["total"], 1, "{only_locked}");
        let (status, refused) = daemon
            .post("/v1/replays", &json!({"outcome": "nope"}))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
        assert!(
            refused["detail"]
                .as_str()
                .unwrap_or("")
                .contains("`outcome`"),
            "{refused}"
        );
        let (status, refused) = daemon
            .post(
                "/v1/replays",
                &json!({"revision": "candidate", "candidate": "[[workflow]]\nid = 1"}),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
        assert!(
            refused["detail"]
                .as_str()
                .unwrap_or("")
                .contains("candidate"),
            "{refused}"
        );
        let (status, refused) = daemon
            .post(
                "/v1/replays",
                &json!({"mode": "live", "revision": "original"}),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");

        daemon.stop();
        db.drop_database().await;
    }
}

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

#[tokio::test]
async fn a_live_replay_twice_makes_one_new_run_per_delivery_linked_back() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let text = config(
            &db,
            r#"
[[workflow]]
id = "triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "chat", event_type = "message", priority = 1 } ]
"#,
        );
        let daemon = Daemon::start(&db, &text, &[]).await;
        let mut originals = Vec::new();
        for n in 0..3 {
            let (_, answer) = daemon
                .post_event(
                    &format!("k-{n}"),
                    &event("chat", "message", "acme", &unique("conv")),
                )
                .await;
            assert_eq!(answer["outcome"], "routed", "{answer}");
            let (status, _) = daemon.finish(&run_id(&answer), "completed").await;
            assert_eq!(status, StatusCode::OK);
            originals.push(answer);
        }
        let runs_before = daemon.runs("limit=100").await.len();
        assert_eq!(runs_before, 3);

        let live = replay(&daemon, &json!({"mode": "live", "revision": "current"})).await;
        assert_eq!(live["status"], "completed", "{backend:?}: {live}");
        let replay_id = live["id"].as_str().expect("id").to_owned();
        let results = live["results"].as_array().expect("results").clone();
        assert_eq!(results.len(), 3, "{live}");
        for result in &results {
            assert_eq!(
                result["replayed"]["outcome"], "routed",
                "{backend:?}: {result}"
            );
            assert!(result["new_run_id"].is_string(), "{result}");
            // The new ledger row links back to the original delivery and the replay.
            let original = result["intake_id"].as_str().expect("intake id");
            let delivery = format!(
                "replay:{replay_id}:{}",
                result["delivery_id"].as_str().expect("delivery id")
            );
            let rows = daemon.intake(&format!("delivery_id={delivery}")).await;
            assert_eq!(rows.len(), 1, "{backend:?}: {delivery}");
            assert_eq!(rows[0]["replay_id"], replay_id.as_str(), "{}", rows[0]);
            assert_eq!(rows[0]["replay_of"], original, "{}", rows[0]);
            assert_eq!(rows[0]["run_id"], result["new_run_id"], "{}", rows[0]);
            assert_eq!(rows[0]["id"], result["new_intake_id"], "{}", rows[0]);
            let console = super::console::Console::login(&daemon, super::harness::TOKEN).await;
            let page = console
                .page(&format!(
                    "/ui/deliveries/{}",
                    rows[0]["id"].as_str().unwrap_or("")
                ))
                .await;
            assert!(
                page.contains(&format!("live replay {replay_id} of delivery {original}")),
                "{page}"
            );
        }
        assert_eq!(daemon.runs("limit=100").await.len(), 6, "{backend:?}");

        // The same replay again: every delivery is a duplicate of its first re-admission.
        let (status, rerun) = daemon
            .post(&format!("/v1/replays/{replay_id}/rerun"), &json!({}))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{rerun}");
        let again = wait_replay(&daemon, &replay_id).await;
        assert_eq!(again["status"], "completed", "{again}");
        let outcomes: Vec<&str> = again["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| r["replayed"]["outcome"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(outcomes, ["duplicate"; 3], "{backend:?}: {again}");
        assert_eq!(
            daemon.runs("limit=100").await.len(),
            6,
            "{backend:?}: no second run"
        );
        // The original deliveries are untouched by either: not duplicates of a replay.
        assert_eq!(
            daemon.intake("outcome=routed&limit=100").await.len(),
            6,
            "{backend:?}"
        );

        daemon.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn a_large_replay_reports_progress_and_stops_when_cancelled() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let text = config(
            &db,
            r#"
[[workflow]]
id = "triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "chat", event_type = "message", priority = 1 } ]
"#,
        );
        let daemon = Daemon::start(&db, &text, &[]).await;
        let daemon_ref = &daemon;
        let seeded: Vec<Value> = futures::stream::iter(0..1500)
            .map(|n| async move {
                // A 503 under a loaded machine is "not acknowledged": the sender retries.
                loop {
                    let (status, answer) = daemon_ref
                        .post_event(
                            &format!("k-{n}"),
                            &event("chat", "message", "acme", &format!("conv-{n}")),
                        )
                        .await;
                    if status != StatusCode::SERVICE_UNAVAILABLE {
                        break answer;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
            .buffer_unordered(32)
            .collect()
            .await;
        assert!(
            seeded
                .iter()
                .all(|a| a["outcome"] == "routed" || a["first_outcome"] == "routed"),
            "{backend:?}"
        );

        let (status, started) = daemon.post("/v1/replays", &json!({})).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{started}");
        assert_eq!(started["progress"]["total"], 1500, "{started}");
        let id = started["id"].as_str().expect("id").to_owned();
        let (status, cancelled) = daemon
            .post(&format!("/v1/replays/{id}/cancel"), &json!({}))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{backend:?}: {cancelled}");
        let ended = wait_replay(&daemon, &id).await;
        assert_eq!(
            ended["status"], "cancelled",
            "{backend:?}: {}",
            ended["progress"]
        );
        let done = ended["progress"]["done"].as_u64().expect("done");
        assert!(done < 1500, "{backend:?}: stopped between batches: {done}");
        assert_eq!(
            ended["results"].as_array().map(Vec::len),
            Some(done as usize),
            "{backend:?}: progress counts what is recorded"
        );
        let (status, again) = daemon
            .post(&format!("/v1/replays/{id}/cancel"), &json!({}))
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{again}");

        // A rerun goes to the end.
        let (status, _) = daemon
            .post(&format!("/v1/replays/{id}/rerun"), &json!({}))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED);
        let finished = wait_replay(&daemon, &id).await;
        assert_eq!(finished["status"], "completed", "{}", finished["progress"]);
        assert_eq!(finished["progress"]["done"], 1500);
        assert_eq!(finished["progress"]["differ"], 0, "{backend:?}");

        // A live replay from the CLI off a terminal needs --yes, and re-admits nothing without.
        let store = Database::connect(&db.url).await.expect("connect");
        let before = live_rows(&store).await;
        let out = Command::new(binary())
            .args(["replay", "--config"])
            .arg(&daemon.config_path)
            .args(["--live", "--revision", "current", "--delivery", "k-1"])
            .env("SWITCHYARD_API_TOKEN", TOKEN)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run replay");
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("pass --yes"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(live_rows(&store).await, before, "{backend:?}");

        daemon.stop();
        db.drop_database().await;
    }
}

/// Starting, cancelling and rerunning a replay need `admin`; reading one needs `read`; a
/// tenant-limited token starts replays of its tenants only and never sees a replay that covered
/// other tenants (404 by id, left out of the listing).
#[tokio::test]
async fn replays_need_admin_to_start_and_respect_tenant_limits() {
    use super::access::{TOKEN_ENV, TOKENS, WORKFLOWS, call};
    use reqwest::Method;

    let Some(db) = TestDb::create(super::harness::Backend::Sqlite).await else {
        return;
    };
    let limited_admin = r#"
[[token]]
name = "acme-admin"
secret_env = "SY_ACME_ADMIN"
scopes = ["admin"]
tenants = ["acme"]
"#;
    let text = config(&db, &format!("{TOKENS}\n{limited_admin}\n{WORKFLOWS}"));
    let mut env = TOKEN_ENV.to_vec();
    env.push(("SY_ACME_ADMIN", "acme-admin-secret"));
    let daemon = Daemon::start(&db, &text, &env).await;
    for tenant in ["acme", "globex"] {
        let (_, answer) = daemon
            .post_event(
                &unique("d"),
                &event("webhook", "ticket.created", tenant, &unique("T")),
            )
            .await;
        assert_eq!(answer["outcome"], "routed", "{answer}");
    }
    let body = json!({});
    let (status, refused) = call(
        &daemon,
        Method::POST,
        "/v1/replays",
        Some("reader-token-secret"),
        Some(&body),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert_eq!(refused["error"], "missing_scope", "{refused}");
    assert!(
        refused["detail"].as_str().unwrap_or("").contains("`admin`"),
        "{refused}"
    );
    let (status, refused) = call(
        &daemon,
        Method::GET,
        "/v1/replays",
        Some("sender-token-secret"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");

    // The root token's replay covers every tenant; acme's admin only acme.
    let (status, every) = call(
        &daemon,
        Method::POST,
        "/v1/replays",
        Some("root-token-secret"),
        Some(&body),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{every}");
    assert_eq!(every["progress"]["total"], 2, "{every}");
    let (status, acme) = call(
        &daemon,
        Method::POST,
        "/v1/replays",
        Some("acme-admin-secret"),
        Some(&body),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{acme}");
    assert_eq!(acme["progress"]["total"], 1, "{acme}");
    assert_eq!(acme["actor"], "token:acme-admin");
    let every_id = every["id"].as_str().expect("id");
    wait_replay(&daemon, every_id).await;
    wait_replay(&daemon, acme["id"].as_str().expect("id")).await;
    let (status, _) = call(
        &daemon,
        Method::GET,
        &format!("/v1/replays/{every_id}"),
        Some("acme-admin-secret"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, listed) = call(
        &daemon,
        Method::GET,
        "/v1/replays",
        Some("acme-admin-secret"),
        None,
    )
    .await;
    let ids: Vec<&str> = listed["replays"]
        .as_array()
        .expect("replays")
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(ids, [acme["id"].as_str().unwrap_or("")], "{listed}");
    let (status, _) = call(
        &daemon,
        Method::GET,
        &format!("/v1/replays/{every_id}"),
        Some("reader-token-secret"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, refused) = call(
        &daemon,
        Method::POST,
        &format!("/v1/replays/{every_id}/rerun"),
        Some("reader-token-secret"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    daemon.stop();
}
