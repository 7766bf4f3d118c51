//! One tenant never acts for another (issue 32, defects 1 and 2 and the resume actor), attacked
//! from a second tenant's tokens on every backend: a sender cannot make its event's `raw_ref`
//! name another delivery's bytes, a replay reads only a row's own bytes and refuses an event
//! that comes out for another tenant, an `Idempotency-Key` is scoped to the caller's tenant on
//! `/v1/events` and `/v1/waits/resume`, and a resume decides as the token that sent it.
//! Each test also checks that the victim's own traffic is unaffected.

use std::time::Duration;

use reqwest::StatusCode;
use sea_orm::{ConnectionTrait, Database};
use serde_json::{Value, json};

use super::harness::{Daemon, TestDb, config, event, run_id, unique};

const ACME_OPS: &str = "acme-ops-secret-0123456789";
const ACME_ADMIN: &str = "acme-admin-secret-0123456789";
const GLOBEX_OPS: &str = "globex-ops-secret-0123456789";

const TENANTS: &str = r#"
[[token]]
name = "acme-ops"
secret_env = "SY_ACME_OPS"
scopes = ["read", "raw:read", "runs:write", "events:write"]
tenants = ["acme"]

[[token]]
name = "acme-admin"
secret_env = "SY_ACME_ADMIN"
scopes = ["admin"]
tenants = ["acme"]

[[token]]
name = "globex-ops"
secret_env = "SY_GLOBEX_OPS"
scopes = ["read", "raw:read", "runs:write", "events:write"]
tenants = ["globex"]

[[workflow]]
id = "triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 10 } ]

[[workflow]]
id = "globex-triage"
tenant = "globex"
status = "live"
run_as = "globex-agent"
approvers = ["globex-ops"]
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 10 } ]
"#;

async fn start(db: &TestDb) -> Daemon {
    Daemon::start(
        db,
        &config(db, TENANTS),
        &[
            ("SY_ACME_OPS", ACME_OPS),
            ("SY_ACME_ADMIN", ACME_ADMIN),
            ("SY_GLOBEX_OPS", GLOBEX_OPS),
        ],
    )
    .await
}

/// `method path` with the token `secret` and, for a POST, `body` (and `key` as the
/// `Idempotency-Key`).
async fn call(
    daemon: &Daemon,
    secret: &str,
    path: &str,
    key: Option<&str>,
    body: Option<&Value>,
) -> (StatusCode, Value) {
    let request = match body {
        Some(body) => daemon.client().post(daemon.url(path)).json(body),
        None => daemon.client().get(daemon.url(path)),
    };
    let request = match key {
        Some(key) => request.header("Idempotency-Key", key),
        None => request,
    };
    let response = request.bearer_auth(secret).send().await.expect("send");
    super::harness::read(response).await
}

/// Every run of `tenant`, as the root token sees them.
async fn runs_of(daemon: &Daemon, tenant: &str) -> Vec<Value> {
    daemon.runs(&format!("tenant={tenant}&limit=1000")).await
}

/// Runs `statement` on the daemon's database, as an operator (or an older daemon) would.
async fn execute(db: &TestDb, statement: &str) {
    let connection = Database::connect(&db.url).await.expect("connect");
    connection
        .execute_unprepared(statement)
        .await
        .unwrap_or_else(|error| panic!("{statement}: {error}"));
}

