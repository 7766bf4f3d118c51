//! Mailboxes that sign in with OAuth2, end to end: the daemon gets a token from the test's
//! identity provider (`idp.rs`), sends it over SASL XOAUTH2/OAUTHBEARER to a Dovecot of the
//! test's own (`dovecot.rs`, `.ci/dovecot.sh` in its OAuth2 mode) whose `oauth2` passdb asks the
//! same provider's introspection endpoint about it. So every token crosses the daemon, the IMAP
//! wire and Dovecot; the provider records what it issued and what Dovecot accepted.

mod dovecot;
mod idp;

use std::time::Duration;

use serde_json::Value;

use self::dovecot::OAuthDovecot;
use self::idp::{CLIENT_ID, CLIENT_SECRET, Idp, MS_TENANT, SA_EMAIL};
use super::email::{imap_server, message, outcomes, wait_for_rows};
use super::email_start::TRIAGE;
use super::harness::{Backend, Daemon, TestDb, config, unique};

const SEED_REFRESH_TOKEN: &str = "rt-seed-1f7a";

/// Whether Dovecot can be run here (the same gate as the password tests).
fn available() -> bool {
    imap_server().is_some()
}

/// An `auth = "oauth2"` source on `dovecot`'s `mailbox` with the given `[source.oauth2]` keys.
fn oauth_source(dovecot: &OAuthDovecot, name: &str, mailbox: &str, oauth2: &str) -> String {
    format!(
        r#"
[[source]]
kind = "email"
name = "{name}"
tenant = "acme"
host = "127.0.0.1"
port = {port}
security = "plain"
username = "support@example.com"
auth = "oauth2"
mailbox = "{mailbox}"
poll_interval = "200ms"
start_from = "beginning"
[source.oauth2]
{oauth2}
"#,
        port = dovecot.port
    )
}

fn refresh_table(idp: &Idp, secret_env: &str, refresh_env: &str) -> String {
    format!(
        "flow = \"refresh_token\"\ntoken_url = \"{}\"\nclient_id = \"{CLIENT_ID}\"\n\
         client_secret_env = \"{secret_env}\"\nrefresh_token_env = \"{refresh_env}\"\n",
        idp.url("/token")
    )
}

async fn create(client: &mut dovecot::Client, mailbox: &str) {
    let _ = client.delete(mailbox).await;
    client.create(mailbox).await.expect("create mailbox");
}

async fn append(client: &mut dovecot::Client, mailbox: &str, raw: &[u8]) {
    client
        .append(mailbox, None, None, raw)
        .await
        .expect("append");
}

/// The `/v1/sources` status of `name`.
async fn status(daemon: &Daemon, name: &str) -> Value {
    let sources = daemon.get("/v1/sources").await;
    sources["sources"]
        .as_array()
        .and_then(|all| all.iter().find(|s| s["name"] == name))
        .map_or(Value::Null, |s| s["status"].clone())
}

/// Asserts no secret the provider knows appears in the daemon's log, `/v1/revisions` or
/// `/v1/sources`.
async fn assert_no_secret_shown(daemon: &Daemon, idp: &Idp, extra: &[&str]) {
    let logs = daemon.logs();
    let revisions = daemon.get("/v1/revisions").await.to_string();
    let sources = daemon.get("/v1/sources").await.to_string();
    let mut secrets = idp.secrets();
    secrets.extend(extra.iter().map(|s| (*s).to_owned()));
    for secret in secrets {
        assert!(!logs.contains(&secret), "a secret is in the log: {secret}");
        assert!(!revisions.contains(&secret), "a secret is in /v1/revisions");
        assert!(!sources.contains(&secret), "a secret is in /v1/sources");
    }
}

