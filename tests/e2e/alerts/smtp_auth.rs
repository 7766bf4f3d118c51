//! The email notifier's SMTP AUTH against the real Postfix of `.ci/smtp.sh` (Dovecot SASL,
//! offered after STARTTLS): with a wrong password (named by `password_env`) the notification
//! fails with Postfix's 535, visibly (`/readyz` and the console's Alerts page show the notifier
//! failing) and is retried; a daemon started on the same database with the right password
//! delivers that same notification once, authenticated, read back over IMAP from Dovecot.

use std::time::{Duration, Instant};

use super::super::console::Console;
use super::super::harness::{Backend, Daemon, TOKEN, TestDb, config, event, unique};
use super::{email_config, firing_alerts, mail_servers, mail_with};

#[tokio::test]
async fn a_wrong_smtp_password_fails_visibly_and_is_retried_and_the_right_one_delivers_authenticated()
 {
    let Some((smtp, imap, ca)) = mail_servers() else {
        return;
    };
    // The mail is read back from the shared Dovecot, which another test may stop.
    let _dovecot = super::super::email::shared().await;
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let (host, port) = smtp.split_once(':').expect("host:port");
    let rule = unique("mail-auth");
    let text = config(&db, &email_config(host, port, &rule, true));
    let env = |password: &'static str| {
        vec![
            ("ALERT_SMTP_CA", ca.clone()),
            ("ALERT_SMTP_USER", "support@example.com".to_owned()),
            ("ALERT_SMTP_PASSWORD", password.to_owned()),
        ]
    };
    let wrong = env("not-the-password");
    let wrong: Vec<(&str, &str)> = wrong.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let daemon = Daemon::start(&db, &text, &wrong).await;
    // One delivery, then quiet: the alert's `since` is stored, so the quiet outlives a restart.
    let (status, _) = daemon
        .post_event(
            &unique("once"),
            &event("web_form", "ticket.created", "acme", "t-1"),
        )
        .await;
    assert!(status.is_success());
    let listed = firing_alerts(&daemon).await;
    assert_eq!(listed.len(), 1, "{listed:?}");

    // Refused by Postfix, shown in /readyz, retried (failures in a row grow).
    let started = Instant::now();
    let ready = loop {
        let ready = daemon.get("/readyz").await;
        let failures = ready["notifiers"]["ops-email"]["consecutive_failures"]
            .as_u64()
            .unwrap_or(0);
        if failures >= 2 {
            break ready;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no retried failure: {ready}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(ready["notifiers"]["ops-email"]["ok"], false, "{ready}");
    assert_eq!(ready["failing_notifiers"], serde_json::json!(["ops-email"]));
    let error = ready["notifiers"]["ops-email"]["last_error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        error.contains("535") || error.to_lowercase().contains("authentication"),
        "the error says the sign-in was refused: {error}"
    );
    let console = Console::login(&daemon, TOKEN).await;
    let html = console.page("/ui/alerts").await;
    assert!(
        html.contains("ops-email") && html.contains("cannot deliver"),
        "the console shows the failing notifier: {html}"
    );
    assert!(mail_with(&imap, &rule).await.is_empty(), "nothing was sent");
    daemon.stop();

    // The right password: the same, durable notification is delivered once, authenticated.
    let right = env("secret");
    let right: Vec<(&str, &str)> = right.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let daemon = Daemon::start(&db, &text, &right).await;
    let started = Instant::now();
    let mails = loop {
        let mails = mail_with(&imap, &rule).await;
        if !mails.is_empty() {
            break mails;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no mail arrived; readyz: {}",
            daemon.get("/readyz").await
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mails = if mails.len() == 1 {
        mail_with(&imap, &rule).await
    } else {
        mails
    };
    assert_eq!(mails.len(), 1, "one mail per firing: {mails:?}");
    let mail = &mails[0];
    assert!(mail.contains(&format!("[FIRING] {rule}")), "{mail}");
    let listed = super::alerts(&daemon).await;
    assert_eq!(
        listed[0]["episode"], 1,
        "still the first firing: {listed:?}"
    );
    assert!(
        mail.contains("Authenticated sender: support@example.com"),
        "Postfix took it from the authenticated user: {mail}"
    );
    let ready = daemon.get("/readyz").await;
    assert_eq!(ready["notifiers"]["ops-email"]["ok"], true, "{ready}");
    daemon.stop();
}
