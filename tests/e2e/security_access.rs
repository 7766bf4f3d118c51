//! Access hardening (issue 32, item 7), each attack replayed against the real daemon: a
//! brute force on tokens from one address is throttled while another address still gets in;
//! `check` and `serve` refuse tokens too short to be secret; a tenant-limited token reads no
//! other tenant's name; an unauthenticated `/readyz` shows only a status; `check` warns when
//! two tenants' sources share a signing secret; raw bytes are never served as the sender's type.

use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use serde_json::{Value, json};

use super::console::Console;
use super::harness::{
    Backend, Daemon, PRINCIPALS, TOKEN, TestDb, binary, config, event, read, unique,
};

/// Failures from one address that start a block (`auth::throttle::FAILURE_LIMIT`).
const FAILURE_LIMIT: usize = 10;

/// A client whose connections come from `local` (Linux routes all of 127/8 to lo).
fn client_from(local: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from(local))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client")
}

async fn get_runs(daemon: &Daemon, client: &reqwest::Client, token: &str) -> reqwest::Response {
    client
        .get(daemon.url("/v1/runs"))
        .bearer_auth(token)
        .send()
        .await
        .expect("GET /v1/runs")
}

/// The daemon's JSON log lines whose message is `message`.
fn log_lines(daemon: &Daemon, message: &str) -> Vec<Value> {
    daemon
        .logs()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["fields"]["message"] == message)
        .collect()
}

#[tokio::test]
async fn a_brute_force_from_one_address_is_throttled_and_other_addresses_are_not() {
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let daemon = Daemon::start(&db, &config(&db, INTERNAL_CLOUDEVENTS), &[]).await;
    let attacker = client_from([127, 0, 0, 1]);
    let victim = client_from([127, 0, 0, 2]);
    let guess = "guessed-token-0000";

    for n in 0..FAILURE_LIMIT {
        let answer = get_runs(&daemon, &attacker, guess).await;
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "guess {n}");
    }
    let refused = get_runs(&daemon, &attacker, guess).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = refused
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("Retry-After in seconds");
    assert!((1..=300).contains(&retry_after), "{retry_after}");
    let (_, body) = read(refused).await;
    assert_eq!(body["error"], "too_many_auth_failures", "{body}");

    // While blocked, even the right token is not compared: the attacker learns nothing.
    let right = get_runs(&daemon, &attacker, TOKEN).await;
    assert_eq!(right.status(), StatusCode::TOO_MANY_REQUESTS);
    // The console's login form shares the count.
    let form = attacker
        .get(daemon.url("/ui/login"))
        .send()
        .await
        .expect("GET /ui/login");
    assert_eq!(
        form.status(),
        StatusCode::OK,
        "reading the form is not an attempt"
    );
    let login = attacker
        .post(daemon.url("/ui/login"))
        .form(&[("token", TOKEN), ("csrf", "x")])
        .send()
        .await
        .expect("POST /ui/login");
    assert_eq!(login.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(login.headers().contains_key(RETRY_AFTER));
    // Probes without a token are not refused.
    let health = attacker
        .get(daemon.url("/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status(), StatusCode::OK);

    // Another address: its right token works, and its wrong one is a plain 401.
    let ok = get_runs(&daemon, &victim, TOKEN).await;
    assert_eq!(ok.status(), StatusCode::OK);
    let sent = victim
        .post(daemon.url("/v1/events"))
        .bearer_auth(TOKEN)
        .header("Idempotency-Key", unique("victim"))
        .json(&event("webhook", "ticket.created", "acme", &unique("t")))
        .send()
        .await
        .expect("POST /v1/events");
    assert_eq!(sent.status(), StatusCode::OK);
    let wrong = get_runs(&daemon, &victim, guess).await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);

    // Guessing through the CloudEvents endpoint's token path counts the same.
    let third = client_from([127, 0, 0, 3]);
    let cloudevent = |token: &'static str| {
        third
            .post(daemon.url("/v1/ingest/cloudevents/internal"))
            .bearer_auth(token)
            .header(CONTENT_TYPE, "application/cloudevents+json")
            .body(
                json!({"specversion": "1.0", "id": unique("ce"), "source": "/s",
                       "type": "t", "subject": "e"})
                .to_string(),
            )
            .send()
    };
    for n in 0..FAILURE_LIMIT {
        let answer = cloudevent("guessed-token-0000").await.expect("POST");
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "guess {n}");
    }
    let refused = cloudevent(TOKEN).await.expect("POST");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);

    // Each failure is a WARN naming the address and the route, never the guess. The daemon
    // writes its log on a thread of its own: wait until the last block is in it.
    const BLOCKED: &str =
        "too many refused tokens from one address: refusing its tokens unread for a while";
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !log_lines(&daemon, BLOCKED)
        .iter()
        .any(|l| l["fields"]["client"] == "127.0.0.3")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the block of 127.0.0.3 is logged"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let failures = log_lines(&daemon, "a presented token was refused");
    let from = |client: &str| {
        failures
            .iter()
            .filter(|l| l["fields"]["client"] == client && l["fields"]["route"] == "/v1/runs")
            .count()
    };
    assert_eq!(from("127.0.0.1"), FAILURE_LIMIT, "{failures:?}");
    assert_eq!(from("127.0.0.2"), 1, "{failures:?}");
    assert!(
        failures.iter().all(|l| l["level"] == "WARN"),
        "{failures:?}"
    );
    let blocks: Vec<Value> = log_lines(&daemon, BLOCKED)
        .iter()
        .map(|l| l["fields"]["client"].clone())
        .collect();
    assert_eq!(blocks, [json!("127.0.0.1"), json!("127.0.0.3")]);
    assert!(!daemon.logs().contains(guess), "a guess reached the log");
    daemon.stop();
}