#[tokio::test]
async fn the_refresh_token_flow_reads_mail_once_and_a_rotated_token_survives_a_restart() {
    if !available() {
        return;
    }
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let idp = Idp::start().await;
    idp.state.lock().expect("idp state").rotate = true;
    idp.add_refresh_token(SEED_REFRESH_TOKEN, CLIENT_ID);
    let dovecot = OAuthDovecot::start(&idp.introspection_url());
    let mut client = dovecot.client().await;
    let (source, mailbox) = (unique("oauth"), unique("box"));
    create(&mut client, &mailbox).await;
    append(&mut client, &mailbox, &message("oauth", 1, "")).await;
    append(&mut client, &mailbox, &message("oauth", 2, "")).await;

    let path = db.dir.path().join("oauth.toml");
    let text = config(
        &db,
        &format!(
            "{}{TRIAGE}",
            oauth_source(
                &dovecot,
                &source,
                &mailbox,
                &refresh_table(
                    &idp,
                    "SUPPORT_OAUTH_CLIENT_SECRET",
                    "SUPPORT_OAUTH_REFRESH_TOKEN"
                )
            )
        ),
    );
    std::fs::write(&path, &text).expect("write config");
    let env = [
        ("SUPPORT_OAUTH_CLIENT_SECRET", CLIENT_SECRET),
        ("SUPPORT_OAUTH_REFRESH_TOKEN", SEED_REFRESH_TOKEN),
    ];
    let daemon = Daemon::start_with_file(&path, &env).await;
    let rows = wait_for_rows(&daemon, &source, 2, Duration::from_secs(30)).await;
    assert_eq!(outcomes(&rows), ["routed", "routed"], "{rows:#?}");
    let grants = idp.grants();
    assert_eq!(grants.len(), 1, "one token for the first login: {grants:?}");
    assert_eq!(grants[0].grant_type, "refresh_token");
    let first_token = grants[0].issued.clone().expect("issued");
    assert!(
        idp.accepted_at_imap(&first_token),
        "Dovecot accepted the very token the provider issued"
    );
    assert!(
        dovecot.log().contains("method=XOAUTH2"),
        "{}",
        dovecot.log()
    );
    // The provider rotated the refresh token and revoked the seed.
    let rotated: Vec<String> = idp
        .state
        .lock()
        .expect("idp state")
        .refresh_tokens
        .keys()
        .cloned()
        .collect();
    assert_eq!(rotated.len(), 1);
    assert_ne!(rotated[0], SEED_REFRESH_TOKEN);
    assert_no_secret_shown(&daemon, &idp, &[SEED_REFRESH_TOKEN]).await;
    daemon.stop();

    // Restarted with the same (now revoked) seed in its environment: it signs in with the
    // rotated token it stored, and takes the new mail once.
    append(&mut client, &mailbox, &message("oauth", 3, "")).await;
    let daemon = Daemon::start_with_file(&path, &env).await;
    let rows = wait_for_rows(&daemon, &source, 3, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let rows_after = daemon.intake(&format!("source={source}&limit=100")).await;
    assert_eq!(rows_after.len(), 3, "each message exactly once: {rows:#?}");
    assert!(outcomes(&rows_after).iter().all(|o| o == "routed"));
    let grants = idp.grants();
    assert_eq!(grants.len(), 2, "{grants:?}");
    assert!(
        grants[1].issued.is_some(),
        "the stored rotated token worked: {grants:?}"
    );
    assert_eq!(status(&daemon, &source).await["auth_failure"], Value::Null);

    // The server refuses the cached token (revoked after issue) on the next login: one new
    // token, one retry, and mail keeps coming.
    {
        let mut state = idp.state.lock().expect("idp state");
        let issued: Vec<String> = state.access_tokens.keys().cloned().collect();
        state.revoked.extend(issued);
    }
    dovecot.script("restart");
    let mut client = dovecot.client().await;
    append(&mut client, &mailbox, &message("oauth", 4, "")).await;
    wait_for_rows(&daemon, &source, 4, Duration::from_secs(60)).await;
    assert_eq!(
        idp.grants().len(),
        3,
        "exactly one new token after the refusal"
    );
    assert!(daemon.logs().contains("refused the cached access token"));
    assert_no_secret_shown(&daemon, &idp, &[SEED_REFRESH_TOKEN]).await;
    daemon.stop();
}

/// An RSA key pair made with the openssl CLI: the PKCS#8 PEM and the public half (PKCS#1 DER).
fn rsa_key(dir: &std::path::Path) -> (String, Vec<u8>) {
    let key = dir.join("sa-key.pem");
    let public = dir.join("sa-public.der");
    let run = |args: &[&str]| {
        let status = std::process::Command::new("openssl")
            .args(args)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("openssl");
        assert!(status.success(), "openssl {args:?}");
    };
    run(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        key.to_str().expect("path"),
    ]);
    run(&[
        "rsa",
        "-in",
        key.to_str().expect("path"),
        "-RSAPublicKey_out",
        "-outform",
        "DER",
        "-out",
        public.to_str().expect("path"),
    ]);
    (
        std::fs::read_to_string(key).expect("key"),
        std::fs::read(public).expect("public key"),
    )
}

