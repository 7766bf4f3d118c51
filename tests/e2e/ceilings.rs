//! Ceilings end to end (issue 14) on every database: `max_running` defers dispatch and
//! releases in arrival order as each way a run ends frees its slot; `max_queued` and `rate`
//! refuse with `rate_limited`, answered 429 + Retry-After to senders that retry safely
//! (`/v1/events`, CloudEvents) and 200 to Slack and Zendesk, and recorded on the ledger; two
//! daemons on one PostgreSQL never admit more than a ceiling.

use std::time::Duration;

use chrono::Utc;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::harness::{Backend, Daemon, TOKEN, TestDb, config, read, run_id, unique};

/// The ids of the runs a pull worker claims for `workflow` now (no waiting).
async fn claim(daemon: &Daemon, workflow: &str, max: u64) -> Vec<String> {
    daemon
        .claim(&[workflow], max)
        .await
        .iter()
        .map(|c| {
            c["message"]["data"]["run"]["id"]
                .as_str()
                .expect("run id")
                .to_owned()
        })
        .collect()
}

/// Runs of `workflow` the API lists as `status`: the real count a ceiling's derived one must
/// equal.
async fn listed(daemon: &Daemon, workflow: &str, status: &str) -> Vec<String> {
    daemon
        .runs(&format!("workflow={workflow}&status={status}&limit=500"))
        .await
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_owned())
        .collect()
}

