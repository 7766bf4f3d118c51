//! Scoped tokens on every `/v1` endpoint: a table of (token, request, expected status), on
//! every backend. A missing scope is 403 naming it, an unknown token 401, and a tenant-scoped
//! token asking for another tenant's row gets 404 (its existence is not revealed). Tokens
//! reload on SIGHUP.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::harness::{Backend, Daemon, TOKEN, TestDb, config, event, read, run_id, unique};

pub const TOKENS: &str = r#"
[[token]]
name = "reader"
secret_env = "SY_READER"
scopes = ["read"]

[[token]]
name = "sender"
secret_env = "SY_SENDER"
scopes = ["events:write"]

[[token]]
name = "auditor"
secret_env = "SY_AUDITOR"
scopes = ["read", "raw:read"]

[[token]]
name = "worker"
secret_env = "SY_WORKER"
scopes = ["runs:write"]

[[token]]
name = "acme-ops"
secret_env = "SY_ACME"
scopes = ["read", "raw:read", "runs:write", "events:write"]
tenants = ["acme"]

[[token]]
name = "scraper"
secret_env = "SY_SCRAPER"
scopes = ["metrics"]

[[token]]
name = "root"
secret_env = "SY_ROOT"
scopes = ["admin"]
"#;

pub const WORKFLOWS: &str = r#"
[[workflow]]
id = "triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 100 } ]

[[workflow]]
id = "globex-triage"
tenant = "globex"
status = "live"
run_as = "globex-agent"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 10 } ]
"#;

pub const TOKEN_ENV: [(&str, &str); 7] = [
    ("SY_SCRAPER", "scraper-token-secret"),
    ("SY_READER", "reader-token-secret"),
    ("SY_SENDER", "sender-token-secret"),
    ("SY_AUDITOR", "auditor-token-secret"),
    ("SY_WORKER", "worker-token-secret"),
    ("SY_ACME", "acme-token-secret"),
    ("SY_ROOT", "root-token-secret"),
];