#[tokio::test]
async fn microsoft_client_credentials_and_a_google_service_account_read_mail_end_to_end() {
    if !available() {
        return;
    }
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let idp = Idp::start().await;
    let dovecot = OAuthDovecot::start(&idp.introspection_url());
    let mut client = dovecot.client().await;
    let (ms, ms_box) = (unique("m365"), unique("box"));
    let (google, google_box) = (unique("gws"), unique("box"));
    create(&mut client, &ms_box).await;
    create(&mut client, &google_box).await;

    let (private_key, public_key) = rsa_key(db.dir.path());
    idp.state.lock().expect("idp state").service_account_key = Some(public_key);
    let key_file = db.dir.path().join("service-account.json");
    let key_json = serde_json::json!({
        "type": "service_account",
        "project_id": "switchyard-test",
        "private_key_id": "k1",
        "private_key": private_key,
        "client_email": SA_EMAIL,
        "token_uri": idp.url("/token"),
    });
    std::fs::write(&key_file, key_json.to_string()).expect("write key file");

    let ms_table = format!(
        "flow = \"microsoft_client_credentials\"\nauthority = \"{}\"\ntenant_id = \"{MS_TENANT}\"\n\
         client_id = \"{CLIENT_ID}\"\nclient_secret_env = \"M365_CLIENT_SECRET\"\n",
        idp.url("")
    );
    let google_table = format!(
        "flow = \"google_service_account\"\nservice_account_key_file = \"{}\"\nmechanism = \"oauthbearer\"\n",
        key_file.display()
    );
    let text = config(
        &db,
        &format!(
            "{}{}{TRIAGE}",
            oauth_source(&dovecot, &ms, &ms_box, &ms_table),
            oauth_source(&dovecot, &google, &google_box, &google_table),
        ),
    );
    let daemon = Daemon::start(&db, &text, &[("M365_CLIENT_SECRET", CLIENT_SECRET)]).await;
    append(&mut client, &ms_box, &message("m365", 1, "")).await;
    append(&mut client, &google_box, &message("gws", 1, "")).await;
    let ms_rows = wait_for_rows(&daemon, &ms, 1, Duration::from_secs(30)).await;
    let google_rows = wait_for_rows(&daemon, &google, 1, Duration::from_secs(30)).await;
    assert_eq!(outcomes(&ms_rows), ["routed"]);
    assert_eq!(outcomes(&google_rows), ["routed"]);
    let grants = idp.grants();
    let rejections = idp.state.lock().expect("idp state").rejections.clone();
    assert!(rejections.is_empty(), "{rejections:?}");
    let ms_grant = grants
        .iter()
        .find(|g| g.grant_type == "client_credentials")
        .expect("a client_credentials grant");
    let sa_grant = grants
        .iter()
        .find(|g| g.grant_type == "urn:ietf:params:oauth:grant-type:jwt-bearer")
        .expect("a jwt-bearer grant");
    assert!(idp.accepted_at_imap(ms_grant.issued.as_deref().expect("issued")));
    assert!(idp.accepted_at_imap(sa_grant.issued.as_deref().expect("issued")));
    let log = dovecot.log();
    assert!(log.contains("method=XOAUTH2"), "{log}");
    assert!(log.contains("method=OAUTHBEARER"), "{log}");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        daemon.intake(&format!("source={ms}&limit=100")).await.len(),
        1
    );
    assert_eq!(
        daemon
            .intake(&format!("source={google}&limit=100"))
            .await
            .len(),
        1
    );
    assert_no_secret_shown(&daemon, &idp, &[&private_key[40..80]]).await;
    daemon.stop();
}