/// Claims for `workflow` until one comes (at most 60 s): a slot freed by something that
/// happens on its own (a lapsed claim, a dead letter).
async fn claim_when_free(daemon: &Daemon, workflow: &str) -> Vec<String> {
    for _ in 0..600 {
        let claimed = claim(daemon, workflow, 10).await;
        if !claimed.is_empty() {
            return claimed;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no run of {workflow} became claimable within 60 s");
}

async fn post(daemon: &Daemon, event_type: &str, tenant: &str, entity: &str) -> Value {
    let (status, answer) = daemon
        .post_event(
            &unique("key"),
            &super::harness::event("webhook", event_type, tenant, entity),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer
}

const MAX_RUNNING: &str = r#"
[[target]]
kind = "pull"
name = "short"
claim_ttl = "1s"
max_claims = 1

[[workflow]]
id = "steady"
tenant = "acme"
status = "live"
run_as = "acme-agent"
max_running = 2
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 10 } ]

[[workflow]]
id = "fragile"
tenant = "acme"
status = "live"
run_as = "acme-agent"
max_running = 1
target = "short"
triggers = [ { channel = "webhook", event_type = "ticket.fragile", priority = 10 } ]

[[workflow]]
id = "expiring"
tenant = "acme"
status = "live"
run_as = "acme-agent"
max_running = 1
lock_ttl = "2s"
triggers = [ { channel = "webhook", event_type = "ticket.expiring", priority = 10 } ]
"#;

#[tokio::test]
async fn max_running_defers_then_releases_in_arrival_order_as_every_end_frees_a_slot() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = Daemon::start(&db, &config(&db, MAX_RUNNING), &[]).await;

        // Five runs, two slots: the last three are created (and hold their tickets) deferred.
        let mut runs = Vec::new();
        for i in 0..5 {
            let answer = post(&daemon, "ticket.created", "acme", &unique("T")).await;
            assert_eq!(answer["outcome"], "routed", "{backend:?}: {answer}");
            assert_eq!(
                answer["deferred"].as_bool().unwrap_or(false),
                i >= 2,
                "{backend:?} run {i}: {answer}"
            );
            if i >= 2 {
                assert!(
                    answer["detail"]
                        .as_str()
                        .unwrap_or_default()
                        .contains("max_running = 2"),
                    "{answer}"
                );
            }
            runs.push(run_id(&answer));
        }
        assert_eq!(claim(&daemon, "steady", 10).await, runs[..2], "{backend:?}");
        assert!(claim(&daemon, "steady", 10).await.is_empty(), "{backend:?}");
        assert_eq!(listed(&daemon, "steady", "dispatched").await.len(), 2);
        assert_eq!(listed(&daemon, "steady", "queued").await.len(), 3);

        // Each finish frees one slot, taken by the oldest deferred run.
        for (ended, status, next) in [(0, "completed", 2), (1, "failed", 3), (2, "cancelled", 4)] {
            let (code, answer) = daemon.finish(&runs[ended], status).await;
            assert_eq!(code, StatusCode::OK, "{backend:?}: {answer}");
            assert_eq!(
                claim(&daemon, "steady", 10).await,
                vec![runs[next].clone()],
                "{backend:?}: after {status}"
            );
            assert!(claim(&daemon, "steady", 10).await.is_empty());
            assert_eq!(
                listed(&daemon, "steady", "dispatched").await.len(),
                2,
                "{backend:?}: derived and listed running counts agree after {status}"
            );
        }

        // A worker that crashed: its claim lapses, the run goes back to queued and its slot
        // to the next run; a run past max_claims is dead-lettered, freeing its slot too.
        let f1 = run_id(&post(&daemon, "ticket.fragile", "acme", &unique("F")).await);
        let f2 = post(&daemon, "ticket.fragile", "acme", &unique("F")).await;
        assert_eq!(f2["deferred"], true, "{backend:?}: {f2}");
        let f2 = run_id(&f2);
        assert_eq!(claim(&daemon, "fragile", 10).await, vec![f1.clone()]);
        assert!(claim(&daemon, "fragile", 10).await.is_empty());
        assert_eq!(
            claim_when_free(&daemon, "fragile").await,
            vec![f2.clone()],
            "{backend:?}: the lapsed claim freed its slot for the next run"
        );
        assert_eq!(
            listed(&daemon, "fragile", "dispatched").await,
            vec![f2.clone()]
        );
        // Both lapse again; with max_claims = 1 both end dead-lettered.
        for _ in 0..600 {
            if listed(&daemon, "fragile", "dead_lettered").await.len() == 2 {
                break;
            }
            assert!(claim(&daemon, "fragile", 10).await.is_empty());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            listed(&daemon, "fragile", "dead_lettered").await.len(),
            2,
            "{backend:?}"
        );
        let f3 = run_id(&post(&daemon, "ticket.fragile", "acme", &unique("F")).await);
        assert_eq!(
            claim(&daemon, "fragile", 10).await,
            vec![f3],
            "{backend:?}: dead letters hold no slot"
        );

        // A run whose lease expires is taken over by the next event on its entity: expired,
        // it frees its slot.
        let entity = unique("X");
        let x1 = run_id(&post(&daemon, "ticket.expiring", "acme", &entity).await);
        let x2 = post(&daemon, "ticket.expiring", "acme", &unique("X")).await;
        assert_eq!(x2["deferred"], true, "{backend:?}: {x2}");
        let x2 = run_id(&x2);
        assert_eq!(claim(&daemon, "expiring", 10).await, vec![x1.clone()]);
        assert!(claim(&daemon, "expiring", 10).await.is_empty());
        let mut took_over = false;
        for _ in 0..300 {
            let answer = post(&daemon, "ticket.expiring", "acme", &entity).await;
            if answer["outcome"] == "routed" {
                took_over = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(took_over, "{backend:?}: the lease of {x1} never expired");
        assert_eq!(listed(&daemon, "expiring", "expired").await, vec![x1]);
        assert_eq!(
            claim(&daemon, "expiring", 10).await,
            vec![x2.clone()],
            "{backend:?}: the expired run's slot went to the oldest deferred run"
        );
        assert_eq!(listed(&daemon, "expiring", "dispatched").await, vec![x2]);
        daemon.stop();
        db.drop_database().await;
    }
}

const REFUSALS: &str = r#"
[[source]]
kind = "webhook"
name = "zendesk-local"
tenant = "acme"
insecure_skip_signature = true

[[source]]
kind = "slack"
name = "acme-slack"
signing_secret_env = "SLACK_SIGNING_SECRET"
teams = { T0123ABC = "acme" }

[[source]]
kind = "cloudevents"
name = "internal"
tenant = "acme"

[[workflow]]
id = "queue"
tenant = "acme"
status = "live"
run_as = "acme-agent"
max_queued = 2
triggers = [ { channel = "webhook", event_type = "ticket.queued", priority = 10 } ]

[[workflow]]
id = "zendesk"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 10 } ]

[[workflow]]
id = "chat"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "slack", event_type = "message", priority = 10 } ]

