//! When the database is unreachable the sender is told to retry (503 + Retry-After) and nothing
//! is recorded as accepted; once it is back, the retried delivery is new work, not a duplicate.

use std::time::Duration;

use reqwest::StatusCode;
use sea_orm::ConnectionTrait;

use super::harness::{Backend, Daemon, PRINCIPALS, TOKEN, TestDb, config, event};
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

/// A TCP proxy to `upstream` that can stall: while stalled it forwards nothing either way but
/// keeps every connection open, as a hung database server does.
struct StallingProxy {
    addr: std::net::SocketAddr,
    stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl StallingProxy {
    async fn start(upstream: &str) -> Self {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let stalled = Arc::new(AtomicBool::new(false));
        let flag = stalled.clone();
        let upstream = upstream.to_owned();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                    continue;
                };
                let flag = flag.clone();
                tokio::spawn(async move {
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    let pump = |mut from: tokio::net::tcp::OwnedReadHalf,
                                mut to: tokio::net::tcp::OwnedWriteHalf,
                                flag: Arc<AtomicBool>| async move {
                        use tokio::io::{AsyncReadExt, AsyncWriteExt};
                        let mut buffer = vec![0; 16 * 1024];
                        while let Ok(n) = from.read(&mut buffer).await {
                            if n == 0 {
                                break;
                            }
                            while flag.load(Ordering::SeqCst) {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                            if to.write_all(&buffer[..n]).await.is_err() {
                                break;
                            }
                        }
                    };
                    tokio::join!(
                        pump(client_read, server_write, flag.clone()),
                        pump(server_read, client_write, flag)
                    );
                });
            }
        });
        Self { addr, stalled }
    }

    fn stall(&self, stalled: bool) {
        self.stalled
            .store(stalled, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Posts a ticket event with `key` every 100 ms while it is answered 503 (the store is
/// unavailable), for up to 10 s; returns the answer that decided it.
async fn decided_on_retry(daemon: &Daemon, key: &str, ticket: &str) -> serde_json::Value {
    for _ in 0..100 {
        let (status, answer) = daemon
            .post_event(key, &event("webhook", "ticket.created", "acme", ticket))
            .await;
        if status == StatusCode::OK {
            return answer;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("`{key}` was still refused after 10 s");
}

#[tokio::test]
async fn a_hanging_database_is_answered_503_within_the_intake_timeout() {
    let Some(db) = TestDb::create(Backend::Postgres).await else {
        return;
    };
    let name = db.name().expect("postgres database").to_owned();
    let proxy = StallingProxy::start("127.0.0.1:5432").await;
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\napi_token_env = \"SWITCHYARD_API_TOKEN\"\n\
         intake_timeout = \"500ms\"\n\n[database]\nurl = \"postgres://postgres@{}/{name}\"\n{PRINCIPALS}{WORKED_EXAMPLE}",
        proxy.addr
    );
    // Routine decisions are logged at debug: on, to see the stalled one logged.
    let daemon = Daemon::start(&db, &text, &[("RUST_LOG", "info,switchyard::intake=debug")]).await;
    // Routed before the hang. Under CI's parallel load a new daemon's first batch on a new
    // database can outlast the 500 ms itself (answered 503, which is this test's point); the
    // sender's retry, same key, is then decided.
    let first = decided_on_retry(&daemon, "before-hang", "H1").await;
    let outcome = first["first_outcome"]
        .as_str()
        .or(first["outcome"].as_str());
    assert_eq!(outcome, Some("routed"), "{first}");

    proxy.stall(true);
    // The sender is answered, not held for as long as the database hangs (Slack gives up at 3 s).
    let response = daemon
        .client()
        .post(daemon.url("/v1/events"))
        .bearer_auth(TOKEN)
        .header("Idempotency-Key", "during-hang")
        .json(&event("webhook", "ticket.created", "acme", "H2"))
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .expect("an answer while the database hangs");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));

    proxy.stall(false);
    // Once the database answers again, the retry is decided: routed if the stalled commit
    // never happened, duplicate (of routed) if it landed after the answer.
    let retried = decided_on_retry(&daemon, "during-hang", "H2").await;
    let outcome = retried["first_outcome"]
        .as_str()
        .or(retried["outcome"].as_str());
    assert_eq!(outcome, Some("routed"), "{retried}");
    if retried["outcome"] == "duplicate" {
        // The stalled commit landed after its sender was answered 503: the writer logged the
        // decision that sender could no longer log.
        let decided = |line: &&str| {
            line.contains("intake decided")
                && line.contains("\"delivery_id\":\"during-hang\"")
                && line.contains("\"outcome\":\"routed\"")
        };
        assert!(
            daemon.logs().lines().any(|line| decided(&line)),
            "the stalled decision is logged: {}",
            daemon.logs()
        );
    }
    let runs = daemon.runs("tenant=acme").await;
    assert_eq!(runs.len(), 2, "one run per ticket, none doubled: {runs:?}");
    daemon.stop();
    db.drop_database().await;
}