/// A CloudEvents source that admits only tokens.
const INTERNAL_CLOUDEVENTS: &str = "[[source]]\nkind = \"cloudevents\"\nname = \"internal\"\ntenant = \"acme\"\nchannel = \"chat\"\n";

/// Writes `text` to a config file in a temp dir and runs `switchyard check` on it.
fn check(text: &str, env: &[(&str, &str)]) -> (bool, String) {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("switchyard.toml");
    std::fs::write(&path, text).expect("write config");
    let mut command = Command::new(binary());
    command
        .args(["check", "--config"])
        .arg(&path)
        .env_remove("SWITCHYARD_API_TOKEN");
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().expect("run switchyard check");
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

#[test]
fn check_and_serve_refuse_tokens_too_short_to_be_secret() {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{PRINCIPALS}\n[[token]]\nname = \"ops\"\n\
         secret_env = \"OPS_TOKEN\"\nscopes = [\"read\"]\n"
    );
    let long = "sixteen-bytes-ok";
    let (ok, out) = check(
        &text,
        &[
            ("SWITCHYARD_API_TOKEN", "x"),
            ("OPS_TOKEN", "fifteen-bytes-1"),
        ],
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains(
            "the admin token (server.api_token_env, `api_token`) is shorter than 16 bytes"
        ),
        "{out}"
    );
    assert!(
        out.contains("token `ops` (secret_env `OPS_TOKEN`) is shorter than 16 bytes"),
        "{out}"
    );
    assert!(
        !out.contains("fifteen-bytes-1"),
        "the secret is never shown: {out}"
    );

    let (ok, out) = check(
        &text,
        &[("SWITCHYARD_API_TOKEN", TOKEN), ("OPS_TOKEN", long)],
    );
    assert!(ok, "16 bytes will do: {out}");

    // `serve` refuses the same file with a one-character token before it listens.
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("switchyard.toml");
    std::fs::write(
        &path,
        format!(
            "{text}\n[database]\nurl = \"sqlite://{}?mode=rwc\"\n",
            dir.path().join("s.db").display()
        ),
    )
    .expect("write config");
    let output = Command::new(binary())
        .args(["serve", "--config"])
        .arg(&path)
        .env("SWITCHYARD_API_TOKEN", "x")
        .env("OPS_TOKEN", long)
        .output()
        .expect("run switchyard serve");
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{text}");
    assert!(text.contains("is shorter than 16 bytes"), "{text}");
}

/// A Slack source shared by acme and globex, a source and a workflow of each, and a token
/// limited to globex.
const TWO_TENANTS: &str = r#"
[[source]]
kind = "slack"
name = "shared-slack"
signing_secret_env = "SHARED_SLACK_SECRET"
teams = { T01 = "acme", T02 = "globex" }

[[source]]
kind = "webhook"
name = "zendesk-a"
tenant = "acme"
signing_secret_env = "ZENDESK_A_SECRET"

[[source]]
kind = "webhook"
name = "zendesk-g"
tenant = "globex"
signing_secret_env = "ZENDESK_G_SECRET"

[[workflow]]
id = "acme-triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 10 } ]

[[workflow]]
id = "globex-triage"
tenant = "globex"
status = "live"
run_as = "globex-agent"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 10 } ]

[[token]]
name = "globex-reader"
secret_env = "GLOBEX_READER"
scopes = ["read", "raw:read"]
tenants = ["globex"]
"#;