[[workflow]]
id = "publisher"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "webhook", event_type = "com.example.someevent", priority = 10 } ]

[[workflow]]
id = "globex"
tenant = "globex"
status = "live"
run_as = "globex-agent"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 10 } ]

[rates.source]
zendesk-local = { limit = 1, per = "1h" }
acme-slack = { limit = 1, per = "1h" }
internal = { limit = 1, per = "1h" }

[rates.tenant]
globex = { limit = 2, per = "1h" }
"#;

const TICKET_CREATED: &str =
    include_str!("../../adapters/webhook/tests/fixtures/ticket_created.json");
const MESSAGE_PLAIN: &str = include_str!("../../adapters/slack/tests/fixtures/message_plain.json");
const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";

/// `POST /v1/events`, with the answer's `Retry-After`.
async fn post_with_header(
    daemon: &Daemon,
    key: &str,
    event: &Value,
) -> (StatusCode, Value, Option<u64>) {
    let response = daemon
        .client()
        .post(daemon.url("/v1/events"))
        .bearer_auth(TOKEN)
        .header("Idempotency-Key", key)
        .json(event)
        .send()
        .await
        .expect("POST /v1/events");
    let retry_after = retry_after(&response);
    let (status, body) = read(response).await;
    (status, body, retry_after)
}

