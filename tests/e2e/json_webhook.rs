//! Any signed JSON webhook, by configuration: the four mapped examples of
//! `examples/all-sources.toml` (GitHub issues, Stripe payments, Shopify orders, Intercom
//! conversations on `chat`), each with its provider's documented example body and a signature
//! computed here with the `hmac` crate, routed through the running daemon to their workflows;
//! redeliveries, captured requests resent, bad and stale signatures, and a missing field.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use reqwest::StatusCode;
use serde_json::Value;

use super::harness::{Daemon, TestDb, config, read};

const GITHUB_SECRET: &str = "github-webhook-secret-of-acme";
const STRIPE_SECRET: &str = "whsec_stripe_endpoint_secret_of_acme";
const SHOPIFY_SECRET: &str = "shopify-client-secret-of-acme";
const INTERCOM_SECRET: &str = "intercom-client-secret-of-acme";

pub const SECRETS: [(&str, &str); 4] = [
    ("GITHUB_WEBHOOK_SECRET", GITHUB_SECRET),
    ("STRIPE_WEBHOOK_SECRET", STRIPE_SECRET),
    ("SHOPIFY_WEBHOOK_SECRET", SHOPIFY_SECRET),
    ("INTERCOM_CLIENT_SECRET", INTERCOM_SECRET),
];

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/adapters/json_webhook/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("fixture")
}

/// The `[[source]]` entries of `examples/all-sources.toml` of these kinds, and its workflows
/// with these ids (their target left to the default, pull), as config text.
pub fn from_example(kinds: &[&str], workflows: &[&str]) -> String {
    let text = std::fs::read_to_string(format!(
        "{}/examples/all-sources.toml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("the example");
    let example: toml::Table = toml::from_str(&text).expect("TOML");
    let pick = |key: &str, keep: &dyn Fn(&toml::Table) -> bool| -> Vec<toml::Value> {
        example[key]
            .as_array()
            .expect("entries")
            .iter()
            .filter(|v| v.as_table().is_some_and(keep))
            .map(|v| {
                let mut table = v.as_table().expect("a table").clone();
                table.remove("target");
                toml::Value::Table(table)
            })
            .collect()
    };
    let mut out = toml::Table::new();
    out.insert(
        "source".into(),
        toml::Value::Array(pick("source", &|t| {
            kinds.contains(&t["kind"].as_str().unwrap_or_default())
        })),
    );
    out.insert(
        "workflow".into(),
        toml::Value::Array(pick("workflow", &|t| {
            workflows.contains(&t["id"].as_str().unwrap_or_default())
        })),
    );
    out.insert(
        "principal".into(),
        toml::Value::Array(pick("principal", &|t| {
            t["id"].as_str() == Some("acme-support-bot")
        })),
    );
    toml::to_string(&out).expect("serialise")
}

fn hmac256(key: &str, parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).expect("key");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

fn github(body: &[u8], delivery: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "X-Hub-Signature-256",
            format!("sha256={}", hex::encode(hmac256(GITHUB_SECRET, &[body]))),
        ),
        ("X-GitHub-Event", "issues".into()),
        ("X-GitHub-Delivery", delivery.into()),
    ]
}

fn stripe(body: &[u8], at: i64) -> Vec<(&'static str, String)> {
    let signed = hmac256(STRIPE_SECRET, &[at.to_string().as_bytes(), b".", body]);
    vec![(
        "Stripe-Signature",
        format!(
            "t={at},v1={},v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39",
            hex::encode(signed)
        ),
    )]
}

fn shopify(body: &[u8]) -> Vec<(&'static str, String)> {
    vec![
        (
            "X-Shopify-Hmac-Sha256",
            STANDARD.encode(hmac256(SHOPIFY_SECRET, &[body])),
        ),
        ("X-Shopify-Topic", "orders/create".into()),
        (
            "X-Shopify-Webhook-Id",
            "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043".into(),
        ),
    ]
}

fn intercom(body: &[u8]) -> Vec<(&'static str, String)> {
    let mut mac = Hmac::<sha1::Sha1>::new_from_slice(INTERCOM_SECRET.as_bytes()).expect("key");
    mac.update(body);
    vec![(
        "X-Hub-Signature",
        format!("sha1={}", hex::encode(mac.finalize().into_bytes())),
    )]
}

