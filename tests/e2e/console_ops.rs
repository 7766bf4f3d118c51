//! The console as a daily screen, over real HTTP with a real session: Deliveries reads
//! (reason column, times to the millisecond, prefix and payload searches, no `duplicate`
//! option), watches (the chart and its counts, per-item charts, a refresh toggle that keeps
//! the filters) and acts (re-admit one delivery or a filtered set after a confirmation, linked
//! both ways; finish, cancel and redispatch recorded with the token's name); Sources (secret,
//! counts, a signed test event through the real endpoint that starts no run).

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::access::{TOKEN_ENV, TOKENS};
use super::console::{CONSOLE_WORKFLOWS, Console, csrf_of};
use super::harness::{Daemon, TestDb, config, run_id, unique};

const ZENDESK: &str = r#"
[[source]]
kind = "webhook"
name = "zendesk-acme"
tenant = "acme"
signing_secret_env = "ZENDESK_ACME_SECRET"
account_id = 22129848
"#;
const ZENDESK_SECRET: (&str, &str) = ("ZENDESK_ACME_SECRET", "zendesk-acme-signing-secret");

async fn event(
    daemon: &Daemon,
    key: &str,
    event_type: &str,
    entity: &str,
    payload: Value,
) -> Value {
    let (status, answer) = daemon
        .post_event(
            key,
            &json!({
                "channel": "webhook",
                "event_type": event_type,
                "tenant_id": "acme",
                "target_entity_id": entity,
                "payload": payload,
            }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer
}

fn intake_id(answer: &Value) -> String {
    answer["intake_id"].as_str().expect("intake_id").to_owned()
}

/// The cell texts of the table rows of a Deliveries page that link to `id`.
fn row_of<'h>(html: &'h str, id: &str) -> &'h str {
    let at = html
        .find(&format!("/ui/deliveries/{id}\""))
        .unwrap_or_else(|| panic!("no row for {id}"));
    let start = html[..at].rfind("<tr>").expect("row start");
    let end = at + html[at..].find("</tr>").expect("row end");
    &html[start..end]
}

