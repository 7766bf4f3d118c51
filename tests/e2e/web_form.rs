//! Web forms over real HTTP (the browser's own run is `browser.rs`'s form test): urlencoded and
//! multipart posts, the 303 a browser follows and the JSON `fetch` reads, and every refusal
//! recorded: a foreign or missing `Origin` (403), a filled honeypot (answered as if accepted),
//! a client past its rate (429), a file, an oversized post.

use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, LOCATION, ORIGIN};
use serde_json::Value;

use super::harness::{Backend, Daemon, TestDb, config};

pub const ORIGIN_OK: &str = "https://www.example.com";

pub fn form_source(origin: &str, rate: &str) -> String {
    format!(
        r#"
[[source]]
kind = "web_form"
name = "contact"
tenant = "acme"
allowed_origins = ["{origin}"]
honeypot = "website"
target_entity_id = "{{/email}}"
payload = {{ email = "/email", message = "/message" }}
redirect = "https://www.example.com/thanks"
rate = {rate}
max_body = 2048

[[workflow]]
id = "contact-request"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ {{ channel = "web_form", event_type = "form.submitted", priority = 100 }} ]
"#
    )
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

async fn post(
    daemon: &Daemon,
    origin: Option<&str>,
    content_type: &str,
    body: impl Into<reqwest::Body>,
    json: bool,
) -> reqwest::Response {
    let mut request = no_redirects()
        .post(daemon.url("/v1/ingest/web_form/contact"))
        .header(CONTENT_TYPE, content_type)
        .body(body);
    if let Some(origin) = origin {
        request = request.header(ORIGIN, origin);
    }
    if json {
        request = request.header(ACCEPT, "application/json");
    }
    request.send().await.expect("POST form")
}

const URLENCODED: &str = "application/x-www-form-urlencoded";

