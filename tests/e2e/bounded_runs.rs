//! Bounded runs end to end: usage past a budget ends the run at the heartbeat that reports it
//! (409 `budget_exhausted`); a deadline that passed while the daemon was down (kill -9) is
//! applied at restart, once across two replicas; a late finish is recorded, not applied; a
//! worker may end a run `superseded`; `GET /v1/runs/{id}` answers the five audit questions.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::authority::wait_until;
use super::harness::{Backend, Daemon, TOKEN, TestDb, config, event, run_id, unique};

/// One pull workflow of acme with `bounds` (deadline and budgets keys).
fn workflow(bounds: &str) -> String {
    format!(
        "[[workflow]]\nid = \"agent\"\ntenant = \"acme\"\nstatus = \"live\"\nrun_as = \"acme-agent\"\n\
         {bounds}\ntriggers = [ {{ channel = \"chat\", event_type = \"message\", priority = 1 }} ]\n"
    )
}

/// Routes one event on a fresh entity and claims its run: (run id, entity, fencing token).
async fn routed_and_claimed(daemon: &Daemon) -> (String, String, i64) {
    let entity = unique("E");
    let (_, answer) = daemon
        .post_event(&unique("d"), &event("chat", "message", "acme", &entity))
        .await;
    assert_eq!(answer["outcome"], "routed", "{answer}");
    let id = run_id(&answer);
    let claims = daemon.claim(&["agent"], 1).await;
    assert_eq!(claims.len(), 1, "{claims:?}");
    let token = claims[0]["message"]["data"]["run"]["fencing_token"]
        .as_i64()
        .expect("token");
    (id, entity, token)
}

async fn heartbeat(daemon: &Daemon, id: &str, body: Value) -> (StatusCode, Value) {
    daemon
        .post(&format!("/v1/runs/{id}/heartbeat"), &body)
        .await
}

async fn entity_held(daemon: &Daemon, entity: &str) -> bool {
    daemon.get("/v1/locks").await["locks"]
        .as_array()
        .is_some_and(|all| all.iter().any(|l| l["target_entity_id"] == entity))
}

fn causes(run: &Value, cause: &str) -> usize {
    run["history"]
        .as_array()
        .map_or(0, |h| h.iter().filter(|e| e["cause"] == cause).count())
}

