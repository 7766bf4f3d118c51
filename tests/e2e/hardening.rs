//! Input the store cannot hold, and the small edges of the HTTP surface, as issue 18 found
//! them: each is answered with a specific, final refusal (never a 503 to retry forever).

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::harness::{Daemon, TOKEN, TestDb, config, event};
use super::spine::WORKED_EXAMPLE;

#[tokio::test]
async fn unstorable_fields_are_invalid_events_on_every_backend_and_stay_so_on_retry() {
    for db in TestDb::all().await {
        let daemon = Daemon::start(&db, &config(&db, WORKED_EXAMPLE), &[]).await;
        let mut long_ref = event("webhook", "ticket.created", "acme", "TCK-1");
        long_ref["raw_ref"] = json!("r".repeat(65));
        let nul_tenant = event("webhook", "ticket.created", "ac\u{0}me", "TCK-2");
        let nul_entity = event("webhook", "ticket.created", "acme", "TCK\u{0}3");
        for (key, body, needle) in [
            (
                "long-raw-ref",
                &long_ref,
                "`raw_ref` is longer than 64 bytes",
            ),
            ("nul-tenant", &nul_tenant, "`tenant_id` contains U+0000"),
            // Refused, never digested into an id a worker could not look up.
            (
                "nul-entity",
                &nul_entity,
                "`target_entity_id` contains U+0000",
            ),
        ] {
            let (status, answer) = daemon.post_event(key, body).await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{:?} {key}: {answer}",
                db.backend
            );
            assert_eq!(answer["outcome"], "invalid_event");
            assert!(
                answer["detail"]
                    .as_str()
                    .unwrap_or_default()
                    .contains(needle),
                "{key}: {answer}"
            );
            // A retry is refused the same way (same status), never a 503.
            let (again, copy) = daemon.post_event(key, body).await;
            assert_eq!(again, StatusCode::BAD_REQUEST, "{key}: {copy}");
            assert_eq!(copy["outcome"], "duplicate");
            assert_eq!(copy["first_outcome"], "invalid_event");
        }
        let runs = daemon.runs("").await;
        assert!(
            runs.is_empty(),
            "{:?}: no run for any of them: {runs:?}",
            db.backend
        );
        daemon.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn the_http_edges_answer_what_a_client_expects() {
    let Some(db) = TestDb::create(super::harness::Backend::Sqlite).await else {
        return;
    };
    let daemon = Daemon::start(&db, &config(&db, WORKED_EXAMPLE), &[]).await;
    let client = reqwest::Client::new();

    // A non-ASCII Idempotency-Key is an id like any other.
    let key = "lieferung-ä-1";
    let response = client
        .post(daemon.url("/v1/events"))
        .header("authorization", format!("bearer {TOKEN}"))
        .header(
            "idempotency-key",
            reqwest::header::HeaderValue::from_bytes(key.as_bytes()).expect("utf-8 header"),
        )
        .json(&event("webhook", "ticket.created", "acme", "TCK-9"))
        .send()
        .await
        .expect("send");
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "lower-case `bearer` is accepted"
    );
    let answer: serde_json::Value = response.json().await.expect("json");
    assert_eq!(answer["outcome"], "routed", "{answer}");
    let ledger = daemon.intake("").await;
    assert_eq!(ledger[0]["delivery_id"], key);

    // A wrong token is 401 with a challenge.
    let response = client
        .get(daemon.url("/v1/runs"))
        .bearer_auth("wrong")
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        response.headers()["www-authenticate"],
        "Bearer realm=\"switchyard\""
    );

    // A declared body over the limit is refused before a byte of it is sent.
    let mut stream = tokio::net::TcpStream::connect(daemon.addr)
        .await
        .expect("connect");
    let head = format!(
        "POST /v1/events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\n\
         idempotency-key: big\r\ncontent-type: application/json\r\ncontent-length: 50000000\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut answer = vec![0; 1024];
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut answer))
        .await
        .expect("answered without waiting for the body")
        .expect("read");
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");

    // Listings leave payloads out unless asked, and page by cursor.
    for n in 0..5 {
        daemon
            .post_event(
                &format!("page-{n}"),
                &event("webhook", "ticket.updated", "acme", "TCK-P"),
            )
            .await;
    }
    let page = daemon.get("/v1/intake?limit=2").await;
    let rows = page["intake"].as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 2);
    assert!(rows[0]["event"].get("payload").is_none(), "{}", rows[0]);
    let cursor = page["next_before"]
        .as_str()
        .expect("a next page")
        .to_owned();
    let next = daemon
        .get(&format!(
            "/v1/intake?limit=2&before={cursor}&include=payload"
        ))
        .await;
    let next_rows = next["intake"].as_array().cloned().unwrap_or_default();
    assert_eq!(next_rows.len(), 2);
    assert!(next_rows[0]["id"].as_str() < rows[1]["id"].as_str());
    assert_eq!(
        next_rows[0]["event"]["payload"]["subject"],
        "Printer on fire"
    );
    let (status, refused) = daemon
        .get_status("/v1/intake?limit=500&include=payload")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    daemon.stop();
}