/// Waits (generously) until the replay `id` is no longer running; its JSON.
async fn finished_replay(daemon: &Daemon, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let replay = daemon.get(&format!("/v1/replays/{id}")).await;
        if replay["status"] != "running" {
            return replay;
        }
        assert!(
            Instant::now() < deadline,
            "replay {id} still running: {replay}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn deliveries_read_and_watch_by_prefix_payload_reason_and_chart() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let text = config(&db, &format!("{TOKENS}\n{CONSOLE_WORKFLOWS}"));
        let daemon = Daemon::start(&db, &text, &TOKEN_ENV).await;
        let stem = unique("TCK");
        let first = event(
            &daemon,
            &unique("k1"),
            "ticket.created",
            &format!("{stem}-10"),
            json!({"priority": "urgent", "n": 7}),
        )
        .await;
        let locked = event(
            &daemon,
            &unique("k2"),
            "ticket.created",
            &format!("{stem}-10"),
            json!({"priority": "low"}),
        )
        .await;
        let other = event(
            &daemon,
            &unique("k3"),
            "ticket.created",
            &format!("{stem}-2"),
            json!({"priority": "urgent"}),
        )
        .await;
        let unmatched = event(
            &daemon,
            &unique("k4"),
            "ticket.merged",
            &format!("{stem}-3"),
            json!({}),
        )
        .await;
        assert_eq!(locked["outcome"], "entity_locked", "{backend:?}: {locked}");
        assert_eq!(unmatched["outcome"], "no_trigger_match");
        let ui = Console::login(&daemon, "root-token-secret").await;

        // Prefix search on the entity: `{stem}-1` finds `{stem}-10`'s two rows, not `-2`.
        let page = ui.page(&format!("/ui/deliveries?entity={stem}-1")).await;
        assert!(
            page.contains(&intake_id(&first)) && page.contains(&intake_id(&locked)),
            "{backend:?}"
        );
        assert!(!page.contains(&intake_id(&other)), "{backend:?}");
        let every = ui.page(&format!("/ui/deliveries?entity={stem}")).await;
        for answer in [&first, &locked, &other, &unmatched] {
            assert!(
                every.contains(&intake_id(answer)),
                "{backend:?}: prefix {stem}"
            );
        }
        // `%` is literal, not a wildcard.
        let literal = ui.page(&format!("/ui/deliveries?entity={stem}%25")).await;
        assert!(literal.contains("No deliveries match"), "{backend:?}");
        // Prefix search on the delivery id.
        let by_delivery = ui.page("/ui/deliveries?delivery=k3").await;
        assert!(
            by_delivery.contains(&intake_id(&other)) && !by_delivery.contains(&intake_id(&first))
        );

        // The reason column: the outcome's one line, without opening the row.
        let row = row_of(&every, &intake_id(&locked));
        assert!(row.contains("class=\"reason\""), "{row}");
        let holder = run_id(&first);
        assert!(
            row.contains(&holder[..8]) || row.contains(&holder),
            "{backend:?}: the locked row names its holder: {row}"
        );
        let row = row_of(&every, &intake_id(&unmatched));
        assert!(row.contains("ticket.merged"), "{row}");
        // Times to the millisecond: `YYYY-MM-DD HH:MM:SS.mmm`.
        let stamp = row.split("\">").nth(2).unwrap_or_default();
        assert!(
            stamp.len() >= 23 && stamp.as_bytes()[19] == b'.',
            "a millisecond time in {row}"
        );
        // The full id is the cell's title and text; the column cuts it.
        assert!(every.contains(&format!(
            "class=\"id\" href=\"/ui/deliveries/{}\" title=\"",
            intake_id(&first)
        )));

        // Payload search `path = value`.
        let urgent = ui
            .page(&format!(
                "/ui/deliveries?entity={stem}&payload=priority%20%3D%20urgent"
            ))
            .await;
        assert!(
            urgent.contains(&intake_id(&first)) && urgent.contains(&intake_id(&other)),
            "{backend:?}"
        );
        assert!(!urgent.contains(&intake_id(&locked)), "{backend:?}");
        assert!(
            urgent.contains("The payload is not indexed"),
            "the page says what it read"
        );
        let number = ui
            .page(&format!("/ui/deliveries?entity={stem}&payload=n%3D7"))
            .await;
        assert!(number.contains(&intake_id(&first)) && !number.contains(&intake_id(&other)));
        let (status, bad) = ui.get("/ui/deliveries?payload=priority").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(bad.contains("path = value"), "{bad}");
        let (status, bad) = ui.get("/ui/deliveries?payload=a..b%3Dc").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");

        // No `duplicate` option: a redelivery records nothing to find.
        assert!(!every.contains("value=\"duplicate\""), "{backend:?}");

        // The chart: an SVG of the window, with counts per outcome.
        assert!(every.contains("<svg class=\"chart\""), "{backend:?}");
        assert!(every.contains("Deliveries per minute"), "{backend:?}");
        assert!(every.contains("<title>"), "bars carry their counts");
        assert!(
            every.contains("entity_locked 1</span>"),
            "{backend:?}: counts per outcome"
        );
        assert!(every.contains("no_trigger_match 1</span>"));
        let week = ui
            .page("/ui/deliveries?since=2026-01-01T00:00&until=2026-01-08T00:00")
            .await;
        assert!(
            week.contains("Deliveries per hour"),
            "a wider window, wider bars"
        );

        // Refresh toggle: on keeps the filters and adds a meta refresh; the page offers off.
        assert!(!every.contains("http-equiv=\"refresh\""));
        let toggle = format!("/ui/deliveries?entity={stem}&#38;auto=on");
        assert!(
            every.contains(&toggle),
            "{backend:?}: the toggle keeps the filters: {}",
            &every[every.find("auto").unwrap_or(0)..][..300]
        );
        let auto = ui
            .page(&format!("/ui/deliveries?entity={stem}&auto=on"))
            .await;
        assert!(
            auto.contains("<meta http-equiv=\"refresh\" content=\"15\">"),
            "{auto}"
        );
        assert!(
            auto.contains(&format!("href=\"/ui/deliveries?entity={stem}\"")),
            "the off link keeps them too"
        );
        assert!(
            auto.contains("name=\"auto\" value=\"on\""),
            "a new search stays on"
        );

        // Per-item charts on Workflows (Sources: in the test event's test below).
        let workflows = ui.page("/ui/workflows").await;
        assert!(workflows.contains("<svg class=\"spark\""), "{backend:?}");
        assert!(
            workflows.contains("2 routed · 1 refused"),
            "{backend:?}: triage's counts"
        );
        daemon.stop();
    }
}

