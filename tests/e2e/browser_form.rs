//! A real form in a real browser: headless Chromium (as the console's browser test drives it)
//! loads an HTML page this test serves, a person fills in the form and submits it to the
//! daemon, and the browser follows the 303 to the thank-you page; a bot that fills the
//! honeypot is sent there too but recorded `ineligible`; the same form served from a foreign
//! origin is refused 403 and recorded `unauthorized_source`. The ledger shows each, and the
//! console's Sources page shows the form's ingest URL and its last delivery.

use axum::response::Html;
use axum::routing::get;
use fantoccini::{Client, Locator};

use super::browser::{Driver, shoot};
use super::console::Console;
use super::harness::{Backend, Daemon, TestDb, config, serve_local};

/// The page with the form, posting to `action`.
fn page(action: &str) -> String {
    format!(
        r#"<!doctype html><html><head><title>Contact us</title></head><body>
<h1>Contact us</h1>
<form method="post" action="{action}">
  <label>Email <input id="email" name="email" type="email"></label>
  <label>Message <textarea id="message" name="message"></textarea></label>
  <div style="display:none"><label>Website <input id="website" name="website" tabindex="-1" autocomplete="off"></label></div>
  <button id="send" type="submit">Send</button>
</form></body></html>"#
    )
}

/// A site serving the form at `/` and a thank-you page at `/thanks`.
async fn site(action: String) -> std::net::SocketAddr {
    let app = axum::Router::new()
        .route("/", get(move || async move { Html(page(&action)) }))
        .route(
            "/thanks",
            get(|| async {
                Html("<!doctype html><title>Thanks</title><h1 id=\"thanks\">Thanks, we got it</h1>")
            }),
        );
    serve_local(app).await.0
}

async fn fill_and_send(browser: &Client, url: &str, email: &str, bot: bool) {
    browser.goto(url).await.expect("the form page");
    browser
        .find(Locator::Id("email"))
        .await
        .expect("email field")
        .send_keys(email)
        .await
        .expect("type email");
    browser
        .find(Locator::Id("message"))
        .await
        .expect("message field")
        .send_keys("My order has not arrived")
        .await
        .expect("type message");
    if bot {
        // What a bot does: fill every field it finds, hidden or not.
        browser
            .execute(
                "document.getElementById('website').value = 'http://spam.example';",
                vec![],
            )
            .await
            .expect("fill the honeypot");
    }
    browser
        .find(Locator::Id("send"))
        .await
        .expect("send button")
        .click()
        .await
        .expect("submit");
}

/// The page's text, or `None` while the page is between documents: a `body` found just before
/// the browser navigates is stale by the time its text is read, which is "not yet", not a failure.
async fn body_text(browser: &Client) -> Option<String> {
    let body = browser.find(Locator::Css("body")).await.ok()?;
    body.text().await.ok()
}

#[tokio::test]
async fn a_browser_submits_the_form_follows_the_303_and_refusals_are_recorded() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    // The daemon's address is known only once it listens, and its config names the site's
    // origin: start the site on a reserved port first, pointing at a daemon port chosen now.
    let daemon_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let action = format!("http://127.0.0.1:{daemon_port}/v1/ingest/web_form/contact");
    let good_site = site(action.clone()).await;
    let foreign_site = site(action).await;
    let origin = format!("http://{good_site}");
    let source = format!(
        r#"
[[source]]
kind = "web_form"
name = "contact"
tenant = "acme"
allowed_origins = ["{origin}"]
honeypot = "website"
target_entity_id = "{{/email}}"
payload = {{ email = "/email", message = "/message" }}
redirect = "{origin}/thanks"

[[workflow]]
id = "contact-request"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ {{ channel = "web_form", event_type = "form.submitted", priority = 100 }} ]

{tokens}
"#,
        tokens = super::access::TOKENS
    );
    let text = config(&db, &source).replace(
        "listen = \"127.0.0.1:0\"",
        &format!("listen = \"127.0.0.1:{daemon_port}\""),
    );
    let daemon = Daemon::start(&db, &text, &super::access::TOKEN_ENV).await;
    let browser = driver.browser().await;

    // A person.
    fill_and_send(&browser, &format!("{origin}/"), "ann@example.com", false).await;
    browser
        .wait()
        .for_element(Locator::Id("thanks"))
        .await
        .expect("the thank-you page");
    assert_eq!(
        browser.current_url().await.expect("url").as_str(),
        format!("{origin}/thanks")
    );
    shoot(&browser, "form-01-thanks").await;
    let rows = daemon.intake("source=contact").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["outcome"], "routed", "{rows:?}");
    assert_eq!(rows[0]["event"]["target_entity_id"], "ann@example.com");
    assert_eq!(
        rows[0]["event"]["payload"]["message"],
        "My order has not arrived"
    );

    // A bot: sent to the same thank-you page, recorded `ineligible`, no run.
    fill_and_send(&browser, &format!("{origin}/"), "bot@spam.example", true).await;
    browser
        .wait()
        .for_element(Locator::Id("thanks"))
        .await
        .expect("the bot sees the thank-you page too");
    let rows = daemon.intake("source=contact").await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0]["outcome"], "ineligible", "{rows:?}");
    assert!(
        rows[0]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("honeypot field `website`")),
        "{rows:?}"
    );

    // The same form on another origin: 403, recorded.
    fill_and_send(
        &browser,
        &format!("http://{foreign_site}/"),
        "eve@example.com",
        false,
    )
    .await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let refused = loop {
        let text = body_text(&browser).await;
        if let Some(text) = text.as_ref().filter(|t| t.contains("not accepted")) {
            break text.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no refusal page: {text:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(refused.contains("unauthorized_source"), "{refused}");
    shoot(&browser, "form-02-foreign-origin").await;
    let rows = daemon.intake("source=contact").await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows[0]["outcome"], "unauthorized_source", "{rows:?}");
    assert!(
        rows[0]["detail"]
            .as_str()
            .is_some_and(|d| d.contains(&format!("`http://{foreign_site}`"))),
        "{rows:?}"
    );
    assert_eq!(
        daemon.runs("").await.len(),
        1,
        "only the person's submission runs"
    );

    // The console's Sources page: the URL to paste, the last delivery.
    let console = Console::login(&daemon, "root-token-secret").await;
    let sources = console.page("/ui/sources").await;
    assert!(
        sources.contains(&format!(
            "http://127.0.0.1:{daemon_port}/v1/ingest/web_form/contact"
        )),
        "{sources}"
    );
    assert!(sources.contains("unauthorized_source"), "{sources}");
    browser.close().await.expect("close the browser");
    daemon.stop();
}