/// Starts a replay as `secret` and waits for its report.
async fn replay(daemon: &Daemon, secret: &str, request: &Value) -> Value {
    let (status, started) = call(daemon, secret, "/v1/replays", None, Some(request)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let id = started["id"].as_str().expect("replay id").to_owned();
    for _ in 0..1200 {
        let report = daemon.get(&format!("/v1/replays/{id}?limit=1000")).await;
        if report["status"] != "running" {
            return report;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("replay {id} did not end");
}

/// The replay result of the delivery `intake_id`.
fn result_of<'a>(report: &'a Value, intake_id: &str) -> &'a Value {
    report["results"]
        .as_array()
        .expect("results")
        .iter()
        .find(|r| r["intake_id"] == intake_id)
        .unwrap_or_else(|| panic!("no result for {intake_id}: {report:#}"))
}

/// Defect 1: acme's events:write token posts an event whose `raw_ref` names globex's stored
/// delivery, then acme's tenant-limited admin replays it live. Before the fix the replay read
/// globex's bytes through that `raw_ref` and made a globex run out of them.
#[tokio::test]
async fn a_sender_cannot_point_its_event_at_another_tenants_bytes() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = start(&db).await;
        let (status, globex) = call(
            &daemon,
            GLOBEX_OPS,
            "/v1/events",
            Some(&unique("g")),
            Some(&event("webhook", "ticket.created", "globex", &unique("G"))),
        )
        .await;
        assert_eq!(
            (status, globex["outcome"].as_str()),
            (StatusCode::OK, Some("routed"))
        );
        let globex_intake = globex["intake_id"].as_str().expect("intake id").to_owned();

        // The direct attack: refused before the ledger, nothing recorded.
        let mut injected = event("webhook", "ticket.created", "acme", &unique("A"));
        injected["raw_ref"] = json!(format!("raw:{globex_intake}"));
        let key = unique("inject");
        let (status, refused) =
            call(&daemon, ACME_OPS, "/v1/events", Some(&key), Some(&injected)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{backend:?}: {refused}");
        assert_eq!(refused["outcome"], "invalid_event", "{refused}");
        assert!(
            refused["detail"]
                .as_str()
                .is_some_and(|d| d.contains("may not name stored bytes")),
            "{refused}"
        );
        assert!(
            daemon
                .intake("")
                .await
                .iter()
                .all(|row| row["delivery_id"] != key.as_str()),
            "a refused event is not recorded"
        );
        // A reference outside Switchyard is the sender's to keep.
        let mut external = event("webhook", "ticket.created", "acme", &unique("A"));
        external["raw_ref"] = json!("s3://acme-forms/17");
        let (_, kept) = call(
            &daemon,
            ACME_OPS,
            "/v1/events",
            Some(&unique("ext")),
            Some(&external),
        )
        .await;
        assert_eq!(kept["outcome"], "routed", "{kept}");

        // A row recorded before the fix (its raw_ref rewritten here, as an older daemon would
        // have stored it): a live replay by acme's own admin reads the row's own bytes.
        let acme_entity = unique("A");
        let (_, acme) = call(
            &daemon,
            ACME_OPS,
            "/v1/events",
            Some(&unique("a")),
            Some(&event("webhook", "ticket.created", "acme", &acme_entity)),
        )
        .await;
        assert_eq!(acme["outcome"], "routed", "{acme}");
        let acme_intake = acme["intake_id"].as_str().expect("intake id").to_owned();
        execute(
            &db,
            &format!(
                "UPDATE intake SET raw_ref = 'raw:{globex_intake}' WHERE id = '{acme_intake}'"
            ),
        )
        .await;
        let globex_runs = runs_of(&daemon, "globex").await.len();
        let report = replay(
            &daemon,
            ACME_ADMIN,
            &json!({"mode": "live", "revision": "current"}),
        )
        .await;
        assert_eq!(report["status"], "completed", "{report:#}");
        let result = result_of(&report, &acme_intake);
        assert_eq!(
            result["replayed"]["workflow_id"], "triage",
            "{backend:?}: replayed as acme's: {result:#}"
        );
        assert_eq!(
            runs_of(&daemon, "globex").await.len(),
            globex_runs,
            "{backend:?}: acme's replay made no globex run"
        );
        for run in runs_of(&daemon, "acme").await {
            assert_eq!(run["tenant_id"], "acme");
        }

        // Stored bytes that normalise for another tenant (a row the first bug wrote): the
        // replay refuses the event and records why; a live replay re-admits nothing for it.
        let forged = event("webhook", "ticket.created", "globex", &unique("G"));
        let forged_hex = hex::encode(forged.to_string());
        let body = match backend {
            super::harness::Backend::Postgres => format!("'\\x{forged_hex}'::bytea"),
            _ => format!("X'{forged_hex}'"),
        };
        execute(
            &db,
            &format!("UPDATE intake SET raw_body = {body} WHERE id = '{acme_intake}'"),
        )
        .await;
        let diagnostic = replay(&daemon, super::harness::TOKEN, &json!({"tenant": "acme"})).await;
        let refused = result_of(&diagnostic, &acme_intake);
        assert_eq!(
            refused["replayed"]["outcome"], "unauthorized_source",
            "{backend:?}: {refused:#}"
        );
        assert!(
            refused["why"]
                .as_str()
                .is_some_and(|d| d.contains("tenant_mismatch")),
            "{refused:#}"
        );
        let live = replay(
            &daemon,
            ACME_ADMIN,
            &json!({"mode": "live", "revision": "current"}),
        )
        .await;
        assert_eq!(
            result_of(&live, &acme_intake)["replayed"]["outcome"],
            "unauthorized_source",
            "{live:#}"
        );
        assert_eq!(
            runs_of(&daemon, "globex").await.len(),
            globex_runs,
            "{backend:?}: no globex run from acme's row"
        );

        // globex's own traffic is unaffected.
        let (_, own) = call(
            &daemon,
            GLOBEX_OPS,
            "/v1/events",
            Some(&unique("g")),
            Some(&event("webhook", "ticket.created", "globex", &unique("G"))),
        )
        .await;
        assert_eq!(own["outcome"], "routed", "{own}");
        daemon.stop();
        db.drop_database().await;
    }
}