async fn send(
    daemon: &Daemon,
    source: &str,
    body: &[u8],
    headers: &[(&'static str, String)],
) -> (StatusCode, Value) {
    let mut request = daemon
        .client()
        .post(daemon.url(&format!("/v1/ingest/json_webhook/{source}")))
        .header("content-type", "application/json")
        .body(body.to_vec());
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    read(request.send().await.expect("POST")).await
}

const WORKFLOWS: [&str; 4] = [
    "github-issue-triage",
    "payment-received",
    "order-fulfilment",
    "chat-first-response",
];

/// The issue's four examples on every database: each routes to its workflow with the fields
/// its mapping names; a redelivery, a captured request resent under a new delivery header and
/// a Stripe retry signed afresh are duplicates; a wrong or stale signature is refused unread.
#[tokio::test]
async fn the_four_mapped_examples_route_to_their_workflows_on_every_backend() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = Daemon::start(
            &db,
            &config(&db, &from_example(&["json_webhook"], &WORKFLOWS)),
            &SECRETS,
        )
        .await;
        let now = chrono::Utc::now().timestamp();
        let issue = fixture("github_issues_opened.json");
        let payment = fixture("stripe_payment_intent_succeeded.json");
        let order = fixture("shopify_orders_create.json");
        let chat = fixture("intercom_conversation_user_created.json");
        let cases = [
            (
                "github",
                &issue,
                github(&issue, "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
                "github-issue-triage",
                "webhook",
                "github.issues.opened",
                "Codertocat/Hello-World#1",
                "72d3162e-cc78-11e3-81ab-4c9367dc0958",
            ),
            (
                "stripe-payments",
                &payment,
                stripe(&payment, now),
                "payment-received",
                "webhook",
                "stripe.payment_intent.succeeded",
                "cus_NffrFeUfNV2Hib",
                "evt_3MtwBwLkdIwHu7ix28a3tqPa",
            ),
            (
                "shopify-orders",
                &order,
                shopify(&order),
                "order-fulfilment",
                "webhook",
                "shopify.orders/create",
                "order:820982911946154508",
                "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
            ),
            (
                "intercom",
                &chat,
                intercom(&chat),
                "chat-first-response",
                "chat",
                "intercom.conversation.user.created",
                "conversation:147",
                "notif_ccd8a4d0-f965-11e3-a367-c779cae3e1b3",
            ),
        ];
        for (source, body, headers, workflow, channel, event_type, entity, delivery) in &cases {
            let (status, answer) = send(&daemon, source, body, headers).await;
            assert_eq!(status, StatusCode::OK, "{backend:?} {source}: {answer}");
            assert_eq!(
                answer["outcome"], "routed",
                "{backend:?} {source}: {answer}"
            );
            assert_eq!(answer["workflow_id"], *workflow, "{source}");
            let row = &daemon.intake(&format!("source={source}")).await[0];
            assert_eq!(row["delivery_id"], *delivery, "{source}");
            assert_eq!(row["event"]["channel"], *channel, "{source}");
            assert_eq!(row["event"]["event_type"], *event_type, "{source}");
            assert_eq!(row["event"]["tenant_id"], "acme", "{source}");
            assert_eq!(row["event"]["target_entity_id"], *entity, "{source}");
            let raw_ref = row["event"]["raw_ref"].as_str().expect("raw_ref");
            assert_eq!(
                daemon.raw(raw_ref).await.as_deref(),
                Ok(&body[..]),
                "{source}"
            );
        }
        let issue_row = &daemon.intake("source=github").await[0];
        assert_eq!(
            issue_row["event"]["payload"]["title"],
            "Spelling error in the README file"
        );
        let payment_row = &daemon.intake("source=stripe-payments").await[0];
        assert_eq!(payment_row["event"]["payload"]["amount"], 2000);
        assert_eq!(daemon.runs("").await.len(), 4, "{backend:?}");

        // GitHub's redelivery: same delivery id.
        let (_, again) = send(
            &daemon,
            "github",
            &issue,
            &github(&issue, "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
        )
        .await;
        assert_eq!(again["outcome"], "duplicate", "{backend:?}: {again}");
        // A captured request resent with a new (unsigned) delivery header: still the same
        // message, no second run.
        let (status, resent) = send(
            &daemon,
            "github",
            &issue,
            &github(&issue, "forged-new-delivery-id"),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{resent}");
        assert_eq!(resent["outcome"], "duplicate", "{backend:?}: {resent}");
        // Stripe's retry, signed afresh a minute later.
        let (_, retry) = send(
            &daemon,
            "stripe-payments",
            &payment,
            &stripe(&payment, now + 60),
        )
        .await;
        assert_eq!(retry["outcome"], "duplicate", "{backend:?}: {retry}");
        assert_eq!(daemon.runs("").await.len(), 4, "{backend:?}");

        // Refused before anything is read or recorded.
        let ledger_before = daemon.intake("").await.len();
        let mut wrong = github(&issue, "d-wrong");
        wrong[0].1 = format!(
            "sha256={}",
            hex::encode(hmac256("not-the-secret", &[&issue]))
        );
        let (status, refused) = send(&daemon, "github", &issue, &wrong).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{refused}");
        assert_eq!(refused["outcome"], "unauthorized_source");
        assert!(
            refused["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("bad_signature")),
            "{refused}"
        );
        let (status, stale) = send(
            &daemon,
            "stripe-payments",
            &payment,
            &stripe(&payment, now - 600),
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{stale}");
        assert!(
            stale["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("stale_timestamp")),
            "{stale}"
        );
        let (status, unsigned) = send(&daemon, "shopify-orders", &order, &[]).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{unsigned}");
        let mut tampered = order.clone();
        tampered.extend_from_slice(b" ");
        let (status, _) = send(&daemon, "shopify-orders", &tampered, &shopify(&order)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(
            daemon.intake("").await.len(),
            ledger_before,
            "{backend:?}: nothing recorded"
        );
        let (status, _) = send(&daemon, "nope", &issue, &github(&issue, "d")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        daemon.stop();
        db.drop_database().await;
    }
}

/// A verified body the mapping cannot read is `invalid_event`, recorded with its bytes, the
/// detail naming the mapping key and the pointer; a body that is no JSON too.
#[tokio::test]
async fn a_missing_field_is_invalid_event_naming_key_and_pointer() {
    let Some(db) = TestDb::create(super::harness::Backend::Sqlite).await else {
        return;
    };
    let daemon = Daemon::start(
        &db,
        &config(&db, &from_example(&["json_webhook"], &WORKFLOWS)),
        &SECRETS,
    )
    .await;
    let body = br#"{"action":"opened","issue":{"number":1}}"#;
    let (status, answer) = send(&daemon, "github", body, &github(body, "d-missing")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["outcome"], "invalid_event");
    assert_eq!(
        answer["detail"],
        "missing_field: mapping `target_entity_id`: the body has nothing at JSON Pointer `/repository/full_name`"
    );
    let row = &daemon.intake("source=github").await[0];
    assert_eq!(row["outcome"], "invalid_event");
    assert_eq!(row["delivery_id"], "d-missing");
    let raw_ref = row["raw_ref"].as_str().expect("the bytes are kept");
    assert_eq!(daemon.raw(raw_ref).await.as_deref(), Ok(&body[..]));
    let not_json = b"<xml/>";
    let (status, answer) = send(&daemon, "github", not_json, &github(not_json, "d-xml")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("malformed_body")),
        "{answer}"
    );
    assert_eq!(daemon.runs("").await.len(), 0);
    daemon.stop();
}

/// `switchyard route --source --body` on every kind of source in `examples/all-sources.toml`:
/// verified with the secret in the environment (a wrong one refused), or mapped alone with
/// `--skip-verify`, and explained.
#[test]
fn route_dry_runs_a_raw_body_for_every_source_kind() {
    let dir = tempfile::tempdir().expect("dir");
    let example = std::fs::read_to_string(format!(
        "{}/examples/all-sources.toml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("example");
    let db = dir.path().join("none.db");
    let config = example.replace(
        "url = \"postgres://postgres@127.0.0.1/test\"",
        &format!("url = \"sqlite://{}?mode=rwc\"", db.display()),
    );
    let path = dir.path().join("switchyard.toml");
    std::fs::write(&path, config).expect("write");
    let adapters = format!("{}/adapters", env!("CARGO_MANIFEST_DIR"));
    let form = dir.path().join("form.txt");
    std::fs::write(&form, "email=ann%40example.com&message=hi&website=").expect("write");
    let issue = fixture("github_issues_opened.json");
    let signature = format!(
        "X-Hub-Signature-256:sha256={}",
        hex::encode(hmac256(GITHUB_SECRET, &[&issue]))
    );
    let route = |args: &[&str], secret: &str| {
        let output = std::process::Command::new(super::harness::binary())
            .arg("route")
            .arg("--config")
            .arg(&path)
            .args(args)
            .env("GITHUB_WEBHOOK_SECRET", secret)
            .output()
            .expect("run route");
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let github_body = format!("{adapters}/json_webhook/tests/fixtures/github_issues_opened.json");
    let github_args = [
        "--source",
        "github",
        "--body",
        &github_body,
        "--header",
        &signature,
        "--header",
        "X-GitHub-Event:issues",
        "--header",
        "X-GitHub-Delivery:d-1",
    ];
    let out = route(&github_args, GITHUB_SECRET);
    assert!(out.contains("delivery_id: d-1"), "{out}");
    assert!(
        out.contains(
            "event: webhook github.issues.opened tenant=acme entity=Codertocat/Hello-World#1"
        ),
        "{out}"
    );
    assert!(
        out.contains("`github-issue-triage` at priority 100  <- wins"),
        "{out}"
    );
    let out = route(&github_args, "another-secret");
    assert!(out.contains("refused before intake: HTTP 401"), "{out}");
    assert!(out.contains("bad_signature"), "{out}");
    let mut skipped = github_args.to_vec();
    skipped.push("--skip-verify");
    assert!(route(&skipped, "another-secret").contains("<- wins"));

    let missing_header = [
        "--source",
        "github",
        "--body",
        &github_body,
        "--header",
        &signature,
    ];
    let out = route(&missing_header, GITHUB_SECRET);
    assert!(out.contains("outcome: invalid_event (missing_field: mapping `event_type`: the request has no `X-GitHub-Event` header)"), "{out}");

    let cases: [(&str, String, &[&str], &str); 6] = [
        (
            "zendesk-acme",
            format!("{adapters}/webhook/tests/fixtures/ticket_created.json"),
            &["--skip-verify"],
            "event: webhook ticket.created tenant=acme entity=5158",
        ),
        (
            "acme-slack",
            format!("{adapters}/slack/tests/fixtures/message_in_thread.json"),
            &["--skip-verify"],
            "event: slack message tenant=acme",
        ),
        (
            "support-inbox",
            format!("{adapters}/email/tests/fixtures/plain.eml"),
            &[],
            "tenant=acme",
        ),
        (
            "billing",
            format!("{adapters}/cloudevents/tests/fixtures/structured_json_data.json"),
            &[
                "--header",
                "content-type:application/cloudevents+json",
                "--skip-verify",
            ],
            "event: webhook com.example.someevent tenant=acme",
        ),
        (
            "stripe-payments",
            format!("{adapters}/json_webhook/tests/fixtures/stripe_payment_intent_succeeded.json"),
            &["--skip-verify"],
            "`payment-received` at priority 100  <- wins",
        ),
        (
            "contact",
            form.display().to_string(),
            &["--header", "Origin:https://www.example.com"],
            "`contact-request` at priority 100  <- wins",
        ),
    ];
    for (source, body, extra, expected) in cases {
        let mut args = vec!["--source", source, "--body", &body];
        args.extend_from_slice(extra);
        let out = route(&args, GITHUB_SECRET);
        assert!(out.contains(expected), "{source}: {out}");
    }
    let foreign = route(
        &[
            "--source",
            "contact",
            "--body",
            &form.display().to_string(),
            "--header",
            "Origin:https://evil.example",
        ],
        GITHUB_SECRET,
    );
    assert!(
        foreign.contains("foreign_origin `https://evil.example`"),
        "{foreign}"
    );
    assert!(!db.exists(), "a dry run creates no database");
}

/// A json_webhook source that maps no delivery id is identified by its body's digest; `check`
/// says so.
#[test]
fn check_warns_when_a_json_webhook_maps_no_delivery_id() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("switchyard.toml");
    std::fs::write(
        &path,
        r#"
[[source]]
kind = "json_webhook"
name = "ci-builds"
tenant = "acme"
verify = { preset = "hmac_sha256", secret_env = "CI_HOOK_SECRET", header = "X-Signature", prefix = "sha256=" }
event_type = "build.{/status}"
target_entity_id = "{/pipeline}"
"#,
    )
    .expect("write");
    let output = std::process::Command::new(super::harness::binary())
        .args(["check", "--config"])
        .arg(&path)
        .env("SWITCHYARD_API_TOKEN", super::harness::TOKEN)
        .env("CI_HOOK_SECRET", "a-secret-of-the-ci")
        .output()
        .expect("run check");
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{out}");
    assert!(
        out.contains("warning: json_webhook source `ci-builds` maps no `delivery_id`: deliveries are identified by their body's digest"),
        "{out}"
    );
}