#[tokio::test]
async fn usage_past_a_budget_ends_the_run_at_that_heartbeat() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let text = config(&db, &workflow("budgets = { steps = 3, cost_usd = 1.0 }"));
        let daemon = Daemon::start(&db, &text, &[]).await;
        let (id, entity, token) = routed_and_claimed(&daemon).await;

        let (status, answer) = heartbeat(
            &daemon,
            &id,
            json!({"fencing_token": token, "usage": {"steps": 2, "cost_usd": 0.25}}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {answer}");
        // A key with no budget is refused, naming it, and changes nothing.
        let (status, answer) = heartbeat(
            &daemon,
            &id,
            json!({"fencing_token": token, "usage": {"tokens": 100}}),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert!(
            answer.to_string().contains("`usage.tokens`")
                && answer.to_string().contains("cost_usd, steps"),
            "{answer}"
        );
        let run = daemon.get(&format!("/v1/runs/{id}")).await;
        assert_eq!(
            run["usage"],
            json!({"steps": 2.0, "cost_usd": 0.25}),
            "{run}"
        );
        assert_eq!(run["status"], "dispatched", "{run}");

        // Past the budget: 409 budget_exhausted, the run failed, its entity released.
        let (status, answer) = heartbeat(
            &daemon,
            &id,
            json!({"fencing_token": token, "usage": {"steps": 2}}),
        )
        .await;
        assert_eq!(status, StatusCode::CONFLICT, "{backend:?}: {answer}");
        assert_eq!(answer["error"], "budget_exhausted", "{answer}");
        let run = daemon.get(&format!("/v1/runs/{id}")).await;
        assert_eq!(run["status"], "failed", "{run}");
        assert_eq!(run["end_reason"], "budget_exhausted", "{run}");
        assert_eq!(run["usage"]["steps"], 4.0, "{run}");
        assert_eq!(causes(&run, "budget_exhausted"), 1, "{run}");
        assert!(!entity_held(&daemon, &entity).await, "{backend:?}");
        // The worker's next report is refused: the run is over.
        let (status, _) = heartbeat(&daemon, &id, json!({"fencing_token": token})).await;
        assert_eq!(status, StatusCode::CONFLICT);
        daemon.stop();
        db.drop_database().await;
    }
}

/// A deadline that passes while the daemon is killed (-9) is applied when it starts again:
/// the run ends `failed` (`deadline_exceeded`), its entity released; the worker's finish after
/// that is recorded as late, not applied.
#[tokio::test]
async fn a_deadline_passed_while_down_is_applied_at_restart_and_a_late_finish_is_not() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let text = config(&db, &workflow("deadline = \"3s\""));
        let daemon = Daemon::start(&db, &text, &[]).await;
        let (id, entity, token) = routed_and_claimed(&daemon).await;
        let run = daemon.get(&format!("/v1/runs/{id}")).await;
        let deadline = chrono::DateTime::parse_from_rfc3339(run["deadline"].as_str().unwrap())
            .expect("deadline");
        let config_path = daemon.config_path.clone();
        drop(daemon); // SIGKILL
        while chrono::Utc::now() <= deadline + chrono::TimeDelta::milliseconds(200) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let daemon = Daemon::start_with_file(&config_path, &[]).await;
        let run = wait_until(&daemon, &format!("/v1/runs/{id}"), "deadline", |r| {
            r["status"] == "failed"
        })
        .await;
        assert_eq!(run["end_reason"], "deadline_exceeded", "{backend:?}: {run}");
        assert_eq!(causes(&run, "deadline_exceeded"), 1, "{run}");
        assert!(!entity_held(&daemon, &entity).await, "{backend:?}");

        let (status, answer) = daemon
            .post(
                &format!("/v1/runs/{id}/finish"),
                &json!({"status": "completed", "fencing_token": token}),
            )
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{backend:?}: {answer}");
        assert_eq!(answer["error"], "deadline_exceeded", "{answer}");
        let run = daemon.get(&format!("/v1/runs/{id}")).await;
        assert_eq!(run["status"], "failed", "not applied: {run}");
        assert_eq!(causes(&run, "finished_late"), 1, "recorded: {run}");
        daemon.stop();
        db.drop_database().await;
    }
}

/// Two replicas on one PostgreSQL: every passed deadline is applied exactly once.
#[tokio::test]
async fn deadlines_fire_once_across_two_replicas() {
    let Some(db) = TestDb::create(Backend::Postgres).await else {
        return;
    };
    let text = config(&db, &workflow("deadline = \"2s\""));
    let a = Daemon::start(&db, &text, &[]).await;
    let b = Daemon::start(&db, &text, &[]).await;
    let mut ids = Vec::new();
    for i in 0..30 {
        let daemon = if i % 2 == 0 { &a } else { &b };
        let (_, answer) = daemon
            .post_event(
                &unique("d"),
                &event("chat", "message", "acme", &unique("E")),
            )
            .await;
        assert_eq!(answer["outcome"], "routed", "{answer}");
        ids.push(run_id(&answer));
    }
    for id in &ids {
        let run = wait_until(&a, &format!("/v1/runs/{id}"), "deadline", |r| {
            r["status"] == "failed"
        })
        .await;
        assert_eq!(run["end_reason"], "deadline_exceeded", "{run}");
        assert_eq!(causes(&run, "deadline_exceeded"), 1, "once: {run}");
        assert_eq!(run["dispatch"]["status"], "cancelled", "{run}");
    }
    assert_eq!(a.get("/v1/locks").await["locks"], json!([]));
    a.stop();
    b.stop();
    db.drop_database().await;
}

