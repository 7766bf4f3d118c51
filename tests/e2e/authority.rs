//! Principals end to end: a workflow whose principal is suspended, expired or lacks a capability
//! starts nothing (`authority_unavailable`, the workflow degraded) until a reload restores it;
//! a run whose principal is suspended before it is delivered is cancelled (`authority_revoked`)
//! and never reaches its worker; tenancy comes only from the verified source.

use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use switchyard_webhook::{SIGNATURE_HEADER, TIMESTAMP_HEADER, sign};

use super::harness::{Daemon, TestDb, config, event, run_id, unique};

/// Four principals of acme (one per way of refusing, and a fine one) and one of globex; one
/// workflow on each.
fn setup(bot_status: &str) -> String {
    format!(
        r#"
[[principal]]
id = "bot"
tenant = "acme"
kind = "service"
status = "{bot_status}"
capabilities = ["ticket:write"]

[[principal]]
id = "lapsed"
tenant = "acme"
kind = "delegated"
status = "active"
valid_until = 2020-01-01T00:00:00Z
capabilities = ["ticket:write"]

[[principal]]
id = "reader"
tenant = "acme"
kind = "service"
status = "active"
capabilities = ["ticket:read"]

[[workflow]]
id = "triage"
tenant = "acme"
status = "live"
run_as = "bot"
requires = ["ticket:write"]
triggers = [ {{ channel = "webhook", event_type = "ticket.created", priority = 10 }} ]

[[workflow]]
id = "fallback"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ {{ channel = "webhook", event_type = "ticket.created", priority = 1 }} ]

[[workflow]]
id = "escalate"
tenant = "acme"
status = "live"
run_as = "lapsed"
requires = ["ticket:write"]
triggers = [ {{ channel = "webhook", event_type = "ticket.escalated", priority = 10 }} ]

[[workflow]]
id = "closer"
tenant = "acme"
status = "live"
run_as = "reader"
requires = ["ticket:write"]
triggers = [ {{ channel = "webhook", event_type = "ticket.solved", priority = 10 }} ]
"#
    )
}

/// Waits (generously) until `check` holds for the daemon's answer to `GET path`.
pub async fn wait_until(
    daemon: &Daemon,
    path: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (_, body) = daemon.get_status(path).await;
        if check(&body) {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: last {path}: {body}\n{}",
            daemon.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn workflow<'a>(workflows: &'a Value, id: &str) -> &'a Value {
    workflows["workflows"]
        .as_array()
        .and_then(|all| all.iter().find(|w| w["id"] == id))
        .unwrap_or_else(|| panic!("no workflow {id} in {workflows}"))
}