const TWO_TENANTS_ENV: [(&str, &str); 4] = [
    ("SHARED_SLACK_SECRET", "shared-slack-signing-secret"),
    ("ZENDESK_A_SECRET", "zendesk-a-signing-secret"),
    ("ZENDESK_G_SECRET", "zendesk-g-signing-secret"),
    ("GLOBEX_READER", "globex-reader-secret"),
];

async fn get_as(daemon: &Daemon, token: &str, path: &str) -> String {
    let answer = daemon
        .client()
        .get(daemon.url(path))
        .bearer_auth(token)
        .send()
        .await
        .expect("GET");
    assert_eq!(answer.status(), StatusCode::OK, "GET {path}");
    answer.text().await.expect("body")
}

#[tokio::test]
async fn a_tenant_limited_token_reads_no_other_tenants_name_on_every_backend() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = Daemon::start(&db, &config(&db, TWO_TENANTS), &TWO_TENANTS_ENV).await;
        for tenant in ["acme", "globex"] {
            let (status, answer) = daemon
                .post_event(
                    &unique(tenant),
                    &event("webhook", "ticket.created", tenant, &unique("ticket")),
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{backend:?}: {answer}");
            assert_eq!(answer["outcome"], "routed", "{backend:?}: {answer}");
        }
        let globex = "globex-reader-secret";

        let listed: Value =
            serde_json::from_str(&get_as(&daemon, globex, "/v1/revisions").await).expect("json");
        let id = listed["revisions"][0]["id"]
            .as_str()
            .expect("a revision")
            .to_owned();
        let revision: Value =
            serde_json::from_str(&get_as(&daemon, globex, &format!("/v1/revisions/{id}")).await)
                .expect("json");
        let shared = revision["content"]["sources"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == "shared-slack"))
            .unwrap_or_else(|| panic!("{backend:?}: the shared source is shown: {revision}"));
        assert_eq!(shared["tenants"], json!(["globex"]), "{backend:?}");
        let mut answers = vec![
            ("/v1/revisions".to_owned(), listed.to_string()),
            (format!("/v1/revisions/{id}"), revision.to_string()),
        ];
        for path in [
            "/v1/workflows",
            "/v1/sources",
            "/v1/intake",
            "/v1/runs",
            "/v1/locks",
        ] {
            answers.push((path.to_owned(), get_as(&daemon, globex, path).await));
        }
        let console = Console::login(&daemon, globex).await;
        let sources = console.page("/ui/sources").await;
        assert!(sources.contains("shared-slack"), "{backend:?}: {sources}");
        answers.push(("/ui/sources".to_owned(), sources));
        for path in [
            "/ui/deliveries",
            "/ui/runs",
            "/ui/locks",
            "/ui/workflows",
            "/ui/replays",
        ] {
            answers.push((path.to_owned(), console.page(path).await));
        }
        for (path, text) in &answers {
            assert!(
                !text.to_lowercase().contains("acme"),
                "{backend:?}: {path} names acme to a globex-limited token: {text}"
            );
        }

        // The operator still sees the whole picture.
        let whole: Value =
            serde_json::from_str(&get_as(&daemon, TOKEN, &format!("/v1/revisions/{id}")).await)
                .expect("json");
        let shared = whole["content"]["sources"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == "shared-slack"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(shared["tenants"], json!(["acme", "globex"]), "{backend:?}");
        let admin = Console::login(&daemon, TOKEN).await;
        assert!(
            admin.page("/ui/sources").await.contains("acme, globex"),
            "{backend:?}"
        );
        daemon.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn an_unauthenticated_readyz_shows_a_bare_status_and_a_token_sees_the_detail() {
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let setup = format!(
        "{TWO_TENANTS}\n[[target]]\nname = \"billing-worker\"\nkind = \"http\"\n\
         url = \"http://127.0.0.1:9/runs\"\nsigning_secret_env = \"BILLING_WORKER_SECRET\"\n"
    )
    .replace(
        "id = \"acme-triage\"\n",
        "id = \"acme-triage\"\ntarget = \"billing-worker\"\n",
    );
    let mut env = TWO_TENANTS_ENV.to_vec();
    env.push((
        "BILLING_WORKER_SECRET",
        "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
    ));
    let daemon = Daemon::start(&db, &config(&db, &setup), &env).await;
    let readyz = |token: Option<&'static str>| {
        let mut request = daemon.client().get(daemon.url("/readyz"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move { read(request.send().await.expect("readyz")).await }
    };
    let mut bare = (StatusCode::SERVICE_UNAVAILABLE, Value::Null);
    for _ in 0..100 {
        bare = readyz(None).await;
        if bare.0 == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(bare.0, StatusCode::OK, "{}", bare.1);
    assert_eq!(bare.1, json!({"status": "ready"}));

    let (status, detail) = readyz(Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(detail["status"], "ready", "{detail}");
    assert_eq!(
        detail["targets"]["billing-worker"]["kind"], "http",
        "{detail}"
    );
    assert!(detail["intake"]["writers"].is_array(), "{detail}");

    // A tenant-limited token is a probe here too; a wrong token is refused like anywhere.
    let (status, limited) = readyz(Some("globex-reader-secret")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(limited, json!({"status": "ready"}));
    let (status, _) = readyz(Some("not-a-token-at-all")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let (status, health) = read(
        daemon
            .client()
            .get(daemon.url("/healthz"))
            .send()
            .await
            .expect("healthz"),
    )
    .await;
    assert_eq!((status, health), (StatusCode::OK, json!({"status": "ok"})));
    daemon.stop();
}

#[test]
fn check_warns_when_two_tenants_sources_share_a_signing_secret() {
    let text = format!("[server]\nlisten = \"127.0.0.1:0\"\n{PRINCIPALS}\n{TWO_TENANTS}");
    let shared = "one-secret-for-two-tenants";
    let mut env = TWO_TENANTS_ENV.to_vec();
    env.push(("SWITCHYARD_API_TOKEN", TOKEN));
    let warning = "verify signatures with the same secret";

    let (ok, out) = check(&text, &env);
    assert!(ok, "{out}");
    assert!(!out.contains(warning), "own secrets: {out}");

    let mut same = env.clone();
    same.retain(|(k, _)| *k != "ZENDESK_A_SECRET" && *k != "ZENDESK_G_SECRET");
    same.push(("ZENDESK_A_SECRET", shared));
    same.push(("ZENDESK_G_SECRET", shared));
    let (ok, out) = check(&text, &same);
    assert!(ok, "a warning, not an error: {out}");
    assert!(
        out.contains(
            "webhook source `zendesk-a` (tenant `acme`) and webhook source `zendesk-g` (tenant \
             `globex`) verify signatures with the same secret"
        ),
        "{out}"
    );
    assert!(!out.contains(shared), "the secret is never shown: {out}");

    // The shared Slack source's secret reused by one of its own tenants' sources is a
    // warning too (the tenant sets differ); the same secret within one tenant is not.
    let mut slack = env.clone();
    slack.retain(|(k, _)| *k != "ZENDESK_G_SECRET");
    slack.push(("ZENDESK_G_SECRET", "shared-slack-signing-secret"));
    let (ok, out) = check(&text, &slack);
    assert!(ok, "{out}");
    assert!(
        out.contains(
            "slack source `shared-slack` (tenants `acme`, `globex`) and webhook source \
             `zendesk-g` (tenant `globex`)"
        ),
        "{out}"
    );
    let one_tenant = text.replace(
        "name = \"zendesk-g\"\ntenant = \"globex\"",
        "name = \"zendesk-g\"\ntenant = \"acme\"",
    );
    let (ok, out) = check(&one_tenant, &same);
    assert!(ok, "{out}");
    assert!(!out.contains(warning), "one tenant's sources: {out}");
}

#[tokio::test]
async fn raw_bytes_are_served_as_an_attachment_the_browser_may_not_sniff() {
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let daemon = Daemon::start(&db, &config(&db, INTERNAL_CLOUDEVENTS), &[]).await;
    let html = "<html><script>alert(document.cookie)</script></html>";
    let (status, answer) = read(
        daemon
            .client()
            .post(daemon.url("/v1/ingest/cloudevents/internal"))
            .bearer_auth(TOKEN)
            .header("ce-specversion", "1.0")
            .header("ce-type", "com.example.page")
            .header("ce-source", "/pages")
            .header("ce-id", unique("page"))
            .header("ce-subject", "page-1")
            .header(CONTENT_TYPE, "text/html; charset=utf-8")
            .body(html)
            .send()
            .await
            .expect("POST cloudevents"),
    )
    .await;
    assert!(status.is_success(), "{status}: {answer}");
    let id = answer["intake_id"].as_str().expect("intake_id");
    let raw = daemon
        .client()
        .get(daemon.url(&format!("/v1/raw/{id}")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("GET raw");
    assert_eq!(raw.status(), StatusCode::OK);
    let header = |name: &str| {
        raw.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(header("content-type"), "application/octet-stream");
    assert_eq!(header("x-content-type-options"), "nosniff");
    assert_eq!(header("content-disposition"), "attachment");
    assert_eq!(
        header("x-switchyard-content-type"),
        "text/html; charset=utf-8"
    );
    assert_eq!(raw.bytes().await.expect("bytes").as_ref(), html.as_bytes());
    daemon.stop();
}