/// Defect 2: acme uses globex's next `Idempotency-Key` first. Before the fix globex's event
/// became a `duplicate` of acme's (nothing recorded for globex), and in the other order acme's
/// answer named globex's run, intake and workflow.
#[tokio::test]
async fn idempotency_keys_are_scoped_to_the_callers_tenant() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = start(&db).await;

        // acme first, then globex with the same key.
        let key = unique("shared");
        let (_, acme) = call(
            &daemon,
            ACME_OPS,
            "/v1/events",
            Some(&key),
            Some(&event("webhook", "ticket.created", "acme", &unique("A"))),
        )
        .await;
        assert_eq!(acme["outcome"], "routed", "{backend:?}: {acme}");
        let (status, globex) = call(
            &daemon,
            GLOBEX_OPS,
            "/v1/events",
            Some(&key),
            Some(&event("webhook", "ticket.created", "globex", &unique("G"))),
        )
        .await;
        assert_eq!(
            (status, globex["outcome"].as_str()),
            (StatusCode::OK, Some("routed")),
            "{backend:?}: globex's event is its own: {globex}"
        );
        assert_eq!(globex["workflow_id"], "globex-triage");
        assert_ne!(globex["run_id"], acme["run_id"]);
        let globex_run = run_id(&globex);
        let (status, _) = call(
            &daemon,
            GLOBEX_OPS,
            &format!("/v1/runs/{globex_run}"),
            None,
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "recorded for globex");

        // globex first, then acme: acme learns nothing of globex's delivery.
        let key = unique("shared");
        let (_, globex) = call(
            &daemon,
            GLOBEX_OPS,
            "/v1/events",
            Some(&key),
            Some(&event("webhook", "ticket.created", "globex", &unique("G"))),
        )
        .await;
        let (_, acme) = call(
            &daemon,
            ACME_OPS,
            "/v1/events",
            Some(&key),
            Some(&event("webhook", "ticket.created", "acme", &unique("A"))),
        )
        .await;
        assert_eq!(acme["outcome"], "routed", "{backend:?}: {acme}");
        let said = acme.to_string();
        for globex_id in ["run_id", "intake_id"] {
            let id = globex[globex_id].as_str().expect("globex id");
            assert!(!said.contains(id), "{backend:?}: acme learns {id}: {said}");
        }
        assert!(!said.contains("globex"), "{said}");

        // Within one tenant a key still identifies the delivery.
        let (_, copy) = call(
            &daemon,
            ACME_OPS,
            "/v1/events",
            Some(&key),
            Some(&event("webhook", "ticket.created", "acme", &unique("A"))),
        )
        .await;
        assert_eq!(copy["outcome"], "duplicate", "{copy}");
        assert_eq!(copy["intake_id"], acme["intake_id"]);

        // The same on `/v1/waits/resume`: acme spends globex's next key on a resume of its own;
        // globex's approval with that key still resumes globex's wait.
        let (_, routed) = call(
            &daemon,
            GLOBEX_OPS,
            "/v1/events",
            Some(&unique("g")),
            Some(&event("webhook", "ticket.created", "globex", &unique("G"))),
        )
        .await;
        let run = run_id(&routed);
        let (wait_token, digest) = open_wait(&daemon, GLOBEX_OPS, "globex-triage", &run).await;
        let key = unique("approval");
        let (_, acme_resume) = call(
            &daemon,
            ACME_OPS,
            "/v1/waits/resume",
            Some(&key),
            Some(
                &json!({"tenant_id": "acme", "token": "swyw_nothing", "proposal_digest": digest,
                         "decision": "approve"}),
            ),
        )
        .await;
        assert_eq!(acme_resume["outcome"], "no_wait_match", "{acme_resume}");
        let (_, approval) = call(
            &daemon,
            GLOBEX_OPS,
            "/v1/waits/resume",
            Some(&key),
            Some(
                &json!({"tenant_id": "globex", "token": wait_token, "proposal_digest": digest,
                         "decision": "approve"}),
            ),
        )
        .await;
        assert_eq!(
            approval["outcome"], "resumed",
            "{backend:?}: globex's approval is its own: {approval}"
        );
        assert_eq!(approval["run_id"], json!(run));
        daemon.stop();
        db.drop_database().await;
    }
}