/// A worker ends a run `superseded` with the subject version that made it unnecessary: its
/// own final status, counted apart from failures.
#[tokio::test]
async fn a_superseded_finish_names_the_subject_version_and_is_not_a_failure() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let text = config(&db, &workflow("budgets = { steps = 10 }"));
        let daemon = Daemon::start(&db, &text, &[]).await;
        let (id, entity, token) = routed_and_claimed(&daemon).await;
        let finish = |body: Value| {
            let daemon = &daemon;
            let id = id.clone();
            async move { daemon.post(&format!("/v1/runs/{id}/finish"), &body).await }
        };
        let (status, answer) =
            finish(json!({"status": "superseded", "fencing_token": token})).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert!(answer.to_string().contains("subject_version"), "{answer}");
        let (status, run) = finish(json!({
            "status": "superseded",
            "fencing_token": token,
            "subject_version": "zendesk:ticket:updated_at=2026-12-02T02:00:00Z",
            "worker_version": "triage-worker 1.4.2",
            "usage": {"steps": 3},
        }))
        .await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {run}");
        assert_eq!(run["status"], "superseded", "{run}");
        let run = daemon.get(&format!("/v1/runs/{id}")).await;
        assert_eq!(
            run["subject_version"],
            "zendesk:ticket:updated_at=2026-12-02T02:00:00Z"
        );
        assert_eq!(run["worker_version"], "triage-worker 1.4.2");
        assert_eq!(run["usage"], json!({"steps": 3.0}));
        assert!(!entity_held(&daemon, &entity).await);
        // The audit: the five questions, each answered from what was recorded.
        let audit = &run["audit"];
        let what = &audit["what_happened"];
        assert_eq!(what["event"]["channel"], "chat", "{audit}");
        assert_eq!(
            what["event"]["target_entity_id"],
            entity.as_str(),
            "{audit}"
        );
        assert_eq!(what["source"], "api", "{audit}");
        assert!(what["raw_ref"].is_string(), "{audit}");
        let revision = run["config_revision"].clone();
        assert!(revision.is_string(), "{run}");
        assert_eq!(audit["why"]["outcome"], "routed", "{audit}");
        assert_eq!(audit["why"]["workflow_id"], "agent", "{audit}");
        assert_eq!(audit["why"]["config_revision"], revision, "{audit}");
        assert_eq!(audit["why"]["trigger"]["priority"], 1, "{audit}");
        assert_eq!(audit["authority"]["principal_id"], "acme-agent", "{audit}");
        assert_eq!(audit["authority"]["kind"], "service", "{audit}");
        assert_eq!(audit["authority"]["status"], "active", "{audit}");
        assert_eq!(audit["authority"]["config_revision"], revision, "{audit}");
        assert_eq!(audit["version"]["config_revision"], revision, "{audit}");
        assert_eq!(audit["version"]["worker_version"], "triage-worker 1.4.2");
        assert_eq!(audit["ending"]["status"], "superseded", "{audit}");
        assert_eq!(audit["ending"]["finished"], true, "{audit}");
        assert_eq!(
            audit["ending"]["subject_version"],
            "zendesk:ticket:updated_at=2026-12-02T02:00:00Z"
        );
        // The console's run page shows the same five answers.
        let console = super::console::Console::login(&daemon, TOKEN).await;
        let page = console.page(&format!("/ui/runs/{id}")).await;
        for needle in [
            "What happened",
            "Why work started",
            "Whose authority",
            "Which version ran",
            "How it ended",
            "acme-agent",
            "triage-worker 1.4.2",
            "s-superseded",
        ] {
            assert!(page.contains(needle), "{needle} in the run page:\n{page}");
        }
        // Counted apart from failures on the console's workflows page too.
        let workflows = console.page("/ui/workflows").await;
        assert!(
            workflows.contains(">superseded 1</a>") && !workflows.contains(">failed 1</a>"),
            "{workflows}"
        );
        let superseded = daemon.runs("status=superseded").await;
        assert_eq!(superseded.len(), 1, "{superseded:?}");
        let metrics = daemon.metrics().await;
        assert!(
            metrics.contains(r#"switchyard_runs_finished_total{status="superseded"} 1"#),
            "{metrics}"
        );
        assert!(
            !metrics.contains(r#"switchyard_runs_finished_total{status="failed"}"#),
            "{metrics}"
        );
        daemon.stop();
        db.drop_database().await;
    }
}