#[tokio::test]
async fn a_microsoft_certificate_credential_signs_an_assertion_the_endpoint_verifies() {
    if !available() {
        return;
    }
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let idp = Idp::start().await;
    let dovecot = OAuthDovecot::start(&idp.introspection_url());
    let mut client = dovecot.client().await;
    let (source, mailbox) = (unique("m365-cert"), unique("box"));
    create(&mut client, &mailbox).await;
    // The app's certificate and key, made with the openssl CLI.
    let dir = db.dir.path();
    let (cert, key) = (dir.join("app.pem"), dir.join("app.key"));
    let run = |args: &[&str]| {
        let output = std::process::Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl");
        assert!(output.status.success(), "openssl {args:?}");
        output.stdout
    };
    let path = |p: &std::path::Path| p.to_str().expect("path").to_owned();
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=switchyard-app",
        "-keyout",
        &path(&key),
        "-out",
        &path(&cert),
    ]);
    let certificate = run(&["x509", "-in", &path(&cert), "-outform", "DER"]);
    let public = run(&[
        "rsa",
        "-in",
        &path(&key),
        "-RSAPublicKey_out",
        "-outform",
        "DER",
    ]);
    idp.state.lock().expect("idp state").app_certificate = Some((public, certificate));
    let table = format!(
        "flow = \"microsoft_client_credentials\"\nauthority = \"{}\"\ntenant_id = \"{MS_TENANT}\"\n\
         client_id = \"{CLIENT_ID}\"\ncertificate_file = \"{}\"\nprivate_key_file = \"{}\"\n",
        idp.url(""),
        cert.display(),
        key.display()
    );
    let text = config(
        &db,
        &format!(
            "{}{TRIAGE}",
            oauth_source(&dovecot, &source, &mailbox, &table)
        ),
    );
    let daemon = Daemon::start(&db, &text, &[]).await;
    append(&mut client, &mailbox, &message("cert", 1, "")).await;
    let rows = wait_for_rows(&daemon, &source, 1, Duration::from_secs(30)).await;
    assert_eq!(outcomes(&rows), ["routed"]);
    let rejections = idp.state.lock().expect("idp state").rejections.clone();
    assert!(rejections.is_empty(), "{rejections:?}");
    let grant = idp
        .grants()
        .into_iter()
        .find(|g| g.issued.is_some())
        .expect("a token");
    assert_eq!(grant.grant_type, "client_credentials");
    assert!(idp.accepted_at_imap(grant.issued.as_deref().expect("issued")));
    daemon.stop();
}