#[tokio::test]
async fn an_operator_re_admits_a_delivery_and_a_set_after_confirming_and_each_action_is_recorded() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let text = config(&db, &format!("{TOKENS}\n{CONSOLE_WORKFLOWS}"));
        let daemon = Daemon::start(&db, &text, &TOKEN_ENV).await;
        let ticket = unique("TCK");
        let first = event(&daemon, &unique("a"), "ticket.created", &ticket, json!({})).await;
        let locked = event(&daemon, &unique("b"), "ticket.created", &ticket, json!({})).await;
        assert_eq!(locked["outcome"], "entity_locked", "{backend:?}");
        let holder = run_id(&first);
        let ui = Console::login(&daemon, "root-token-secret").await;

        // Cancel and finish are confirmed first: the page says what will happen.
        let confirm = ui
            .page(&format!("/ui/runs/{holder}/finish?status=cancelled"))
            .await;
        assert!(confirm.contains("Cancel this run?"), "{confirm}");
        assert!(
            confirm.contains(&ticket) && confirm.contains("lock is released"),
            "{confirm}"
        );
        let (status, _) = ui
            .get(&format!("/ui/runs/{holder}/finish?status=queued"))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let confirm = ui
            .page(&format!("/ui/runs/{holder}/finish?status=completed"))
            .await;
        assert!(
            confirm.contains("Finish this run as completed?"),
            "{confirm}"
        );
        let csrf = csrf_of(&confirm);
        let (status, location) = ui
            .post(
                &format!("/ui/runs/{holder}/finish"),
                &[("csrf", &csrf), ("status", "completed")],
            )
            .await;
        assert_eq!(status, StatusCode::SEE_OTHER, "{location}");
        // The history and the audit name the token that did it.
        let run = ui.page(&format!("/ui/runs/{holder}")).await;
        assert!(run.contains("by token:root"), "{backend:?}: {run}");
        let audit = daemon.get(&format!("/v1/runs/{holder}")).await;
        assert!(
            audit.to_string().contains("by token:root"),
            "{backend:?}: {audit}"
        );

        // Re-admit the locked delivery: a confirmation of one, then a live replay.
        let delivery = ui
            .page(&format!("/ui/deliveries/{}", intake_id(&locked)))
            .await;
        assert!(delivery.contains("Re-admit this delivery"), "{backend:?}");
        let confirm = ui
            .page(&format!("/ui/deliveries/{}/readmit", intake_id(&locked)))
            .await;
        assert!(confirm.contains("Re-admit 1 delivery?"), "{confirm}");
        assert!(
            confirm.contains("entity_locked") && confirm.contains("revision in force"),
            "{confirm}"
        );
        let (status, location) = ui
            .post(
                &format!("/ui/deliveries/{}/readmit", intake_id(&locked)),
                &[("csrf", &csrf_of(&confirm))],
            )
            .await;
        assert_eq!(status, StatusCode::SEE_OTHER, "{location}");
        let replay_id = location
            .strip_prefix("/ui/replays/")
            .expect("to the replay")
            .to_owned();
        let replay = finished_replay(&daemon, &replay_id).await;
        assert_eq!(replay["status"], "completed", "{backend:?}: {replay}");
        assert_eq!(replay["mode"], "live");
        assert_eq!(replay["progress"]["total"], 1, "{replay}");
        assert_eq!(replay["actor"], "token:root");
        // The new row: routed now that the ticket is free, linked to its original.
        let rows = daemon.intake(&format!("entity={ticket}")).await;
        let new = rows
            .iter()
            .find(|r| {
                r["delivery_id"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("replay:"))
            })
            .unwrap_or_else(|| panic!("{backend:?}: the re-admission in {rows:?}"));
        assert_eq!(new["outcome"], "routed", "{new}");
        let new_id = new["id"].as_str().expect("id").to_owned();
        let original = ui
            .page(&format!("/ui/deliveries/{}", intake_id(&locked)))
            .await;
        assert!(
            original.contains(&format!("href=\"/ui/deliveries/{new_id}\""))
                && original.contains(&replay_id),
            "{backend:?}: the original links to the replay and the new delivery"
        );
        let readmitted = ui.page(&format!("/ui/deliveries/{new_id}")).await;
        assert!(readmitted.contains("A re-admission"), "{readmitted}");
        assert!(readmitted.contains(&format!("href=\"/ui/deliveries/{}\"", intake_id(&locked))));
        assert!(
            !readmitted.contains("Re-admit this delivery"),
            "a re-admission is not re-admitted"
        );
        let (status, _) = ui.get(&format!("/ui/deliveries/{new_id}/readmit")).await;
        assert_eq!(status, StatusCode::CONFLICT);
        let replay_page = ui.page(&format!("/ui/replays/{replay_id}")).await;
        assert!(
            replay_page.contains(&format!("href=\"/ui/deliveries/{}\"", intake_id(&locked)))
                && replay_page.contains("source delivery"),
            "{backend:?}: the replay links its source delivery"
        );

        // Re-admit a filtered set: the confirmation counts it and says what it is.
        let merged = unique("M");
        for n in 0..3 {
            event(
                &daemon,
                &unique("m"),
                "ticket.merged",
                &format!("{merged}-{n}"),
                json!({}),
            )
            .await;
        }
        let confirm = ui
            .page(&format!(
                "/ui/readmit?outcome=no_trigger_match&tenant=acme&entity={merged}-1"
            ))
            .await;
        assert!(
            confirm.contains("Re-admit 1 delivery?"),
            "{backend:?}: {confirm}"
        );
        let confirm = ui
            .page("/ui/readmit?outcome=no_trigger_match&tenant=acme")
            .await;
        assert!(
            confirm.contains("Re-admit 3 deliveries?"),
            "{backend:?}: {confirm}"
        );
        assert!(
            confirm.contains("with outcome no_trigger_match") && confirm.contains("of tenant acme"),
            "{confirm}"
        );
        let (status, body) = ui.get("/ui/readmit?payload=a%3Db&outcome=routed").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let (status, body) = ui.get("/ui/readmit").await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "the whole ledger is not a set: {body}"
        );
        let (status, body) = ui
            .get("/ui/readmit?outcome=no_trigger_match&source=nowhere")
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "an empty set: {body}");
        // Without the CSRF token nothing starts.
        let before = daemon.get("/v1/replays").await["replays"]
            .as_array()
            .map_or(0, Vec::len);
        let (status, _) = ui
            .post(
                "/ui/readmit",
                &[("outcome", "no_trigger_match"), ("csrf", "forged")],
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(
            daemon.get("/v1/replays").await["replays"]
                .as_array()
                .map_or(0, Vec::len),
            before
        );
        let (status, location) = ui
            .post(
                "/ui/readmit",
                &[
                    ("outcome", "no_trigger_match"),
                    ("tenant", "acme"),
                    ("csrf", &csrf_of(&confirm)),
                ],
            )
            .await;
        assert_eq!(status, StatusCode::SEE_OTHER, "{location}");
        let replay = finished_replay(&daemon, location.trim_start_matches("/ui/replays/")).await;
        assert_eq!(
            (
                replay["progress"]["total"].clone(),
                replay["progress"]["done"].clone()
            ),
            (json!(3), json!(3)),
            "{backend:?}: {replay}"
        );

        // A read token sees no re-admit button and cannot re-admit.
        let reader = Console::login(&daemon, "reader-token-secret").await;
        let page = reader
            .page(&format!("/ui/deliveries/{}", intake_id(&locked)))
            .await;
        assert!(!page.contains("Re-admit this delivery"), "{backend:?}");
        let (status, _) = reader
            .get(&format!("/ui/deliveries/{}/readmit", intake_id(&locked)))
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        daemon.stop();
    }
}