#[tokio::test]
async fn a_form_post_is_taken_deduplicated_and_every_refusal_recorded() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let text = form_source(ORIGIN_OK, r#"{ limit = 60, per = "1m", burst = 8 }"#);
    let daemon = Daemon::start(&db, &config(&db, &text), &[]).await;

    // A browser's post: 303 to the thank-you page; the ledger has the event.
    let body = "email=ann%40example.com&message=Hello+there&website=";
    let answer = post(&daemon, Some(ORIGIN_OK), URLENCODED, body, false).await;
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);
    assert_eq!(answer.headers()[LOCATION], "https://www.example.com/thanks");
    let rows = daemon.intake("source=contact").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["outcome"], "routed");
    assert_eq!(rows[0]["workflow_id"], "contact-request");
    assert_eq!(rows[0]["event"]["channel"], "web_form");
    assert_eq!(rows[0]["event"]["tenant_id"], "acme");
    assert_eq!(rows[0]["event"]["target_entity_id"], "ann@example.com");
    assert_eq!(rows[0]["event"]["payload"]["message"], "Hello there");
    let raw_ref = rows[0]["event"]["raw_ref"].as_str().expect("raw_ref");
    assert_eq!(daemon.raw(raw_ref).await.as_deref(), Ok(body.as_bytes()));

    // A double submit: the same fields, one delivery (fetch reads the JSON answer).
    let again = post(&daemon, Some(ORIGIN_OK), URLENCODED, body, true).await;
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(
        again.headers()["access-control-allow-origin"],
        ORIGIN_OK,
        "fetch from the allowed page may read it"
    );
    let again: Value = again.json().await.expect("JSON");
    assert_eq!(again["outcome"], "duplicate", "{again}");
    assert_eq!(daemon.runs("").await.len(), 1);

    // Multipart, as a form with enctype="multipart/form-data" sends it, without a file.
    let boundary = "----switchyard-test-boundary";
    let multipart = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\nbob@example.com\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"message\"\r\n\r\nMultipart hello\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"attachment\"; filename=\"\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n\r\n--{boundary}--\r\n"
    );
    let content_type = format!("multipart/form-data; boundary={boundary}");
    let answer = post(&daemon, Some(ORIGIN_OK), &content_type, multipart, true).await;
    assert_eq!(answer.status(), StatusCode::OK);
    let answer: Value = answer.json().await.expect("JSON");
    assert_eq!(answer["outcome"], "routed", "{answer}");
    // With a file: refused (max_file_bytes = 0), recorded.
    let with_file = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\ncarl@example.com\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"attachment\"; filename=\"a.txt\"\r\n\
         Content-Type: text/plain\r\n\r\nfile content\r\n--{boundary}--\r\n"
    );
    let answer = post(&daemon, Some(ORIGIN_OK), &content_type, with_file, true).await;
    assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
    let answer: Value = answer.json().await.expect("JSON");
    assert_eq!(answer["outcome"], "invalid_event");
    assert!(
        answer["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("file_refused")),
        "{answer}"
    );

    // A foreign Origin and none: 403, recorded, no run.
    let foreign = post(
        &daemon,
        Some("https://evil.example"),
        URLENCODED,
        "email=eve%40example.com&message=hi",
        false,
    )
    .await;
    assert_eq!(foreign.status(), StatusCode::FORBIDDEN);
    assert!(
        foreign
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
    let missing = post(&daemon, None, URLENCODED, "email=eve%40example.com", true).await;
    assert_eq!(missing.status(), StatusCode::FORBIDDEN);
    let missing: Value = missing.json().await.expect("JSON");
    assert_eq!(missing["outcome"], "unauthorized_source");

    // A bot: answered as if taken, recorded `ineligible`, no run.
    let bot = post(
        &daemon,
        Some(ORIGIN_OK),
        URLENCODED,
        "email=bot%40spam.example&message=buy&website=http%3A%2F%2Fspam.example",
        false,
    )
    .await;
    assert_eq!(bot.status(), StatusCode::SEE_OTHER);

    // Too big for the form: 413, nothing recorded.
    let big = format!("email=x%40example.com&message={}", "a".repeat(3000));
    let answer = post(&daemon, Some(ORIGIN_OK), URLENCODED, big, true).await;
    assert_eq!(answer.status(), StatusCode::PAYLOAD_TOO_LARGE);

    let rows = daemon.intake("source=contact").await;
    let outcomes: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["outcome"].as_str().unwrap_or_default(),
                r["detail"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(outcomes.len(), 6, "{outcomes:?}");
    assert_eq!(outcomes[0].0, "ineligible");
    assert!(
        outcomes[0].1.contains("honeypot field `website`"),
        "{outcomes:?}"
    );
    assert_eq!(outcomes[1].0, "unauthorized_source");
    assert!(outcomes[1].1.starts_with("missing_origin"), "{outcomes:?}");
    assert_eq!(outcomes[2].0, "unauthorized_source");
    assert!(
        outcomes[2].1.contains("`https://evil.example`"),
        "{outcomes:?}"
    );
    assert_eq!(outcomes[3].0, "invalid_event");
    assert_eq!(outcomes[4].0, "routed");
    assert_eq!(outcomes[5].0, "routed");
    assert_eq!(
        rows[2]["event"]["tenant_id"], "acme",
        "the form's tenant, recorded"
    );
    assert_eq!(daemon.runs("").await.len(), 2);
    daemon.stop();
}

#[tokio::test]
async fn a_client_past_its_rate_is_rate_limited_and_recorded() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let text = form_source(ORIGIN_OK, r#"{ limit = 2, per = "1h", burst = 2 }"#);
    let daemon = Daemon::start(&db, &config(&db, &text), &[]).await;
    for n in 0..2 {
        let body = format!("email=p{n}%40example.com&message=m");
        let answer = post(&daemon, Some(ORIGIN_OK), URLENCODED, body, true).await;
        assert_eq!(answer.status(), StatusCode::OK, "post {n}");
    }
    let answer = post(
        &daemon,
        Some(ORIGIN_OK),
        URLENCODED,
        "email=p3%40example.com&message=m",
        true,
    )
    .await;
    assert_eq!(answer.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = answer.headers()["retry-after"]
        .to_str()
        .expect("text")
        .parse()
        .expect("seconds");
    assert!(retry > 60, "{retry}");
    let answer: Value = answer.json().await.expect("JSON");
    assert_eq!(answer["outcome"], "rate_limited", "{answer}");
    let rows = daemon.intake("source=contact&outcome=rate_limited").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["event"]["target_entity_id"], "p3@example.com");
    assert_eq!(daemon.runs("").await.len(), 2);
    daemon.stop();
}

/// With `delivery_id = "{/submission_id}"` the page's own id names a submission: the same id
/// again is a `duplicate` whatever its fields, another id is another delivery.
#[tokio::test]
async fn a_page_sent_submission_id_names_the_submission() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let text = form_source(ORIGIN_OK, r#"{ limit = 60, per = "1m", burst = 8 }"#).replace(
        "target_entity_id = \"{/email}\"",
        "target_entity_id = \"{/email}\"\ndelivery_id = \"{/submission_id}\"",
    );
    let daemon = Daemon::start(&db, &config(&db, &text), &[]).await;
    let send = |body: &'static str| post(&daemon, Some(ORIGIN_OK), URLENCODED, body, true);
    let first: Value = send("submission_id=s-1&email=ann%40example.com&message=one")
        .await
        .json()
        .await
        .expect("JSON");
    assert_eq!(first["outcome"], "routed", "{first}");
    let again: Value = send("submission_id=s-1&email=ann%40example.com&message=edited")
        .await
        .json()
        .await
        .expect("JSON");
    assert_eq!(again["outcome"], "duplicate", "{again}");
    let other: Value = send("submission_id=s-2&email=ann%40example.com&message=one")
        .await
        .json()
        .await
        .expect("JSON");
    assert_eq!(
        other["outcome"], "entity_locked",
        "another submission: {other}"
    );
    let rows = daemon.intake("source=contact").await;
    let ids: Vec<&str> = rows
        .iter()
        .filter_map(|r| r["delivery_id"].as_str())
        .collect();
    assert_eq!(ids, ["s-2", "s-1"]);
    daemon.stop();
}
