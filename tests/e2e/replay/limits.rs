//! Who may replay: `admin` to start, `read` to read, and a tenant-limited token only its
//! tenants' replays.

use super::*;

/// Starting, cancelling and rerunning a replay need `admin`; reading one needs `read`; a
/// tenant-limited token starts replays of its tenants only and never sees a replay that covered
/// other tenants (404 by id, left out of the listing).
#[tokio::test]
async fn replays_need_admin_to_start_and_respect_tenant_limits() {
    use super::super::access::{TOKEN_ENV, TOKENS, WORKFLOWS, call};
    use reqwest::Method;

    let Some(db) = TestDb::create(super::super::harness::Backend::Sqlite).await else {
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