/// A pull workflow whose one attempt dead-letters its run when the claim is released.
const FRAGILE: &str = r#"
[[workflow]]
id = "fragile"
tenant = "acme"
status = "live"
run_as = "acme-agent"
budgets = { max_attempts = 1 }
triggers = [ { channel = "webhook", event_type = "ticket.fragile", priority = 1 } ]
"#;

#[tokio::test]
async fn an_operator_redispatches_a_dead_lettered_run_and_the_history_and_audit_name_the_token() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let text = config(&db, &format!("{TOKENS}\n{FRAGILE}"));
        let daemon = Daemon::start(&db, &text, &TOKEN_ENV).await;
        let answer = event(
            &daemon,
            &unique("f"),
            "ticket.fragile",
            &unique("TCK"),
            json!({}),
        )
        .await;
        let id = run_id(&answer);
        let claims = daemon.claim(&["fragile"], 1).await;
        assert_eq!(claims.len(), 1, "{backend:?}: {claims:?}");
        let token = claims[0]["token"].as_str().expect("token").to_owned();
        let (status, released) = daemon
            .post(&format!("/v1/claims/{token}/release"), &json!({}))
            .await;
        assert_eq!(status, StatusCode::OK, "{released}");
        // Its one attempt spent: the next claim dead-letters it instead of handing it out.
        assert!(
            daemon.claim(&["fragile"], 1).await.is_empty(),
            "{backend:?}"
        );
        assert_eq!(
            daemon.get(&format!("/v1/runs/{id}")).await["status"],
            "dead_lettered",
            "{backend:?}"
        );

        let ui = Console::login(&daemon, "root-token-secret").await;
        // Dead-lettered: nothing of it is pending.
        let workflows = ui.page("/ui/workflows").await;
        assert!(
            workflows.contains("none pending"),
            "{backend:?}: {workflows}"
        );
        let page = ui.page(&format!("/ui/runs/{id}")).await;
        assert!(page.contains("Redispatch"), "{backend:?}: {page}");
        let (status, location) = ui
            .post(
                &format!("/ui/runs/{id}/redispatch"),
                &[("csrf", &csrf_of(&page))],
            )
            .await;
        assert_eq!(status, StatusCode::SEE_OTHER, "{backend:?}: {location}");
        let page = ui.page(&format!("/ui/runs/{id}")).await;
        assert!(
            page.contains("redispatched") && page.contains("by token:root"),
            "{backend:?}: {page}"
        );
        let run = daemon.get(&format!("/v1/runs/{id}")).await;
        assert_eq!(run["status"], "queued", "{backend:?}: {run}");
        // Its pending dispatch waits for a pull worker: the Workflows page shows the lag.
        let workflows = ui.page("/ui/workflows").await;
        assert!(
            workflows.contains("Dispatch lag") && workflows.contains("oldest pending since"),
            "{backend:?}: {workflows}"
        );
        let ending = &run["audit"]["ending"];
        assert_eq!(ending["cause"], "redispatched", "{backend:?}: {ending}");
        assert!(
            ending["detail"]
                .as_str()
                .is_some_and(|d| d.ends_with("; by token:root")),
            "{backend:?}: {ending}"
        );
        daemon.stop();
    }
}