/// Claims `workflow`'s run `run` as the token `secret` and opens a wait on it: the resume token
/// and the proposal's digest.
async fn open_wait(daemon: &Daemon, secret: &str, workflow: &str, run: &str) -> (String, String) {
    let mut claimed = Vec::new();
    for _ in 0..200 {
        let (status, answer) = call(
            daemon,
            secret,
            "/v1/claims",
            None,
            Some(&json!({"workflows": [workflow], "max": 10})),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        claimed = answer["claims"].as_array().cloned().unwrap_or_default();
        if claimed
            .iter()
            .any(|c| c["message"]["data"]["run"]["id"] == run)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let claim = claimed
        .iter()
        .find(|c| c["message"]["data"]["run"]["id"] == run)
        .unwrap_or_else(|| panic!("run {run} was not claimed"));
    let fencing = claim["message"]["data"]["run"]["fencing_token"]
        .as_i64()
        .expect("fencing token");
    let digest = format!("sha256:{}", "ab".repeat(32));
    let (status, opened) = call(
        daemon,
        secret,
        &format!("/v1/runs/{run}/waits"),
        None,
        Some(
            &json!({"fencing_token": fencing, "wait_id": "approve", "expects": "approval",
                     "proposal": {"id": "P-1", "digest": digest}, "deadline": "1h"}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{opened}");
    let token = opened["resume_token"].as_str().expect("token").to_owned();
    (token, digest)
}

/// The resume actor: on the API a resume decides as the token that sent it, so a caller can
/// neither pass an approvers check by naming an approver nor write someone else's name into the
/// run's history; a refused digest does not reveal the one expected.
#[tokio::test]
async fn a_resume_decides_as_the_token_that_sent_it() {
    let Some(db) = TestDb::create(super::harness::Backend::Sqlite).await else {
        return;
    };
    let daemon = start(&db).await;
    let (_, routed) = call(
        &daemon,
        GLOBEX_OPS,
        "/v1/events",
        Some(&unique("g")),
        Some(&event("webhook", "ticket.created", "globex", &unique("G"))),
    )
    .await;
    let run = run_id(&routed);
    let (wait_token, digest) = open_wait(&daemon, GLOBEX_OPS, "globex-triage", &run).await;
    let resume = |actor: Option<&str>, digest: &str| {
        let mut body = json!({"tenant_id": "globex", "token": wait_token,
                              "proposal_digest": digest, "decision": "approve"});
        if let Some(actor) = actor {
            body["actor"] = json!(actor);
        }
        body
    };

    // The admin token names the approver: refused, recorded, the wait stays open.
    let (status, impersonated) = call(
        &daemon,
        super::harness::TOKEN,
        "/v1/waits/resume",
        Some(&unique("k")),
        Some(&resume(Some("globex-ops"), &digest)),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{impersonated}");
    assert_eq!(impersonated["outcome"], "unauthorized_source");
    assert!(impersonated["intake_id"].is_string(), "recorded");

    // Another digest: refused without naming the expected one.
    let other = format!("sha256:{}", "cd".repeat(32));
    let (_, stale) = call(
        &daemon,
        GLOBEX_OPS,
        "/v1/waits/resume",
        Some(&unique("k")),
        Some(&resume(None, &other)),
    )
    .await;
    assert_eq!(stale["outcome"], "reapproval_required", "{stale}");
    assert!(!stale.to_string().contains(&digest), "{stale}");

    // The approver itself, with or without naming itself.
    let (_, approved) = call(
        &daemon,
        GLOBEX_OPS,
        "/v1/waits/resume",
        Some(&unique("k")),
        Some(&resume(None, &digest)),
    )
    .await;
    assert_eq!(approved["outcome"], "resumed", "{approved}");
    let (_, waits) = call(
        &daemon,
        GLOBEX_OPS,
        &format!("/v1/runs/{run}/waits"),
        None,
        None,
    )
    .await;
    assert_eq!(waits["waits"][0]["actor"], "globex-ops", "{waits}");
    daemon.stop();
}