#[tokio::test]
async fn refused_principals_start_nothing_and_a_reload_to_active_routes_again() {
    for db in TestDb::all().await {
        let text = config(&db, &setup("suspended"));
        let daemon = Daemon::start(&db, &text, &[]).await;
        let backend = db.backend;

        // Suspended: the winner is not started and the lower-priority fallback is not tried.
        let ticket = unique("T");
        let (status, answer) = daemon
            .post_event(
                &unique("d"),
                &event("webhook", "ticket.created", "acme", &ticket),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {answer}");
        assert_eq!(answer["outcome"], "authority_unavailable", "{answer}");
        assert_eq!(answer["workflow_id"], "triage", "{answer}");
        assert!(answer.get("run_id").is_none(), "{answer}");
        let detail = answer["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("principal `bot` is suspended"),
            "{backend:?}: {detail}"
        );
        // Expired and lacking a capability.
        let (_, expired) = daemon
            .post_event(
                &unique("d"),
                &event("webhook", "ticket.escalated", "acme", &unique("T")),
            )
            .await;
        assert_eq!(expired["outcome"], "authority_unavailable", "{expired}");
        assert!(
            expired["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("principal `lapsed` expired at 2020-01-01T00:00:00"),
            "{expired}"
        );
        let (_, incapable) = daemon
            .post_event(
                &unique("d"),
                &event("webhook", "ticket.solved", "acme", &unique("T")),
            )
            .await;
        assert_eq!(incapable["outcome"], "authority_unavailable", "{incapable}");
        assert!(
            incapable["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("principal `reader` lacks `ticket:write`"),
            "{incapable}"
        );
        // Recorded on the ledger, no run, no lock.
        let ledger = daemon.intake("outcome=authority_unavailable").await;
        assert_eq!(ledger.len(), 3, "{backend:?}: {ledger:?}");
        assert!(daemon.runs("").await.is_empty(), "{backend:?}: no run");
        let locks = daemon.get("/v1/locks").await;
        assert_eq!(locks["locks"], json!([]), "{locks}");

        // Degraded, never just "live": /v1/workflows, /readyz and the console.
        let workflows = daemon.get("/v1/workflows").await;
        for (id, reason) in [
            ("triage", "suspended"),
            ("escalate", "expired"),
            ("closer", "missing_capability"),
        ] {
            let w = workflow(&workflows, id);
            assert_eq!(w["degraded"]["reason"], reason, "{w}");
            assert_eq!(w["degraded"]["outcome"], "authority_unavailable", "{w}");
        }
        assert!(workflow(&workflows, "fallback").get("degraded").is_none());
        assert_eq!(workflow(&workflows, "triage")["run_as"], "bot");
        let (_, ready) = daemon.get_status("/readyz").await;
        let degraded: Vec<&str> = ready["degraded_workflows"]
            .as_array()
            .map(|all| {
                all.iter()
                    .filter_map(|w| w["workflow_id"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(degraded, ["closer", "escalate", "triage"], "{ready}");
        let console = super::console::Console::login(&daemon, super::harness::TOKEN).await;
        let page = console.page("/ui/workflows").await;
        assert!(
            page.contains("s-degraded") && page.contains("principal `bot` is suspended"),
            "{page}"
        );

        // Reload with the principal active: the next event routes to triage.
        let revision = workflows["config_revision"].clone();
        daemon.reload(&config(&db, &setup("active")));
        wait_until(&daemon, "/v1/workflows", "reload", |w| {
            w["config_revision"] != revision
        })
        .await;
        let (_, routed) = daemon
            .post_event(
                &unique("d"),
                &event("webhook", "ticket.created", "acme", &ticket),
            )
            .await;
        assert_eq!(routed["outcome"], "routed", "{backend:?}: {routed}");
        assert_eq!(routed["workflow_id"], "triage", "{routed}");
        let run = daemon.get(&format!("/v1/runs/{}", run_id(&routed))).await;
        assert_eq!(run["principal"]["id"], "bot", "{run}");
        assert_eq!(run["config_revision"], run["principal"]["config_revision"]);
        assert_ne!(
            run["config_revision"], revision,
            "the new revision routed it"
        );
        let workflows = daemon.get("/v1/workflows").await;
        assert!(workflow(&workflows, "triage").get("degraded").is_none());
        daemon.stop();
        db.drop_database().await;
    }
}

const WEBHOOK_SECRET: &str = "acme-zendesk-secret";

/// A Zendesk-shaped source of acme, and workflows of globex (with its principal) on the very
/// events acme's tickets produce.
const TENANCY: &str = r#"
[[source]]
kind = "webhook"
name = "zendesk-acme"
tenant = "acme"
signing_secret_env = "ZENDESK_ACME_SECRET"
account_id = 22129848

[[principal]]
id = "globex-admin"
tenant = "globex"
kind = "service"
status = "active"
capabilities = ["ticket:write", "ticket:delete"]

[[workflow]]
id = "globex-triage"
tenant = "globex"
status = "live"
run_as = "globex-admin"
requires = ["ticket:delete"]
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 1000 } ]

[[workflow]]
id = "acme-triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
deadline = "1h"
budgets = { steps = 40, cost_usd = 2.5, max_attempts = 4 }
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 1 } ]
"#;

/// A payload that names another tenant (in every field a careless adapter might read) still
/// belongs to the source's tenant: it never reaches globex's workflow or its principal.
#[tokio::test]
async fn a_payload_naming_another_tenant_never_reaches_its_workflows_or_principals() {
    for db in TestDb::all().await {
        let daemon = Daemon::start(
            &db,
            &config(&db, TENANCY),
            &[("ZENDESK_ACME_SECRET", WEBHOOK_SECRET)],
        )
        .await;
        let mut body: Value = serde_json::from_str(include_str!(
            "../../adapters/webhook/tests/fixtures/ticket_created.json"
        ))
        .expect("fixture");
        let ticket = unique("5");
        body["id"] = json!(unique("evt"));
        body["detail"]["id"] = json!(ticket);
        body["subject"] = json!(format!("zen:ticket:{ticket}"));
        body["tenant_id"] = json!("globex");
        body["tenant"] = json!("globex");
        body["detail"]["tenant_id"] = json!("globex");
        body["detail"]["principal"] = json!("globex-admin");
        body["run_as"] = json!("globex-admin");
        let bytes = serde_json::to_vec(&body).expect("json");
        let timestamp = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
        let signature = sign(WEBHOOK_SECRET.as_bytes(), &timestamp, &bytes);
        let response = daemon
            .client()
            .post(daemon.url("/v1/ingest/webhook/zendesk-acme"))
            .header("content-type", "application/json")
            .header(SIGNATURE_HEADER, signature)
            .header(TIMESTAMP_HEADER, timestamp)
            .body(bytes)
            .send()
            .await
            .expect("POST");
        let (status, answer) = super::harness::read(response).await;
        assert_eq!(status, StatusCode::OK, "{:?}: {answer}", db.backend);
        assert_eq!(answer["outcome"], "routed", "{answer}");
        assert_eq!(answer["workflow_id"], "acme-triage", "{answer}");
        let run = daemon.get(&format!("/v1/runs/{}", run_id(&answer))).await;
        assert_eq!(run["tenant_id"], "acme", "{run}");
        assert_eq!(run["principal"]["id"], "acme-agent", "{run}");
        assert!(
            daemon.runs("tenant=globex").await.is_empty(),
            "globex got nothing"
        );
        // The run message a worker claims carries acme's principal, not the payload's, with
        // the run's deadline and budgets.
        let claims = daemon.claim(&["acme-triage", "globex-triage"], 10).await;
        assert_eq!(claims.len(), 1, "{claims:?}");
        let sent = &claims[0]["message"]["data"]["run"];
        assert_eq!(
            sent["principal"],
            json!({"id": "acme-agent", "tenant": "acme", "kind": "service", "capabilities": []}),
            "{sent}"
        );
        assert_eq!(
            sent["budgets"],
            json!({"max_attempts": 4, "steps": 40, "cost_usd": 2.5}),
            "{sent}"
        );
        let created = chrono::DateTime::parse_from_rfc3339(run["created_at"].as_str().unwrap())
            .expect("created_at");
        let deadline = chrono::DateTime::parse_from_rfc3339(sent["deadline"].as_str().unwrap())
            .expect("deadline");
        assert_eq!((deadline - created).num_seconds(), 3600, "{sent}");
        assert_eq!(run["deadline"], sent["deadline"]);
        assert_eq!(sent["config_revision"], run["config_revision"]);
        daemon.stop();
        db.drop_database().await;
    }
}

/// A principal and one workflow delivered to the http target `worker` at `port` (retried every
/// second for a minute), or to the built-in pull target when `port` is `None`.
fn delivered(status: &str, port: Option<u16>) -> String {
    let target = port.map_or(String::new(), |port| {
        format!(
            "[[target]]\nname = \"worker\"\nkind = \"http\"\nurl = \"http://127.0.0.1:{port}/runs\"\n\
             signing_secret_env = \"WORKER_SECRET\"\nretry = [{}]\n",
            vec!["\"1s\""; 60].join(", ")
        )
    });
    let target_key = if port.is_some() {
        "target = \"worker\"\n"
    } else {
        ""
    };
    format!(
        "{target}\n[[principal]]\nid = \"bot\"\ntenant = \"acme\"\nkind = \"delegated\"\n\
         status = \"{status}\"\ncapabilities = [\"ticket:write\"]\n\n[[workflow]]\nid = \"triage\"\n\
         tenant = \"acme\"\nstatus = \"live\"\nrun_as = \"bot\"\nrequires = [\"ticket:write\"]\n\
         {target_key}triggers = [ {{ channel = \"chat\", event_type = \"message\", priority = 1 }} ]\n"
    )
}

const WORKER_SECRET: (&str, &str) = ("WORKER_SECRET", "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD");

async fn reload_and_wait(daemon: &Daemon, text: &str) {
    let before = daemon.get("/v1/workflows").await["config_revision"].clone();
    daemon.reload(text);
    wait_until(daemon, "/v1/workflows", "reload", |w| {
        w["config_revision"] != before
    })
    .await;
}

/// The run is cancelled with `authority_revoked` in its history and dispatch, and its entity is
/// free again.
async fn assert_revoked(daemon: &Daemon, run_id: &str, entity: &str, backend: &str) {
    let run = wait_until(daemon, &format!("/v1/runs/{run_id}"), "revoked", |r| {
        r["status"] == "cancelled"
    })
    .await;
    assert_eq!(run["end_reason"], "authority_revoked", "{backend}: {run}");
    assert_eq!(run["dispatch"]["status"], "cancelled", "{run}");
    assert_eq!(run["dispatch"]["reason"], "authority_revoked", "{run}");
    let history: Vec<&Value> = run["history"]
        .as_array()
        .map(|h| {
            h.iter()
                .filter(|e| e["cause"] == "authority_revoked")
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(history.len(), 1, "{run}");
    assert!(
        history[0]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("principal `bot` is suspended"),
        "{run}"
    );
    let locks = daemon.get("/v1/locks").await;
    let held = locks["locks"]
        .as_array()
        .is_some_and(|all| all.iter().any(|l| l["target_entity_id"] == entity));
    assert!(!held, "{backend}: entity released: {locks}");
}

/// Suspended between routing and delivery (the http target down meanwhile, then up): the run
/// ends `cancelled` (`authority_revoked`), its entity is released, and the worker never
/// receives it. The same for a pull worker's claim.
#[tokio::test]
async fn a_principal_suspended_before_delivery_revokes_the_run_and_no_worker_sees_it() {
    for db in TestDb::all().await {
        let backend = format!("{:?}", db.backend);
        // A port nothing listens on yet: the target is down.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let daemon = Daemon::start(
            &db,
            &config(&db, &delivered("active", Some(port))),
            &[WORKER_SECRET],
        )
        .await;
        let entity = unique("C");
        let (_, routed) = daemon
            .post_event(&unique("d"), &event("chat", "message", "acme", &entity))
            .await;
        assert_eq!(routed["outcome"], "routed", "{backend}: {routed}");
        let id = run_id(&routed);
        wait_until(
            &daemon,
            &format!("/v1/runs/{id}"),
            "a failed attempt",
            |r| r["attempts"].as_array().is_some_and(|a| !a.is_empty()),
        )
        .await;

        reload_and_wait(&daemon, &config(&db, &delivered("suspended", Some(port)))).await;
        // The worker comes up, counting every request it gets.
        let received = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = received.clone();
        let app = axum::Router::new().route(
            "/runs",
            axum::routing::post(move || {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { "ok" }
            }),
        );
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("bind the worker's port");
        let worker = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        assert_revoked(&daemon, &id, &entity, &backend).await;
        // Ended for good: nothing is left to deliver, whatever the dispatcher does next.
        let run = daemon.get(&format!("/v1/runs/{id}")).await;
        assert!(
            run["attempts"]
                .as_array()
                .is_some_and(|a| a.iter().all(|a| a["result"] != "delivered")),
            "{run}"
        );
        assert_eq!(
            received.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "{backend}: the worker never received it"
        );
        // Restored: the entity routes again at once (it was released), and is delivered.
        reload_and_wait(&daemon, &config(&db, &delivered("active", Some(port)))).await;
        let (_, again) = daemon
            .post_event(&unique("d"), &event("chat", "message", "acme", &entity))
            .await;
        assert_eq!(again["outcome"], "routed", "{backend}: {again}");
        wait_until(
            &daemon,
            &format!("/v1/runs/{}", run_id(&again)),
            "delivered",
            |r| r["status"] == "dispatched",
        )
        .await;
        assert_eq!(received.load(std::sync::atomic::Ordering::SeqCst), 1);
        worker.abort();
        daemon.stop();

        // Pull: a claim after the suspension hands out nothing and cancels the run.
        let daemon = Daemon::start(&db, &config(&db, &delivered("active", None)), &[]).await;
        let entity = unique("P");
        let (_, routed) = daemon
            .post_event(&unique("d"), &event("chat", "message", "acme", &entity))
            .await;
        assert_eq!(routed["outcome"], "routed", "{backend}: {routed}");
        reload_and_wait(&daemon, &config(&db, &delivered("suspended", None))).await;
        let claims = daemon.claim(&["triage"], 10).await;
        assert!(claims.is_empty(), "{backend}: {claims:?}");
        assert_revoked(&daemon, &run_id(&routed), &entity, &backend).await;
        daemon.stop();
        db.drop_database().await;
    }
}