/// A workflow's `max_attempts` bounds pull claims too: past it the run is dead-lettered (and
/// can be redispatched), even though the target's `max_claims` is higher.
#[tokio::test]
async fn max_attempts_bounds_pull_claims() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let text = config(&db, &workflow("budgets = { max_attempts = 2 }"));
        let daemon = Daemon::start(&db, &text, &[]).await;
        let entity = unique("E");
        let (_, answer) = daemon
            .post_event(&unique("d"), &event("chat", "message", "acme", &entity))
            .await;
        let id = run_id(&answer);
        for round in 1..=2 {
            let claims = daemon.claim(&["agent"], 1).await;
            assert_eq!(claims.len(), 1, "{backend:?} round {round}: {claims:?}");
            let token = claims[0]["token"].as_str().expect("token").to_owned();
            let (status, answer) = daemon
                .post(&format!("/v1/claims/{token}/release"), &json!({}))
                .await;
            assert_eq!(status, StatusCode::OK, "{answer}");
        }
        assert!(daemon.claim(&["agent"], 1).await.is_empty(), "{backend:?}");
        let run = daemon.get(&format!("/v1/runs/{id}")).await;
        assert_eq!(run["status"], "dead_lettered", "{backend:?}: {run}");
        assert_eq!(run["end_reason"], "max_attempts", "{run}");
        assert_eq!(run["dispatch"]["status"], "dead_lettered", "{run}");
        assert!(!entity_held(&daemon, &entity).await);
        let (status, again) = daemon
            .post(&format!("/v1/runs/{id}/redispatch"), &json!({}))
            .await;
        assert_eq!(status, StatusCode::OK, "{again}");
        // The history and the audit name the token that redispatched it.
        let run = daemon.get(&format!("/v1/runs/{id}")).await;
        let last = &run["history"][run["history"].as_array().map_or(0, Vec::len) - 1];
        assert_eq!(last["cause"], "redispatched", "{backend:?}: {run}");
        assert!(
            last["detail"]
                .as_str()
                .is_some_and(|d| d.ends_with("; by token:api_token")),
            "{backend:?}: {last}"
        );
        assert!(
            run["audit"]["ending"]["detail"]
                .as_str()
                .is_some_and(|d| d.ends_with("; by token:api_token")),
            "{backend:?}: {}",
            run["audit"]
        );
        daemon.stop();
        db.drop_database().await;
    }
}

/// `max_attempts` bounds push delivery too: a target that stays down dead-letters the run after
/// that many attempts, although its retry schedule has many more steps.
#[tokio::test]
async fn max_attempts_bounds_push_deliveries() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let target = format!(
            "[[target]]\nname = \"down\"\nkind = \"http\"\nurl = \"http://127.0.0.1:{port}/\"\n\
             signing_secret_env = \"WORKER_SECRET\"\nretry = [{}]\n",
            vec!["\"1s\""; 30].join(", ")
        );
        let text = config(
            &db,
            &format!(
                "{target}\n{}",
                workflow("target = \"down\"\nbudgets = { max_attempts = 2 }")
            ),
        );
        let daemon = Daemon::start(
            &db,
            &text,
            &[("WORKER_SECRET", "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD")],
        )
        .await;
        let (_, answer) = daemon
            .post_event(
                &unique("d"),
                &event("chat", "message", "acme", &unique("E")),
            )
            .await;
        let id = run_id(&answer);
        let run = wait_until(&daemon, &format!("/v1/runs/{id}"), "dead letter", |r| {
            r["status"] == "dead_lettered"
        })
        .await;
        assert_eq!(
            run["dispatch"]["reason"], "max_attempts",
            "{backend:?}: {run}"
        );
        assert_eq!(run["attempts"].as_array().map(Vec::len), Some(2), "{run}");
        daemon.stop();
        db.drop_database().await;
    }
}