/// A request with `token` (`None`: no Authorization header).
pub async fn call(
    daemon: &Daemon,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (StatusCode, Value) {
    let mut request = daemon
        .client()
        .request(method, daemon.url(path))
        .header("Idempotency-Key", unique("key"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    read(request.send().await.expect("request")).await
}

/// (token, method, path, body, expected status, missing scope named in the answer)
type Case<'a> = (
    Option<&'a str>,
    Method,
    String,
    Option<&'a Value>,
    u16,
    Option<&'a str>,
);

#[tokio::test]
async fn every_endpoint_enforces_its_scope_and_tenant_limit() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let text = config(&db, &format!("{TOKENS}\n{WORKFLOWS}"));
        let daemon = Daemon::start(&db, &text, &TOKEN_ENV).await;

        let acme_entity = unique("A");
        let globex_entity = unique("G");
        let (_, acme) = daemon
            .post_event(
                &unique("d"),
                &event("webhook", "ticket.created", "acme", &acme_entity),
            )
            .await;
        let (_, globex) = daemon
            .post_event(
                &unique("d"),
                &event("webhook", "ticket.created", "globex", &globex_entity),
            )
            .await;
        let (acme_run, globex_run) = (run_id(&acme), run_id(&globex));
        let acme_raw = acme["intake_id"].as_str().expect("intake id").to_owned();
        let globex_raw = globex["intake_id"].as_str().expect("intake id").to_owned();
        // A claim of a globex run, whose token an acme worker must not be able to use.
        let claims = daemon.claim(&["globex-triage"], 1).await;
        let globex_claim = claims[0]["token"].as_str().expect("claim token").to_owned();
        let globex_fence = daemon.fencing_token(&globex_run).await;

        let acme_event = event("webhook", "ticket.created", "acme", &unique("A"));
        let globex_event = event("webhook", "ticket.created", "globex", &unique("G"));
        let heartbeat = json!({"fencing_token": globex_fence});
        let claim_acme = json!({"workflows": ["triage"], "max": 1});
        let claim_globex = json!({"workflows": ["globex-triage"], "max": 1});
        let finish = json!({"status": "completed", "fencing_token": globex_fence});
        let open_wait = json!({"fencing_token": globex_fence, "wait_id": "w", "expects": "approval",
            "proposal": {"id": "P", "digest": format!("sha256:{}", "0".repeat(64))}, "deadline": "1h"});
        let resume = json!({"tenant_id": "globex", "token": "t", "proposal_digest": "d",
            "decision": "approve", "actor": "a"});

        use Method as M;
        let cases: Vec<Case<'_>> = vec![
            // Unknown or missing tokens: 401 on every guarded endpoint.
            (None, M::GET, "/v1/intake".into(), None, 401, None),
            (Some("nope"), M::GET, "/v1/intake".into(), None, 401, None),
            (
                Some("nope"),
                M::POST,
                "/v1/events".into(),
                Some(&acme_event),
                401,
                None,
            ),
            (None, M::GET, "/metrics".into(), None, 401, None),
            // events:write
            (
                Some("sender-token-secret"),
                M::POST,
                "/v1/events".into(),
                Some(&acme_event),
                200,
                None,
            ),
            (
                Some("reader-token-secret"),
                M::POST,
                "/v1/events".into(),
                Some(&acme_event),
                403,
                Some("events:write"),
            ),
            (
                Some("acme-token-secret"),
                M::POST,
                "/v1/events".into(),
                Some(&globex_event),
                403,
                None,
            ),
            (
                Some("root-token-secret"),
                M::POST,
                "/v1/events".into(),
                Some(&globex_event),
                200,
                None,
            ),
            // read
            (
                Some("reader-token-secret"),
                M::GET,
                "/v1/intake".into(),
                None,
                200,
                None,
            ),
            (
                Some("sender-token-secret"),
                M::GET,
                "/v1/intake".into(),
                None,
                403,
                Some("read"),
            ),
            (
                Some("reader-token-secret"),
                M::GET,
                "/v1/runs".into(),
                None,
                200,
                None,
            ),
            (
                Some("worker-token-secret"),
                M::GET,
                "/v1/runs".into(),
                None,
                403,
                Some("read"),
            ),
            (
                Some("reader-token-secret"),
                M::GET,
                format!("/v1/runs/{globex_run}"),
                None,
                200,
                None,
            ),
            (
                Some("sender-token-secret"),
                M::GET,
                format!("/v1/runs/{globex_run}"),
                None,
                403,
                Some("read"),
            ),
            (
                Some("acme-token-secret"),
                M::GET,
                format!("/v1/runs/{globex_run}"),
                None,
                404,
                None,
            ),
            (
                Some("acme-token-secret"),
                M::GET,
                format!("/v1/runs/{acme_run}"),
                None,
                200,
                None,
            ),
            (
                Some("reader-token-secret"),
                M::GET,
                "/v1/locks".into(),
                None,
                200,
                None,
            ),
            (
                Some("sender-token-secret"),
                M::GET,
                "/v1/locks".into(),
                None,
                403,
                Some("read"),
            ),
            (
                Some("reader-token-secret"),
                M::GET,
                "/v1/workflows".into(),
                None,
                200,
                None,
            ),
            (
                Some("worker-token-secret"),
                M::GET,
                "/v1/workflows".into(),
                None,
                403,
                Some("read"),
            ),
            (
                Some("reader-token-secret"),
                M::GET,
                "/v1/sources".into(),
                None,
                200,
                None,
            ),
            (
                Some("sender-token-secret"),
                M::GET,
                "/v1/sources".into(),
                None,
                403,
                Some("read"),
            ),
            (
                Some("reader-token-secret"),
                M::GET,
                "/metrics".into(),
                None,
                200,
                None,
            ),
            (
                Some("sender-token-secret"),
                M::GET,
                "/metrics".into(),
                None,
                403,
                Some("metrics"),
            ),
            // metrics: /metrics and nothing else
            (
                Some("scraper-token-secret"),
                M::GET,
                "/metrics".into(),
                None,
                200,
                None,
            ),
            (
                Some("scraper-token-secret"),
                M::GET,
                "/v1/intake".into(),
                None,
                403,
                Some("read"),
            ),
            (
                Some("scraper-token-secret"),
                M::GET,
                "/v1/runs".into(),
                None,
                403,
                Some("read"),
            ),
            (
                Some("acme-token-secret"),
                M::GET,
                "/metrics".into(),
                None,
                403,
                None,
            ),
            // raw:read
            (
                Some("auditor-token-secret"),
                M::GET,
                format!("/v1/raw/{globex_raw}"),
                None,
                200,
                None,
            ),
            (
                Some("reader-token-secret"),
                M::GET,
                format!("/v1/raw/{globex_raw}"),
                None,
                403,
                Some("raw:read"),
            ),
            (
                Some("acme-token-secret"),
                M::GET,
                format!("/v1/raw/{globex_raw}"),
                None,
                404,
                None,
            ),
            (
                Some("acme-token-secret"),
                M::GET,
                format!("/v1/raw/{acme_raw}"),
                None,
                200,
                None,
            ),
            // runs:write
            (
                Some("reader-token-secret"),
                M::POST,
                format!("/v1/runs/{globex_run}/heartbeat"),
                Some(&heartbeat),
                403,
                Some("runs:write"),
            ),
            (
                Some("acme-token-secret"),
                M::POST,
                format!("/v1/runs/{globex_run}/heartbeat"),
                Some(&heartbeat),
                404,
                None,
            ),
            (
                Some("worker-token-secret"),
                M::POST,
                format!("/v1/runs/{globex_run}/heartbeat"),
                Some(&heartbeat),
                200,
                None,
            ),
            (
                Some("reader-token-secret"),
                M::POST,
                format!("/v1/runs/{globex_run}/redispatch"),
                None,
                403,
                Some("runs:write"),
            ),
            (
                Some("acme-token-secret"),
                M::POST,
                format!("/v1/runs/{globex_run}/redispatch"),
                None,
                404,
                None,
            ),
            // Waits: opening one is runs:write, limited by tenant; resuming is events:write.
            (
                Some("reader-token-secret"),
                M::POST,
                format!("/v1/runs/{globex_run}/waits"),
                Some(&open_wait),
                403,
                Some("runs:write"),
            ),
            (
                Some("acme-token-secret"),
                M::POST,
                format!("/v1/runs/{globex_run}/waits"),
                Some(&open_wait),
                404,
                None,
            ),
            (
                Some("worker-token-secret"),
                M::POST,
                "/v1/waits/resume".into(),
                Some(&resume),
                403,
                Some("events:write"),
            ),
            (
                Some("acme-token-secret"),
                M::GET,
                format!("/v1/runs/{globex_run}/waits"),
                None,
                404,
                None,
            ),
            // Not dead-lettered: the scope and tenant pass, the run's state refuses.
            (
                Some("worker-token-secret"),
                M::POST,
                format!("/v1/runs/{globex_run}/redispatch"),
                None,
                409,
                None,
            ),
            (
                Some("reader-token-secret"),
                M::POST,
                "/v1/claims".into(),
                Some(&claim_acme),
                403,
                Some("runs:write"),
            ),
            (
                Some("reader-token-secret"),
                M::POST,
                format!("/v1/claims/{globex_claim}/extend"),
                None,
                403,
                Some("runs:write"),
            ),
            (
                Some("acme-token-secret"),
                M::POST,
                format!("/v1/claims/{globex_claim}/extend"),
                None,
                409,
                None,
            ),
            (
                Some("worker-token-secret"),
                M::POST,
                format!("/v1/claims/{globex_claim}/extend"),
                None,
                200,
                None,
            ),
            (
                Some("reader-token-secret"),
                M::POST,
                format!("/v1/claims/{globex_claim}/release"),
                None,
                403,
                Some("runs:write"),
            ),
            (
                Some("acme-token-secret"),
                M::POST,
                format!("/v1/claims/{globex_claim}/release"),
                None,
                409,
                None,
            ),
            (
                Some("reader-token-secret"),
                M::POST,
                format!("/v1/runs/{globex_run}/finish"),
                Some(&finish),
                403,
                Some("runs:write"),
            ),
            (
                Some("acme-token-secret"),
                M::POST,
                format!("/v1/runs/{globex_run}/finish"),
                Some(&finish),
                404,
                None,
            ),
            // revisions are read
            (
                Some("reader-token-secret"),
                M::GET,
                "/v1/revisions".into(),
                None,
                200,
                None,
            ),
            (
                Some("sender-token-secret"),
                M::GET,
                "/v1/revisions".into(),
                None,
                403,
                Some("read"),
            ),
        ];
        for (token, method, path, body, expected, scope) in cases {
            let (status, answer) = call(&daemon, method.clone(), &path, token, body).await;
            assert_eq!(
                status.as_u16(),
                expected,
                "{backend:?}: {method} {path} with {token:?}: {answer}"
            );
            if let Some(scope) = scope {
                assert_eq!(
                    answer["error"], "missing_scope",
                    "{backend:?} {path}: {answer}"
                );
                assert!(
                    answer["detail"]
                        .as_str()
                        .unwrap_or_default()
                        .contains(&format!("`{scope}`")),
                    "{backend:?} {path}: the 403 names `{scope}`: {answer}"
                );
            }
        }

        // Tenant limits on listings: acme's token sees acme rows only, and asking for globex
        // gives an empty page rather than a refusal.
        let get = |path: &'static str| call(&daemon, M::GET, path, Some("acme-token-secret"), None);
        let (_, intake) = get("/v1/intake").await;
        let tenants: Vec<&str> = intake["intake"]
            .as_array()
            .expect("intake")
            .iter()
            .map(|row| row["event"]["tenant_id"].as_str().unwrap_or("?"))
            .collect();
        assert!(
            !tenants.is_empty() && tenants.iter().all(|t| *t == "acme"),
            "{backend:?}: {tenants:?}"
        );
        let (_, intake) = get("/v1/intake?tenant=globex").await;
        assert_eq!(intake["intake"], json!([]), "{backend:?}");
        let (_, runs) = get("/v1/runs").await;
        assert!(
            runs["runs"]
                .as_array()
                .expect("runs")
                .iter()
                .all(|r| r["tenant_id"] == "acme"),
            "{backend:?}: {runs}"
        );
        assert!(
            !runs["runs"].as_array().expect("runs").is_empty(),
            "{backend:?}"
        );
        let (_, locks) = get("/v1/locks").await;
        let locks = locks["locks"].as_array().expect("locks").clone();
        assert!(
            !locks.is_empty() && locks.iter().all(|l| l["tenant_id"] == "acme"),
            "{backend:?}: {locks:?}"
        );
        let (_, workflows) = get("/v1/workflows").await;
        assert_eq!(
            workflows["workflows"].as_array().map(Vec::len),
            Some(1),
            "{backend:?}: {workflows}"
        );
        assert_eq!(workflows["workflows"][0]["id"], "triage");
        // An acme worker claiming globex's workflow is refused; its own gives its run.
        let (status, claimed) = call(
            &daemon,
            M::POST,
            "/v1/claims",
            Some("acme-token-secret"),
            Some(&claim_globex),
        )
        .await;
        // Another tenant's workflow is, to this token, no workflow at all.
        assert_eq!(status, StatusCode::BAD_REQUEST, "{backend:?}: {claimed}");
        assert_eq!(
            claimed["detail"], "`workflows` names `globex-triage`, which is no workflow in force",
            "{backend:?}"
        );
        let (_, claimed) = call(
            &daemon,
            M::POST,
            "/v1/claims",
            Some("acme-token-secret"),
            Some(&claim_acme),
        )
        .await;
        let claimed_runs = claimed["claims"].as_array().expect("claims");
        assert_eq!(claimed_runs.len(), 1, "{backend:?}: {claimed}");
        assert_eq!(
            claimed_runs[0]["message"]["data"]["run"]["tenant_id"], "acme",
            "{backend:?}: {claimed}"
        );

        daemon.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn tokens_are_added_and_revoked_by_a_reload() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let original = config(&db, WORKFLOWS);
    let env = [("SY_LATE", "late-token-secret")];
    let daemon = Daemon::start(&db, &original, &env).await;
    async fn late(daemon: &Daemon) -> StatusCode {
        call(
            daemon,
            Method::GET,
            "/v1/runs",
            Some("late-token-secret"),
            None,
        )
        .await
        .0
    }
    assert_eq!(late(&daemon).await, StatusCode::UNAUTHORIZED);

    let with_token = format!(
        "{original}\n[[token]]\nname = \"late\"\nsecret_env = \"SY_LATE\"\nscopes = [\"read\"]\n"
    );
    daemon.reload(&with_token);
    let mut status = StatusCode::UNAUTHORIZED;
    for _ in 0..250 {
        status = late(&daemon).await;
        if status == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        status,
        StatusCode::OK,
        "the reloaded token works:\n{}",
        daemon.logs()
    );

    // A token with an unknown scope is refused as a whole file: the old revision, and the
    // token, stay in force.
    daemon.reload(&with_token.replace("[\"read\"]", "[\"read\", \"rule:all\"]"));
    assert!(
        daemon
            .wait_for_log("rule:all", Duration::from_secs(5))
            .await,
        "the refused reload names the unknown scope:\n{}",
        daemon.logs()
    );
    assert_eq!(late(&daemon).await, StatusCode::OK);

    daemon.reload(&original);
    for _ in 0..250 {
        status = late(&daemon).await;
        if status == StatusCode::UNAUTHORIZED {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "the removed token is revoked"
    );
    // The API token still does everything.
    let (status, _) = call(&daemon, Method::GET, "/v1/runs", Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::OK);
}