#[tokio::test]
async fn a_token_that_expires_mid_idle_is_replaced_once_and_later_mail_still_arrives() {
    if !available() {
        return;
    }
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let idp = Idp::start().await;
    // Renewed a quarter of its life (2.5 s) before it expires.
    idp.state.lock().expect("idp state").lifetime = Duration::from_secs(10);
    idp.add_refresh_token(SEED_REFRESH_TOKEN, CLIENT_ID);
    let dovecot = OAuthDovecot::start(&idp.introspection_url());
    let mut client = dovecot.client().await;
    let (source, mailbox) = (unique("idle"), unique("box"));
    create(&mut client, &mailbox).await;
    let text = config(
        &db,
        &format!(
            "{}{TRIAGE}",
            oauth_source(
                &dovecot,
                &source,
                &mailbox,
                &refresh_table(&idp, "SECRET", "REFRESH")
            )
        ),
    );
    let daemon = Daemon::start(
        &db,
        &text,
        &[("SECRET", CLIENT_SECRET), ("REFRESH", SEED_REFRESH_TOKEN)],
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while status(&daemon, &source).await["idle"] != true {
        assert!(tokio::time::Instant::now() < deadline, "{}", daemon.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first_grant = tokio::time::Instant::now();
    assert_eq!(idp.grants().len(), 1);
    // Past the first token's expiry (10 s), before the second one's renewal (~15 s).
    tokio::time::sleep_until(first_grant + Duration::from_millis(10_500)).await;
    append(&mut client, &mailbox, &message("idle", 1, "")).await;
    let rows = wait_for_rows(&daemon, &source, 1, Duration::from_secs(4)).await;
    assert_eq!(outcomes(&rows), ["routed"]);
    let grants = idp.grants();
    assert_eq!(grants.len(), 2, "exactly one refresh so far: {grants:?}");
    let second = grants[1].issued.clone().expect("issued");
    assert!(idp.accepted_at_imap(&second), "the new token signed in");
    assert_eq!(status(&daemon, &source).await["consecutive_failures"], 0);
    daemon.stop();
}

#[tokio::test]
async fn refusals_are_named_in_readyz_metrics_and_the_log_once_without_secrets() {
    if !available() {
        return;
    }
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let idp = Idp::start().await;
    idp.add_refresh_token(SEED_REFRESH_TOKEN, CLIENT_ID);
    idp.add_refresh_token("rt-refused-at-imap", "refused-app");
    idp.state
        .lock()
        .expect("idp state")
        .refused_clients
        .insert("refused-app".into());
    idp.state
        .lock()
        .expect("idp state")
        .unconsented_tenants
        .insert("fabrikam".into());
    let dovecot = OAuthDovecot::start(&idp.introspection_url());
    let mut client = dovecot.client().await;
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let names = [
        "wrong-secret",
        "revoked",
        "down",
        "slow",
        "imap-refuses",
        "no-consent",
        "healthy",
    ];
    let boxes: Vec<String> = names.iter().map(|_| unique("box")).collect();
    for mailbox in &boxes {
        create(&mut client, mailbox).await;
    }
    let table = |token_url: String, secret_env: &str, refresh_env: &str, client: &str| {
        format!(
            "flow = \"refresh_token\"\ntoken_url = \"{token_url}\"\nclient_id = \"{client}\"\n\
             client_secret_env = \"{secret_env}\"\nrefresh_token_env = \"{refresh_env}\"\n\
             token_timeout = \"1s\"\n"
        )
    };
    let tables = [
        table(idp.url("/token"), "WRONG_SECRET", "GOOD_REFRESH", CLIENT_ID),
        table(
            idp.url("/token"),
            "GOOD_SECRET",
            "REVOKED_REFRESH",
            CLIENT_ID,
        ),
        table(
            format!("http://127.0.0.1:{closed_port}/token"),
            "GOOD_SECRET",
            "GOOD_REFRESH",
            CLIENT_ID,
        ),
        table(
            idp.url("/slow/token"),
            "GOOD_SECRET",
            "GOOD_REFRESH",
            CLIENT_ID,
        ),
        table(
            idp.url("/token"),
            "GOOD_SECRET",
            "REFUSED_REFRESH",
            "refused-app",
        ),
        format!(
            "flow = \"microsoft_client_credentials\"\nauthority = \"{}\"\ntenant_id = \"fabrikam\"\n\
             client_id = \"{CLIENT_ID}\"\nclient_secret_env = \"GOOD_SECRET\"\n",
            idp.url("")
        ),
        table(idp.url("/token"), "GOOD_SECRET", "GOOD_REFRESH", CLIENT_ID),
    ];
    let sources: String = names
        .iter()
        .zip(&boxes)
        .zip(&tables)
        .map(|((name, mailbox), table)| oauth_source(&dovecot, name, mailbox, table))
        .collect();
    let text = config(&db, &format!("{sources}{TRIAGE}"));
    let wrong_secret = "wrong-client-secret-77d1";
    let daemon = Daemon::start(
        &db,
        &text,
        &[
            ("WRONG_SECRET", wrong_secret),
            ("GOOD_SECRET", CLIENT_SECRET),
            ("GOOD_REFRESH", SEED_REFRESH_TOKEN),
            ("REVOKED_REFRESH", "rt-revoked-0000"),
            ("REFUSED_REFRESH", "rt-refused-at-imap"),
        ],
    )
    .await;
    // Other intake is unaffected.
    append(&mut client, &boxes[6], &message("healthy", 1, "")).await;
    wait_for_rows(&daemon, "healthy", 1, Duration::from_secs(30)).await;

    let expected = [
        (
            "wrong-secret",
            "invalid_client",
            "The OAuth client was not found.",
        ),
        (
            "revoked",
            "invalid_grant",
            "Token has been expired or revoked.",
        ),
        ("down", "token_endpoint_unreachable", "unreachable"),
        ("slow", "token_endpoint_timeout", "did not answer within 1s"),
        (
            "imap-refuses",
            "imap_refused_token",
            "refused the OAuth2 token",
        ),
        ("no-consent", "consent_missing", "AADSTS65001"),
    ];
    let readyz = || async {
        let response = daemon
            .client()
            .get(daemon.url("/readyz"))
            .bearer_auth(super::harness::TOKEN)
            .send()
            .await
            .expect("readyz");
        (
            response.status().as_u16(),
            response.json::<Value>().await.expect("json"),
        )
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let body = loop {
        let (code, body) = readyz().await;
        let all_named = expected.iter().all(|(name, _, _)| {
            body["unhealthy_sources"]
                .as_array()
                .is_some_and(|u| u.iter().any(|s| s == name))
        });
        if code == 503 && all_named {
            break body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not every refusal became unhealthy: {body:#}\n{}",
            daemon.logs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    for (name, kind, detail) in expected {
        let status = &body["sources"][name];
        assert_eq!(status["auth_failure"], kind, "{name}: {status:#}");
        let error = status["last_error"].as_str().unwrap_or_default();
        assert!(error.contains(detail), "{name}: {error}");
    }
    assert!(body["sources"]["healthy"]["auth_failure"].is_null());
    let metrics = daemon.metrics().await;
    for (name, kind, _) in expected {
        assert!(
            metrics.contains(&format!(
                "switchyard_mailbox_auth_failing{{source=\"{name}\",reason=\"{kind}\"}} 1"
            )),
            "{name}: {metrics}"
        );
    }
    // A failure is logged when it starts, not on every retry.
    let logs = daemon.logs();
    for (name, _, _) in expected {
        let lines = logs
            .lines()
            .filter(|l| {
                l.contains("cannot sign in with OAuth2")
                    && l.contains(&format!("\"source\":\"{name}\""))
            })
            .count();
        assert_eq!(lines, 1, "{name} logged {lines} times:\n{logs}");
    }
    // The IMAP refusal never loops: at most one token per failed sign-in, and one more.
    let refused = idp.grants_of("refused-app");
    let failures = body["sources"]["imap-refuses"]["consecutive_failures"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        refused as u64 <= failures + 2,
        "{refused} tokens for {failures} failures"
    );
    assert_no_secret_shown(
        &daemon,
        &idp,
        &[wrong_secret, "rt-revoked-0000", "rt-refused-at-imap"],
    )
    .await;
    daemon.stop();
}

/// `switchyard <args>` with `env`: (success, stdout, stderr). Run off the test's runtime,
/// which serves the identity provider meanwhile.
async fn cli(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut command = std::process::Command::new(super::harness::binary());
    command
        .args(args)
        .env("SWITCHYARD_API_TOKEN", super::harness::TOKEN);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("join")
        .expect("run switchyard");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn mailbox_test_signs_in_once_names_the_failing_step_and_check_validates_the_table() {
    if !available() {
        return;
    }
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let idp = Idp::start().await;
    idp.state.lock().expect("idp state").rotate = true;
    idp.add_refresh_token(SEED_REFRESH_TOKEN, CLIENT_ID);
    idp.add_refresh_token("rt-refused-at-imap", "refused-app");
    idp.state
        .lock()
        .expect("idp state")
        .refused_clients
        .insert("refused-app".into());
    let dovecot = OAuthDovecot::start(&idp.introspection_url());
    let mut client = dovecot.client().await;
    let (source, mailbox) = (unique("cli"), unique("box"));
    create(&mut client, &mailbox).await;
    append(&mut client, &mailbox, &message("cli", 1, "")).await;
    append(&mut client, &mailbox, &message("cli", 2, "")).await;
    let refused_table = refresh_table(&idp, "SECRET", "REFUSED_REFRESH").replace(
        &format!("client_id = \"{CLIENT_ID}\""),
        "client_id = \"refused-app\"",
    );
    let text = config(
        &db,
        &format!(
            "{}{}{TRIAGE}",
            oauth_source(
                &dovecot,
                &source,
                &mailbox,
                &refresh_table(&idp, "SECRET", "REFRESH")
            ),
            oauth_source(&dovecot, "refused", &mailbox, &refused_table),
        ),
    );
    let path = db.dir.path().join("cli.toml");
    std::fs::write(&path, &text).expect("write config");
    let path = path.to_str().expect("path");
    let env = [
        ("SECRET", CLIENT_SECRET),
        ("REFRESH", SEED_REFRESH_TOKEN),
        ("REFUSED_REFRESH", "rt-refused-at-imap"),
    ];
    let (ok, out, err) = cli(&["migrate", "--config", path], &env).await;
    assert!(ok, "{out}{err}");

    let (ok, out, err) = cli(
        &["mailbox", "test", "--config", path, "--source", &source],
        &env,
    )
    .await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("2 messages"), "{out}");
    assert!(out.contains("UIDVALIDITY"), "{out}");
    assert!(out.contains("sign-in: ok (XOAUTH2)"), "{out}");
    assert!(out.contains("\"beginning\" would take 2 messages"), "{out}");
    assert_eq!(idp.grants().len(), 1);

    // The provider rotated the refresh token during the test and revoked the seed: the
    // daemon still signs in, with the rotated one the test kept.
    let daemon = Daemon::start_with_file(std::path::Path::new(path), &env).await;
    wait_for_rows(&daemon, &source, 2, Duration::from_secs(30)).await;
    assert!(
        idp.grants()
            .iter()
            .filter(|g| g.client_id.as_deref() == Some(CLIENT_ID))
            .all(|g| g.issued.is_some())
    );
    daemon.stop();

    let wrong = [
        ("SECRET", "not-the-secret-5e1"),
        ("REFRESH", SEED_REFRESH_TOKEN),
        ("REFUSED_REFRESH", "x"),
    ];
    let (ok, out, err) = cli(
        &["mailbox", "test", "--config", path, "--source", &source],
        &wrong,
    )
    .await;
    assert!(!ok, "{out}");
    assert!(err.contains("step `token` failed"), "{err}");
    assert!(err.contains("invalid_client"), "{err}");
    assert!(!err.contains("not-the-secret-5e1") && !out.contains("not-the-secret-5e1"));

    let (ok, out, err) = cli(
        &["mailbox", "test", "--config", path, "--source", "refused"],
        &env,
    )
    .await;
    assert!(!ok, "{out}");
    assert!(err.contains("step `sign-in` failed"), "{err}");
    assert!(err.contains("refused the OAuth2 token"), "{err}");

    // `check` validates the table.
    let broken = text.replace("refresh_token_env = \"REFRESH\"\n", "");
    let broken_path = db.dir.path().join("broken.toml");
    std::fs::write(&broken_path, broken).expect("write");
    let (ok, out, err) = cli(
        &["check", "--config", broken_path.to_str().expect("path")],
        &env,
    )
    .await;
    assert!(!ok, "{out}{err}");
    assert!(
        format!("{out}{err}")
            .contains("`oauth2.refresh_token_env` is required for flow `refresh_token`"),
        "{out}{err}"
    );
    let unset = [("SECRET", CLIENT_SECRET), ("REFUSED_REFRESH", "x")];
    let (ok, out, err) = cli(&["check", "--config", path], &unset).await;
    assert!(!ok, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("`REFRESH` is not set"),
        "{out}{err}"
    );
}