fn retry_after(response: &reqwest::Response) -> Option<u64> {
    response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

async fn zendesk(daemon: &Daemon, event_id: &str) -> (StatusCode, Value) {
    let mut body: Value = serde_json::from_str(TICKET_CREATED).expect("fixture");
    body["id"] = json!(event_id);
    body["detail"]["id"] = json!(unique("t"));
    body["subject"] = json!(format!(
        "zen:ticket:{}",
        body["detail"]["id"].as_str().unwrap_or("1")
    ));
    let response = daemon
        .client()
        .post(daemon.url("/v1/ingest/webhook/zendesk-local"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).expect("json"))
        .send()
        .await
        .expect("POST webhook");
    read(response).await
}

async fn slack(daemon: &Daemon, event_id: &str, ts: &str) -> (StatusCode, Value) {
    let mut body: Value = serde_json::from_str(MESSAGE_PLAIN).expect("fixture");
    body["event_id"] = json!(event_id);
    body["event"]["ts"] = json!(ts);
    let bytes = serde_json::to_vec(&body).expect("json");
    let timestamp = Utc::now().timestamp();
    let signature = switchyard_slack::sign(SLACK_SECRET, timestamp, &bytes);
    let response = daemon
        .client()
        .post(daemon.url("/v1/ingest/slack/acme-slack"))
        .header("content-type", "application/json")
        .header("X-Slack-Request-Timestamp", timestamp.to_string())
        .header("X-Slack-Signature", signature)
        .body(bytes)
        .send()
        .await
        .expect("POST slack");
    read(response).await
}

async fn cloudevent(daemon: &Daemon, id: &str) -> (StatusCode, Value, Option<u64>) {
    let response = daemon
        .client()
        .post(daemon.url("/v1/ingest/cloudevents/internal"))
        .bearer_auth(TOKEN)
        .header("ce-specversion", "1.0")
        .header("ce-type", "com.example.someevent")
        .header("ce-source", "/mycontext")
        .header("ce-id", id)
        .header("ce-subject", unique("blob"))
        .header("content-type", "application/json")
        .body(r#"{"n":1}"#)
        .send()
        .await
        .expect("POST cloudevents");
    let retry_after = retry_after(&response);
    let (status, body) = read(response).await;
    (status, body, retry_after)
}

#[tokio::test]
async fn max_queued_and_rate_refuse_with_the_right_status_per_channel_and_are_recorded() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = Daemon::start(
            &db,
            &config(&db, REFUSALS),
            &[("SLACK_SIGNING_SECRET", SLACK_SECRET)],
        )
        .await;

        // max_queued on /v1/events: 429 + Retry-After, recorded, and the retry of the same
        // delivery is decided anew once the queue has room.
        for key in ["q1", "q2"] {
            let event = super::harness::event("webhook", "ticket.queued", "acme", &unique("Q"));
            let (status, answer, _) = post_with_header(&daemon, key, &event).await;
            assert_eq!(status, StatusCode::OK, "{backend:?}: {answer}");
            assert_eq!(answer["outcome"], "routed");
        }
        let third = super::harness::event("webhook", "ticket.queued", "acme", &unique("Q"));
        let (status, answer, retry) = post_with_header(&daemon, "q3", &third).await;
        assert_eq!(
            status,
            StatusCode::TOO_MANY_REQUESTS,
            "{backend:?}: {answer}"
        );
        assert_eq!(answer["outcome"], "rate_limited");
        assert!(
            retry.is_some_and(|s| s >= 1),
            "{backend:?}: Retry-After {retry:?}"
        );
        let detail = answer["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("`max_queued` of workflow `queue`"),
            "{detail}"
        );
        let refused = daemon.intake("delivery_id=q3").await;
        assert_eq!(refused.len(), 1, "{backend:?}");
        assert_eq!(refused[0]["outcome"], "rate_limited");
        assert_eq!(listed(&daemon, "queue", "queued").await.len(), 2);
        // A copy while still full is refused again (not answered as a duplicate).
        let (status, again, _) = post_with_header(&daemon, "q3", &third).await;
        assert_eq!(
            status,
            StatusCode::TOO_MANY_REQUESTS,
            "{backend:?}: {again}"
        );
        assert_eq!(again["outcome"], "rate_limited");
        assert_eq!(claim(&daemon, "queue", 1).await.len(), 1);
        let (status, admitted, _) = post_with_header(&daemon, "q3", &third).await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {admitted}");
        assert_eq!(admitted["outcome"], "routed");
        let rows = daemon.intake("delivery_id=q3").await;
        assert_eq!(
            rows.len(),
            1,
            "{backend:?}: the retry replaced the refusal: {rows:?}"
        );
        assert_eq!(rows[0]["outcome"], "routed");
        let (_, duplicate, _) = post_with_header(&daemon, "q3", &third).await;
        assert_eq!(duplicate["outcome"], "duplicate", "{backend:?}");

        // A tenant's rate on /v1/events: two per hour at most, then 429 until a slot frees.
        for i in 0..2 {
            let event = super::harness::event("webhook", "ticket.created", "globex", &unique("G"));
            let (status, answer, _) = post_with_header(&daemon, &format!("g{i}"), &event).await;
            assert_eq!(status, StatusCode::OK, "{backend:?}: {answer}");
            assert_eq!(answer["outcome"], "routed");
        }
        let event = super::harness::event("webhook", "ticket.created", "globex", &unique("G"));
        let (status, answer, retry) = post_with_header(&daemon, "g2", &event).await;
        assert_eq!(
            status,
            StatusCode::TOO_MANY_REQUESTS,
            "{backend:?}: {answer}"
        );
        assert_eq!(answer["outcome"], "rate_limited");
        let retry = retry.expect("Retry-After");
        assert!(
            (1..=1800).contains(&retry),
            "{backend:?}: one admission every 30 min: Retry-After {retry}"
        );
        assert!(
            answer["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("`rate` of tenant `globex`"),
            "{answer}"
        );

        // Zendesk: 200 (a 429 would trip its circuit breaker), recorded and listed.
        let (status, first) = zendesk(&daemon, "zd-1").await;
        assert_eq!(
            (status, first["outcome"].clone()),
            (StatusCode::OK, json!("routed")),
            "{first}"
        );
        let (status, limited) = zendesk(&daemon, "zd-2").await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {limited}");
        assert_eq!(limited["outcome"], "rate_limited", "{backend:?}: {limited}");
        let rows = daemon
            .intake("source=zendesk-local&outcome=rate_limited")
            .await;
        assert_eq!(rows.len(), 1, "{backend:?}");
        assert_eq!(rows[0]["delivery_id"], "zd-2");

        // Slack: 200 (a 429 gets the app disabled), recorded and listed.
        let (status, first) = slack(&daemon, "Ev1", "1700000000.000100").await;
        assert_eq!(
            (status, first["outcome"].clone()),
            (StatusCode::OK, json!("routed")),
            "{first}"
        );
        let (status, limited) = slack(&daemon, "Ev2", "1700000000.000200").await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {limited}");
        assert_eq!(limited["outcome"], "rate_limited", "{backend:?}: {limited}");
        let rows = daemon
            .intake("source=acme-slack&outcome=rate_limited")
            .await;
        assert_eq!(rows.len(), 1, "{backend:?}");

        // CloudEvents: 429 + Retry-After, recorded.
        let (status, first, _) = cloudevent(&daemon, "ce-1").await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {first}");
        let (status, limited, retry) = cloudevent(&daemon, "ce-2").await;
        assert_eq!(
            status,
            StatusCode::TOO_MANY_REQUESTS,
            "{backend:?}: {limited}"
        );
        assert_eq!(limited["outcome"], "rate_limited");
        assert!(retry.is_some_and(|s| s >= 1), "{backend:?}");
        let rows = daemon.intake("source=internal&outcome=rate_limited").await;
        assert_eq!(rows.len(), 1, "{backend:?}");
        daemon.stop();
        db.drop_database().await;
    }
}

const SHARED: &str = r#"
[[workflow]]
id = "burst"
tenant = "acme"
status = "live"
run_as = "acme-agent"
max_queued = 5
triggers = [ { channel = "webhook", event_type = "ticket.burst", priority = 10 } ]

[[workflow]]
id = "slots"
tenant = "acme"
status = "live"
run_as = "acme-agent"
max_running = 3
triggers = [ { channel = "webhook", event_type = "ticket.slots", priority = 10 } ]

[[workflow]]
id = "metered"
tenant = "globex"
status = "live"
run_as = "globex-agent"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 10 } ]

