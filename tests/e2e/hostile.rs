//! Hostile and broken clients (issue 18, items 5-7): slow headers, idle and half-open
//! connections, slow bodies, unsigned bodies that never end, and a half-sent request at
//! shutdown. None of them may hold a connection, memory or the shutdown past its bound.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::harness::{Backend, Daemon, TOKEN, TestDb, config, event};
use super::spine::WORKED_EXAMPLE;

const TIGHT: &str = r#"
header_read_timeout = "1s"
body_read_timeout = "1s"
max_connections = 16
body_limit = 65536
unverified_body_budget = 131072
"#;

/// Config with the tight server limits above.
fn tight(db: &TestDb, extra: &str) -> String {
    config(db, WORKED_EXAMPLE).replace(
        "api_token_env = \"SWITCHYARD_API_TOKEN\"\n",
        &format!("api_token_env = \"SWITCHYARD_API_TOKEN\"\n{TIGHT}{extra}"),
    )
}

/// Waits until the server closes `stream` (EOF or reset), for at most `bound`; returns what
/// it sent before closing.
async fn closed_within(stream: &mut TcpStream, bound: Duration) -> Option<String> {
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    let outcome = tokio::time::timeout(bound, async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    outcome
        .ok()
        .map(|()| String::from_utf8_lossy(&seen).into_owned())
}

#[tokio::test]
async fn slow_and_idle_connections_are_closed() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let daemon = Daemon::start(&db, &tight(&db, ""), &[]).await;

    // Headers that never finish: closed after header_read_timeout.
    let mut slow = TcpStream::connect(daemon.addr).await.expect("connect");
    slow.write_all(b"POST /v1/events HTTP/1.1\r\nhost: x\r\n")
        .await
        .expect("write");
    assert!(
        closed_within(&mut slow, Duration::from_secs(10))
            .await
            .is_some(),
        "a half-sent header is not held open"
    );

    // An idle keep-alive connection: closed after its request, once idle.
    let mut idle = TcpStream::connect(daemon.addr).await.expect("connect");
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("write");
    let answered = closed_within(&mut idle, Duration::from_secs(10))
        .await
        .expect("an idle keep-alive connection is closed");
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
    daemon.stop();
}

#[tokio::test]
async fn connections_past_the_cap_are_closed_at_once() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    // A header timeout far longer than the waits below: a connection closed within them was
    // closed by the cap, not by the timeout (however slow this machine is today).
    let text = tight(&db, "").replace(
        "header_read_timeout = \"1s\"",
        "header_read_timeout = \"60s\"",
    );
    let daemon = Daemon::start(&db, &text, &[]).await;

    // Past max_connections, new connections are closed at once; the held ones still work.
    let mut held = Vec::new();
    for _ in 0..16 {
        held.push(TcpStream::connect(daemon.addr).await.expect("connect"));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut excess = TcpStream::connect(daemon.addr).await.expect("connect");
    assert!(
        closed_within(&mut excess, Duration::from_secs(20))
            .await
            .is_some(),
        "a connection past the cap is closed before the header timeout"
    );
    assert!(
        daemon
            .wait_for_log("connection cap reached", Duration::from_secs(10))
            .await,
        "the cap is logged"
    );
    drop(held);
    // The slots come back when connections end: the daemon serves again. Until it has seen
    // the held connections close, a new one may still be closed at the cap (a send error).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let sent = daemon
            .client()
            .post(daemon.url("/v1/events"))
            .bearer_auth(TOKEN)
            .header("Idempotency-Key", "after-cap")
            .json(&event("webhook", "ticket.created", "acme", "C1"))
            .send()
            .await;
        let refused = match sent {
            Ok(response) if response.status() == StatusCode::OK => {
                let answer: serde_json::Value = response.json().await.expect("answer JSON");
                assert_eq!(answer["outcome"], "routed");
                break;
            }
            Ok(response) => response.status().to_string(),
            Err(error) => error.to_string(),
        };
        assert!(
            Instant::now() < deadline,
            "still refused after the cap: {refused}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    daemon.stop();
}

#[tokio::test]
async fn slow_and_unverified_bodies_are_bounded() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    // Budget is reserved only for a source that exists (issue 32): an unknown name is 404
    // before its body is read, so the unverified bodies below go to a configured source.
    let text = format!(
        "{}\n[[source]]\nkind = \"webhook\"\nname = \"zendesk\"\ntenant = \"acme\"\n\
         signing_secret_env = \"HOSTILE_ZENDESK_SECRET\"\n",
        tight(&db, "")
    );
    let daemon = Daemon::start(&db, &text, &[("HOSTILE_ZENDESK_SECRET", "hostile-secret")]).await;

    // A body that stops arriving: answered (or closed) after body_read_timeout.
    let mut slow = TcpStream::connect(daemon.addr).await.expect("connect");
    slow.write_all(
        format!(
            "POST /v1/events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\n\
             idempotency-key: slow\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"chan"
        )
        .as_bytes(),
    )
    .await
    .expect("write");
    let answer = closed_within(&mut slow, Duration::from_secs(10))
        .await
        .expect("a stalled body does not hold the connection");
    assert!(
        answer.is_empty()
            || answer.starts_with("HTTP/1.1 408")
            || answer.starts_with("HTTP/1.1 400"),
        "{answer}"
    );

    // Unsigned bodies that never end: two fill the 128 KiB budget, the third is 503 at once.
    let start = |n: usize| {
        let addr = daemon.addr;
        async move {
            let mut stream = TcpStream::connect(addr).await.expect("connect");
            stream
                .write_all(
                    format!(
                        "POST /v1/ingest/webhook/zendesk HTTP/1.1\r\nhost: x\r\n\
                         content-type: application/json\r\ncontent-length: 65536\r\n\r\n{}",
                        "x".repeat(n)
                    )
                    .as_bytes(),
                )
                .await
                .expect("write");
            stream
        }
    };
    let _first = start(1000).await;
    let _second = start(1000).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut third = start(10).await;
    let answer = closed_within(&mut third, Duration::from_millis(900))
        .await
        .unwrap_or_default();
    assert!(
        answer.starts_with("HTTP/1.1 503"),
        "budget spent: {answer:?}"
    );
    assert!(
        answer.to_ascii_lowercase().contains("retry-after"),
        "{answer}"
    );
    // Once they time out, the budget is back.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let response = daemon
        .client()
        .post(daemon.url("/v1/ingest/webhook/zendesk"))
        .body("{}")
        .send()
        .await
        .expect("send");
    assert_ne!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    daemon.stop();
}

#[tokio::test]
async fn a_half_sent_request_does_not_hold_the_shutdown() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let text = tight(&db, "shutdown_timeout = \"1s\"\n")
        .replace("body_read_timeout = \"1s\"", "body_read_timeout = \"60s\"");
    let daemon = Daemon::start(&db, &text, &[]).await;
    let mut half = TcpStream::connect(daemon.addr).await.expect("connect");
    half.write_all(
        format!(
            "POST /v1/events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\n\
             idempotency-key: half\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{"
        )
        .as_bytes(),
    )
    .await
    .expect("write");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (stopped, stop_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        daemon.stop();
        let _ = stopped.send(());
    });
    stop_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("SIGTERM finishes within shutdown_timeout despite the half-sent request");
}