#[tokio::test]
async fn sources_show_their_secret_and_send_a_signed_test_event_that_starts_no_run() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let text = config(&db, &format!("{ZENDESK}\n{TOKENS}\n{CONSOLE_WORKFLOWS}"));
        let mut env = TOKEN_ENV.to_vec();
        env.push(ZENDESK_SECRET);
        let daemon = Daemon::start(&db, &text, &env).await;
        let ui = Console::login(&daemon, "root-token-secret").await;
        let sources = ui.page("/ui/sources").await;
        assert!(
            sources.contains("/v1/ingest/webhook/zendesk-acme"),
            "the URL to paste"
        );
        assert!(
            sources.contains("from $ZENDESK_ACME_SECRET"),
            "{backend:?}: {sources}"
        );
        assert!(sources.contains("Send a test event"));
        let runs_before = daemon.runs("").await.len();
        let (status, location) = ui
            .post(
                "/ui/sources/zendesk-acme/test",
                &[("csrf", &csrf_of(&sources))],
            )
            .await;
        assert_eq!(status, StatusCode::SEE_OTHER, "{backend:?}: {location}");
        let delivery = ui.page(&location).await;
        assert!(
            delivery.contains("no_trigger_match"),
            "{backend:?}: {delivery}"
        );
        assert!(delivery.contains("ticket.switchyard_test"), "{delivery}");
        // Recorded like any delivery from Zendesk, through the signed endpoint; no run.
        let rows = daemon.intake("source=zendesk-acme").await;
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0]["outcome"], "no_trigger_match");
        assert_eq!(
            daemon.runs("").await.len(),
            runs_before,
            "{backend:?}: no run started"
        );
        let sources = ui.page("/ui/sources").await;
        assert!(
            sources.contains("0 routed · 1 refused"),
            "{backend:?}: counts: {sources}"
        );
        // Only with the CSRF token, an admin token, and to a source that exists.
        let (status, _) = ui
            .post("/ui/sources/zendesk-acme/test", &[("csrf", "forged")])
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let (status, _) = ui
            .post("/ui/sources/nowhere/test", &[("csrf", &csrf_of(&sources))])
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let reader = Console::login(&daemon, "reader-token-secret").await;
        let page = reader.page("/ui/sources").await;
        assert!(!page.contains("Send a test event"));
        let (status, _) = reader
            .post(
                "/ui/sources/zendesk-acme/test",
                &[("csrf", &csrf_of(&page))],
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(
            daemon.intake("source=zendesk-acme").await.len(),
            1,
            "nothing more recorded"
        );
        daemon.stop();
    }
}