[rates.tenant]
globex = { limit = 10, per = "1h" }
"#;

/// Fires `n` events of `event_type` for `tenant` at once, alternating between the daemons;
/// the outcomes.
async fn burst(daemons: &[&Daemon; 2], n: usize, event_type: &str, tenant: &str) -> Vec<String> {
    let mut tasks = Vec::new();
    for i in 0..n {
        let daemon = daemons[i % 2];
        let client = daemon.client().clone();
        let url = daemon.url("/v1/events");
        let event = super::harness::event("webhook", event_type, tenant, &unique("B"));
        tasks.push(tokio::spawn(async move {
            // As a sender does: a 503 (not acknowledged, e.g. a commit slower than
            // intake_timeout on a loaded machine) is retried under the same key.
            let key = unique("k");
            for _ in 0..50 {
                let response = client
                    .post(&url)
                    .bearer_auth(TOKEN)
                    .header("Idempotency-Key", &key)
                    .json(&event)
                    .send()
                    .await
                    .expect("POST");
                let (status, answer) = read(response).await;
                if status == StatusCode::SERVICE_UNAVAILABLE {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                let outcome = match answer["outcome"].as_str() {
                    Some("duplicate") => answer["first_outcome"].as_str(),
                    other => other,
                };
                return outcome.unwrap_or("?").to_owned();
            }
            "unanswered".to_owned()
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("task"));
    }
    outcomes
}

#[tokio::test]
async fn two_daemons_on_one_postgresql_never_admit_more_than_a_ceiling() {
    let Some(db) = TestDb::create(Backend::Postgres).await else {
        return;
    };
    let text = config(&db, SHARED);
    let a = Daemon::start(&db, &text, &[]).await;
    let b = Daemon::start(&db, &text, &[]).await;
    let both = [&a, &b];

    let outcomes = burst(&both, 40, "ticket.burst", "acme").await;
    let routed = outcomes.iter().filter(|o| *o == "routed").count();
    let limited = outcomes.iter().filter(|o| *o == "rate_limited").count();
    assert_eq!((routed, limited), (5, 35), "max_queued = 5: {outcomes:?}");
    assert_eq!(listed(&a, "burst", "queued").await.len(), 5);

    let outcomes = burst(&both, 40, "ticket.created", "globex").await;
    let routed = outcomes.iter().filter(|o| *o == "routed").count();
    assert_eq!(routed, 10, "rate 10 per hour: {outcomes:?}");
    assert_eq!(
        a.intake("outcome=rate_limited&limit=500").await.len(),
        35 + 30
    );

    for _ in 0..12 {
        post(&a, "ticket.slots", "acme", &unique("S")).await;
    }
    // Workers on both daemons claim at once, again and again: never more than 3 running.
    let mut tasks = Vec::new();
    for i in 0..16 {
        let daemon = both[i % 2];
        let client = daemon.client().clone();
        let url = daemon.url("/v1/claims");
        tasks.push(tokio::spawn(async move {
            let response = client
                .post(url)
                .bearer_auth(TOKEN)
                .json(&json!({"workflows": ["slots"], "max": 2}))
                .send()
                .await
                .expect("claim");
            let (status, answer) = read(response).await;
            assert_eq!(status, StatusCode::OK, "{answer}");
            answer["claims"].as_array().map_or(0, Vec::len)
        }));
    }
    let mut claimed = 0;
    for task in tasks {
        claimed += task.await.expect("task");
    }
    assert_eq!(claimed, 3, "max_running = 3 across two daemons");
    assert_eq!(listed(&b, "slots", "dispatched").await.len(), 3);
    a.stop();
    b.stop();
    db.drop_database().await;
}

/// A push target under `max_running`: the dispatcher hands the worker no more than the ceiling,
/// and each finish lets the oldest deferred run through.
#[tokio::test]
async fn max_running_holds_for_a_push_target() {
    use std::sync::{Arc, Mutex};

    use axum::Json;
    use axum::extract::State;
    use axum::routing::post as route_post;

    type Received = Arc<Mutex<Vec<String>>>;
    async fn worker(State(received): State<Received>, Json(message): Json<Value>) -> &'static str {
        let run = message["data"]["run"]["id"]
            .as_str()
            .unwrap_or("?")
            .to_owned();
        received.lock().expect("lock").push(run);
        "ok"
    }
    async fn wait_for(received: &Received, count: usize) -> Vec<String> {
        for _ in 0..600 {
            let now = received.lock().expect("lock").clone();
            if now.len() >= count {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the worker did not receive {count} runs within 60 s");
    }

    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(db) = TestDb::create(backend).await else {
            continue;
        };
        let received: Received = Arc::default();
        let app = axum::Router::new()
            .route("/runs", route_post(worker))
            .with_state(received.clone());
        let (addr, server) = super::harness::serve_local(app).await;
        let setup = format!(
            "[[target]]\nname = \"worker\"\nkind = \"http\"\nurl = \"http://{addr}/runs\"\n\
             signing_secret_env = \"WORKER_SECRET\"\n\n[[workflow]]\nid = \"pushed\"\n\
             tenant = \"acme\"\nstatus = \"live\"\nrun_as = \"acme-agent\"\ntarget = \"worker\"\nmax_running = 2\n\
             triggers = [ {{ channel = \"webhook\", event_type = \"ticket.created\", priority = 1 }} ]\n"
        );
        let daemon = Daemon::start(
            &db,
            &config(&db, &setup),
            &[("WORKER_SECRET", "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD")],
        )
        .await;
        let mut runs = Vec::new();
        for _ in 0..5 {
            runs.push(run_id(
                &post(&daemon, "ticket.created", "acme", &unique("P")).await,
            ));
        }
        // The first two are dispatched at once, each on its own request: they may reach the
        // worker in either order (seen under load); which two arrived is what counts here.
        let mut first_two = wait_for(&received, 2).await;
        first_two.sort();
        let mut expected = runs[..2].to_vec();
        expected.sort();
        assert_eq!(first_two, expected, "{backend:?}");
        // Several dispatcher passes (every 250 ms) later, still only the ceiling's worth.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(received.lock().expect("lock").len(), 2, "{backend:?}");
        assert_eq!(listed(&daemon, "pushed", "dispatched").await.len(), 2);
        for (ended, next) in [(0, 2), (1, 3)] {
            let (code, answer) = daemon.finish(&runs[ended], "completed").await;
            assert_eq!(code, StatusCode::OK, "{backend:?}: {answer}");
            let now = wait_for(&received, next + 1).await;
            assert_eq!(now[next], runs[next], "{backend:?}: arrival order");
        }
        // Delivered runs are recorded `dispatched` just after the worker answers.
        for _ in 0..600 {
            let dispatched = listed(&daemon, "pushed", "dispatched").await.len();
            assert!(dispatched <= 2, "{backend:?}: {dispatched} running");
            if dispatched == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(listed(&daemon, "pushed", "dispatched").await.len(), 2);
        daemon.stop();
        server.abort();
        db.drop_database().await;
    }
}