#[tokio::test]
async fn keys_compare_byte_for_byte_on_every_backend() {
    for db in TestDb::all().await {
        let daemon = Daemon::start(&db, &config(&db, WORKED_EXAMPLE), &[]).await;
        // Delivery ids that differ only in case or accents are different deliveries; entities
        // that differ in case, accents or a trailing space are different entities. (A header
        // value cannot end in a space: HTTP trims it.)
        for (key, entity) in [
            ("abc", "Key-A"),
            ("ABC", "key-a"),
            ("abc-space", "Key-A "),
            ("åbc", "Kéy-A"),
        ] {
            let (status, answer) = daemon
                .post_event(key, &event("webhook", "ticket.created", "acme", entity))
                .await;
            assert_eq!(status, StatusCode::OK, "{:?} {key:?}: {answer}", db.backend);
            assert_eq!(
                answer["outcome"], "routed",
                "{:?} {key:?}: {answer}",
                db.backend
            );
        }
        let (_, copy) = daemon
            .post_event("ABC", &event("webhook", "ticket.created", "acme", "key-a"))
            .await;
        assert_eq!(copy["outcome"], "duplicate", "{copy}");
        daemon.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn a_writer_that_panics_on_a_batch_answers_503_and_goes_on() {
    for db in TestDb::all().await {
        let daemon = Daemon::start(
            &db,
            &config(&db, WORKED_EXAMPLE),
            &[("SWITCHYARD_FAILPOINT", "writer_panic:poison")],
        )
        .await;
        let (status, answer) = daemon
            .post_event("poison", &event("webhook", "ticket.created", "acme", "P1"))
            .await;
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{:?}: {answer}",
            db.backend
        );
        // The writer survived: the next deliveries are decided as usual.
        for n in 0..3 {
            let (status, answer) = daemon
                .post_event(
                    &format!("after-{n}"),
                    &event("webhook", "ticket.created", "acme", &format!("P{n}")),
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{:?}: {answer}", db.backend);
        }
        let ready = daemon.get_status("/readyz").await.1;
        let writers = ready["intake"]["writers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(!writers.is_empty(), "{ready}");
        let panics: u64 = writers
            .iter()
            .map(|w| w["panics"].as_u64().unwrap_or(0))
            .sum();
        assert_eq!(panics, 1, "{ready}");
        assert_eq!(ready["intake"]["ok"], true, "committing again: {ready}");
        assert!(
            writers.iter().any(|w| w["last_commit"].is_string()),
            "{ready}"
        );
        daemon.stop();
        db.drop_database().await;
    }
}

/// The PostgreSQL writer keeps its connection and manages the transaction on it itself (it
/// begins the next batch's with a commit when one is queued): a batch that fails after its
/// writes must leave none of them for the next batch's commit.
#[tokio::test]
async fn a_postgres_batch_that_fails_after_its_writes_leaves_none_of_them() {
    let Some(db) = TestDb::create(super::harness::Backend::Postgres).await else {
        return;
    };
    let daemon = Daemon::start(
        &db,
        &config(&db, WORKED_EXAMPLE),
        &[("SWITCHYARD_FAILPOINT", "writer_error_after_write:poison")],
    )
    .await;
    // Concurrent senders, so that batches queue behind the failing one.
    let keys: Vec<String> = (0..60)
        .map(|n| match n {
            30 => "poison".to_owned(),
            n => format!("fine-{n}"),
        })
        .collect();
    let answers = futures::future::join_all(keys.iter().map(|key| {
        let entity = format!("E-{key}");
        let daemon = &daemon;
        async move {
            let body = event("webhook", "ticket.created", "acme", &entity);
            (key, daemon.post_event(key, &body).await)
        }
    }))
    .await;
    for (key, (status, answer)) in answers {
        if key == "poison" {
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
        } else {
            assert_eq!(status, StatusCode::OK, "{key}: {answer}");
            assert_eq!(answer["outcome"], "routed", "{key}: {answer}");
        }
    }
    // Later batches, committed on the same connection, carry none of the failed batch's rows.
    for n in 0..3 {
        let key = format!("after-{n}");
        let body = event("webhook", "ticket.created", "acme", &format!("A-{n}"));
        let (status, answer) = daemon.post_event(&key, &body).await;
        assert_eq!(status, StatusCode::OK, "{key}: {answer}");
    }
    let ledger = daemon.intake("limit=500").await;
    assert_eq!(ledger.len(), 62, "59 fine deliveries and 3 after");
    assert!(
        ledger.iter().all(|row| row["delivery_id"] != "poison"),
        "the failed delivery was committed"
    );
    let runs = daemon.runs("limit=500").await;
    assert_eq!(runs.len(), 62);
    assert!(
        runs.iter().all(|run| run["target_entity_id"] != "E-poison"),
        "the failed delivery's run was committed"
    );
    // The lease the failed batch wrote was rolled back with it: the entity is free.
    let (status, answer) = daemon
        .post_event(
            "poison-entity",
            &event("webhook", "ticket.created", "acme", "E-poison"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["outcome"], "routed", "{answer}");
    daemon.stop();
    db.drop_database().await;
}

#[tokio::test]
async fn a_stalled_log_reader_never_stops_intake() {
    use std::process::{Command, Stdio};
    let Some(db) = TestDb::create(super::harness::Backend::Sqlite).await else {
        return;
    };
    // Nobody reads this daemon's stderr until the end, as with a stuck log shipper.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let config_path = db.dir.path().join("stalled-log.toml");
    let text = config(&db, WORKED_EXAMPLE).replace("127.0.0.1:0", &format!("127.0.0.1:{port}"));
    std::fs::write(&config_path, text).expect("config");
    let mut child = Command::new(super::harness::binary())
        .args(["serve", "--config"])
        .arg(&config_path)
        .env("SWITCHYARD_API_TOKEN", TOKEN)
        // Every decision logged (routine ones are at debug): the flood of lines that fills
        // the stalled pipe.
        .env("RUST_LOG", "info,switchyard::intake=debug")
        // A small queue, so the pipe and the queue fill within a few thousand deliveries.
        .env("SWITCHYARD_LOG_QUEUE_LINES", "1000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while client.get(format!("{base}/healthz")).send().await.is_err() {
        assert!(std::time::Instant::now() < deadline, "daemon did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Far more log lines (one per delivery) than the pipe and the queue hold (64 KiB + 1,000).
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let load_until = std::time::Instant::now() + Duration::from_secs(15);
    let mut tasks = Vec::new();
    for worker in 0..32 {
        let (client, base, answered) = (client.clone(), base.clone(), answered.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0..250 {
                if std::time::Instant::now() > load_until {
                    break;
                }
                let response = client
                    .post(format!("{base}/v1/events"))
                    .bearer_auth(TOKEN)
                    .header("Idempotency-Key", format!("log-{worker}-{n}"))
                    .json(&event("chat", "message", "acme", &format!("L{worker}-{n}")))
                    .timeout(Duration::from_secs(10))
                    .send()
                    .await
                    .expect("answered while stderr is stalled");
                assert!(response.status().is_success(), "{}", response.status());
                answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }));
    }
    for task in tasks {
        task.await.expect("load task");
    }
    let health = client
        .get(format!("{base}/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .expect("health answers after the flood");
    assert!(health.status().is_success());
    eprintln!(
        "stalled-stderr test: {} deliveries answered",
        answered.load(std::sync::atomic::Ordering::Relaxed)
    );
    // Once the reader is back, the daemon says how many lines it dropped.
    let stderr = child.stderr.take().expect("stderr");
    let (lines, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("log lines were dropped") {
                let _ = lines.send(line);
            }
        }
    });
    let report = seen.recv_timeout(Duration::from_secs(10));
    let _ = child.kill();
    let _ = child.wait();
    let report = report.expect("a line saying how many log lines were dropped");
    assert!(report.contains("dropped="), "{report}");
}