/// A Slack app, a CloudEvents publisher and a GitHub-style JSON webhook, each signed, beside a
/// CloudEvents publisher without a key and a JSON webhook whose event type is fixed (neither
/// can send a test event), with workflows on their channels.
const SIGNED_SOURCES: &str = r#"
[[source]]
kind = "slack"
name = "acme-slack"
signing_secret_env = "SLACK_SIGNING_SECRET"
teams = { T0GLOBEX = "globex", T0ACME = "acme" }

[[source]]
kind = "cloudevents"
name = "publisher"
tenant = "acme"
signing_secret_env = "PUBLISHER_SECRET"

[[source]]
kind = "cloudevents"
name = "keyless"
tenant = "acme"

[[source]]
kind = "json_webhook"
name = "gh"
tenant = "acme"
verify = { preset = "github", secret_env = "GH_SECRET" }
event_type = "github.{header:X-GitHub-Event}.{/action}"
target_entity_id = "{/issue/number}"
delivery_id = "{header:X-GitHub-Delivery}"

[[source]]
kind = "json_webhook"
name = "fixed"
tenant = "acme"
verify = { preset = "bearer", secret_env = "GH_SECRET" }
event_type = "ticket.created"
target_entity_id = "/id"

[[workflow]]
id = "chat-everything"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "chat", event_type = "message", priority = 5 }, { channel = "chat", event_type = "app_mention", priority = 5 } ]
"#;

