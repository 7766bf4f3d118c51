//! When the database is unreachable the sender is told to retry (503 + Retry-After) and nothing
//! is recorded as accepted; once it is back, the retried delivery is new work, not a duplicate.

use std::time::Duration;

use reqwest::StatusCode;
use sea_orm::ConnectionTrait;

use super::harness::{Backend, Daemon, TOKEN, TestDb, config, event};
use super::spine::WORKED_EXAMPLE;

#[tokio::test]
async fn an_unreachable_database_answers_503_and_records_nothing() {
    let Some(db) = TestDb::create(Backend::Postgres).await else {
        return;
    };
    let name = db.name().expect("postgres database").to_owned();
    let daemon = Daemon::start(&db, &config(&db, WORKED_EXAMPLE), &[]).await;
    let (_, first) = daemon
        .post_event("before", &event("webhook", "ticket.created", "acme", "A"))
        .await;
    assert_eq!(first["outcome"], "routed");

    // Cut the daemon off: no new connections, existing ones terminated.
    let admin = db.admin().await;
    admin
        .execute_unprepared(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false"))
        .await
        .expect("block connections");
    admin
        .execute_unprepared(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
        ))
        .await
        .expect("terminate");

    let during = event("webhook", "ticket.created", "acme", "B");
    let response = daemon
        .client()
        .post(daemon.url("/v1/events"))
        .bearer_auth(TOKEN)
        .header("Idempotency-Key", "during")
        .json(&during)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("an answer, not a hang");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    let body: serde_json::Value = response.json().await.expect("json");
    assert_eq!(body["error"], "store_unavailable");
    assert!(
        !body.to_string().contains("ALLOW_CONNECTIONS"),
        "no internals: {body}"
    );

    let ready = daemon
        .client()
        .get(daemon.url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);

    admin
        .execute_unprepared(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"))
        .await
        .expect("unblock");
    // The sender retries the same delivery: it was never accepted, so it routes now.
    let mut retried = None;
    for _ in 0..50 {
        let (status, answer) = daemon.post_event("during", &during).await;
        if status == StatusCode::OK {
            retried = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let retried = retried.expect("the daemon recovers once the database is back");
    assert_eq!(retried["outcome"], "routed", "{retried}");
    assert_eq!(daemon.intake("").await.len(), 2);
    daemon.stop();
    db.drop_database().await;
}