#[tokio::test]
async fn slack_cloudevents_and_json_webhook_sources_send_signed_test_events_that_start_no_run() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let text = config(
            &db,
            &format!("{SIGNED_SOURCES}\n{TOKENS}\n{CONSOLE_WORKFLOWS}"),
        );
        let mut env = TOKEN_ENV.to_vec();
        env.extend([
            ("SLACK_SIGNING_SECRET", "8f742231b10e8888abcd99yyyzzz85a5"),
            ("PUBLISHER_SECRET", "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"),
            ("GH_SECRET", "It's a Secret to Everybody"),
        ]);
        let daemon = Daemon::start(&db, &text, &env).await;
        let ui = Console::login(&daemon, "root-token-secret").await;
        let sources = ui.page("/ui/sources").await;
        for (name, testable) in [
            ("acme-slack", true),
            ("publisher", true),
            ("gh", true),
            ("keyless", false),
            ("fixed", false),
        ] {
            assert_eq!(
                sources.contains(&format!("/ui/sources/{name}/test\"")),
                testable,
                "{backend:?}: {name}'s test button"
            );
        }
        let runs_before = daemon.runs("").await.len();
        for (name, outcome, detail) in [
            (
                "acme-slack",
                "ineligible",
                "unsupported_event_type:switchyard_test",
            ),
            ("publisher", "no_trigger_match", "switchyard_test"),
            (
                "gh",
                "no_trigger_match",
                "github.switchyard_test.switchyard_test",
            ),
        ] {
            let (status, location) = ui
                .post(
                    &format!("/ui/sources/{name}/test"),
                    &[("csrf", &csrf_of(&sources))],
                )
                .await;
            assert_eq!(
                status,
                StatusCode::SEE_OTHER,
                "{backend:?}: {name}: {location}"
            );
            let delivery = ui.page(&location).await;
            assert!(
                delivery.contains(outcome) && delivery.contains(detail),
                "{backend:?}: {name}: {delivery}"
            );
            // Recorded like any delivery of the source, through its signed endpoint.
            let rows = daemon.intake(&format!("source={name}")).await;
            assert_eq!(rows.len(), 1, "{backend:?}: {name}: {rows:?}");
            assert_eq!(rows[0]["outcome"], outcome, "{backend:?}: {name}");
        }
        // Each is the console's own delivery, not a sender's.
        for name in ["acme-slack", "publisher", "gh"] {
            let rows = daemon.intake(&format!("source={name}")).await;
            let delivery_id = rows[0]["delivery_id"].as_str().unwrap_or_default();
            assert!(
                delivery_id.contains("switchyard-test-"),
                "{backend:?}: {name}: {delivery_id}"
            );
        }
        assert_eq!(
            daemon.runs("").await.len(),
            runs_before,
            "{backend:?}: no run started"
        );
        // The kinds it cannot sign for say why, and record nothing.
        for (name, why) in [
            ("keyless", "no signing key"),
            ("fixed", "always `ticket.created`"),
        ] {
            let (status, body) = ui
                .post(
                    &format!("/ui/sources/{name}/test"),
                    &[("csrf", &csrf_of(&sources))],
                )
                .await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{backend:?}: {name}");
            assert!(body.contains(why), "{backend:?}: {name}: {body}");
            assert!(daemon.intake(&format!("source={name}")).await.is_empty());
        }
        daemon.stop();
    }
}
