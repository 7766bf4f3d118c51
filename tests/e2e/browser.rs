//! The console in a real browser: headless Chromium (Debian's `chromium` and
//! `chromium-driver`) driven over WebDriver by fantoccini. The issue's scenario: log in; a
//! signed Zendesk webhook and a second event on the same ticket; find the ticket by entity id;
//! open the second delivery and read `entity_locked` with the holder; follow the link to the
//! run; finish it; a third event now routes. Every page is saved as a screenshot under
//! `target/console-screenshots/`, at 1280 px and at phone width.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{SecondsFormat, Utc};
use fantoccini::{Client, ClientBuilder, Locator};
use reqwest::StatusCode;
use serde_json::{Value, json};
use switchyard_webhook::{SIGNATURE_HEADER, TIMESTAMP_HEADER, sign};

use super::access::{TOKEN_ENV, TOKENS};
use super::console::CONSOLE_WORKFLOWS;
use super::harness::{Daemon, TestDb, in_ci, skipped};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const SECRET: (&str, &str) = ("ZENDESK_ACME_SECRET", "zendesk-acme-signing-secret");
const SOURCE: &str = r#"
[[source]]
kind = "webhook"
name = "zendesk-acme"
tenant = "acme"
signing_secret_env = "ZENDESK_ACME_SECRET"
account_id = 22129848
"#;
const TICKET_CREATED: &str =
    include_str!("../../adapters/webhook/tests/fixtures/ticket_created.json");

/// chromedriver on a free loopback port, stopped on drop.
pub(super) struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    pub(super) fn start() -> Option<Driver> {
        if !std::path::Path::new(CHROMEDRIVER).exists() || !std::path::Path::new(CHROMIUM).exists()
        {
            assert!(
                !in_ci(),
                "CI=true but {CHROMEDRIVER} or {CHROMIUM} is missing"
            );
            skipped("SKIPPED: the browser test needs Debian's chromium and chromium-driver");
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not listen in 20 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(Driver { child, port })
    }

    pub(super) async fn browser(&self) -> Client {
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": CHROMIUM,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,900",
                         "--force-device-scale-factor=1", "--lang=en-US"],
            }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("a chromium session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn screenshots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/console-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    dir
}

/// Every table of the page fits its box: none scrolls sideways inside it.
async fn assert_tables_fit(browser: &Client, width: &str) {
    let sideways = browser
        .execute(
            "return Array.from(document.querySelectorAll('.table-wrap'), w => w.scrollWidth - w.clientWidth);",
            vec![],
        )
        .await
        .expect("measure");
    let sideways: Vec<i64> = sideways
        .as_array()
        .map(|a| a.iter().filter_map(serde_json::Value::as_i64).collect())
        .unwrap_or_default();
    assert!(!sideways.is_empty(), "no table at {width}");
    assert!(
        sideways.iter().all(|s| *s <= 0),
        "a table scrolls sideways at {width} by {sideways:?} px"
    );
}

pub(super) async fn shoot(browser: &Client, name: &str) {
    let png = browser.screenshot().await.expect("screenshot");
    std::fs::write(screenshots().join(format!("{name}.png")), png).expect("save screenshot");
}

/// A signed Zendesk `ticket.created` about `ticket`, sent as Zendesk would.
async fn webhook(daemon: &Daemon, event_id: &str, ticket: &str) -> Value {
    let mut body: Value = serde_json::from_str(TICKET_CREATED).expect("fixture");
    body["id"] = json!(event_id);
    body["detail"]["id"] = json!(ticket);
    body["subject"] = json!(format!("zen:ticket:{ticket}"));
    let body = serde_json::to_vec(&body).expect("body");
    let timestamp = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
    let signature = sign(SECRET.1.as_bytes(), &timestamp, &body);
    let response = daemon
        .client()
        .post(daemon.url("/v1/ingest/webhook/zendesk-acme"))
        .header("content-type", "application/json")
        .header(SIGNATURE_HEADER, signature)
        .header(TIMESTAMP_HEADER, timestamp)
        .body(body)
        .send()
        .await
        .expect("POST webhook");
    let (status, answer) = super::harness::read(response).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer
}

async fn text(browser: &Client) -> String {
    browser
        .find(Locator::Css("main"))
        .await
        .expect("main")
        .text()
        .await
        .expect("text")
}

#[tokio::test]
async fn an_operator_finds_why_a_ticket_did_not_run_and_frees_it() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let Some(db) = TestDb::create(super::harness::Backend::Sqlite).await else {
        return;
    };
    let mut env = TOKEN_ENV.to_vec();
    env.push(SECRET);
    let text_config =
        super::harness::config(&db, &format!("{SOURCE}\n{TOKENS}\n{CONSOLE_WORKFLOWS}"));
    let daemon = Daemon::start(&db, &text_config, &env).await;
    let browser = driver.browser().await;
    let url = |path: &str| daemon.url(path);

    // Log in.
    browser.goto(&url("/ui/login")).await.expect("login page");
    shoot(&browser, "01-login").await;
    browser
        .find(Locator::Id("token"))
        .await
        .expect("token field")
        .send_keys("root-token-secret")
        .await
        .expect("type token");
    browser
        .find(Locator::Css("form.card button[type=submit]"))
        .await
        .expect("login button")
        .click()
        .await
        .expect("log in");
    browser
        .wait()
        .for_element(Locator::Css("form.filters"))
        .await
        .expect("deliveries page");

    // A signed webhook, then a second event on the same ticket.
    let ticket = format!(
        "{}",
        70_000 + (Utc::now().timestamp_subsec_micros() % 20_000)
    );
    let first = webhook(&daemon, &uuid::Uuid::now_v7().to_string(), &ticket).await;
    assert_eq!(first["outcome"], "routed", "{first}");
    let holder = first["run_id"].as_str().expect("run id").to_owned();
    let second = webhook(&daemon, &uuid::Uuid::now_v7().to_string(), &ticket).await;
    assert_eq!(second["outcome"], "entity_locked", "{second}");

    // Find the ticket by entity id.
    let entity = browser
        .find(Locator::Css("input[name=entity]"))
        .await
        .expect("entity filter");
    entity.send_keys(&ticket).await.expect("type ticket");
    browser
        .find(Locator::Css("form.filters button[type=submit]"))
        .await
        .expect("search")
        .click()
        .await
        .expect("search");
    // The list was empty before the search; the locked row appears with its results.
    browser
        .wait()
        .for_element(Locator::XPath(
            "//tr[.//span[normalize-space()='entity_locked']]",
        ))
        .await
        .expect("search results");
    let found = text(&browser).await;
    assert!(
        found.contains("entity_locked") && found.contains("routed"),
        "{found}"
    );
    shoot(&browser, "02-deliveries-by-entity").await;

    // Open the second delivery: entity_locked, with the holder.
    browser
        .find(Locator::XPath(
            "//tr[.//span[normalize-space()='entity_locked']]//td[1]/a",
        ))
        .await
        .expect("the entity_locked row")
        .click()
        .await
        .expect("open delivery");
    let why = browser
        .wait()
        .for_element(Locator::Css("section.verdict h1"))
        .await
        .expect("verdict")
        .text()
        .await
        .expect("verdict text");
    assert!(
        why.contains(&format!(
            "entity_locked: run {holder} of workflow triage holds {ticket} until"
        )),
        "{why}"
    );
    shoot(&browser, "03-delivery-entity-locked").await;

    // Follow the link to the holder run and finish it.
    browser
        .find(Locator::XPath(
            "//a[starts-with(normalize-space(), 'Open holder run')]",
        ))
        .await
        .expect("holder link")
        .click()
        .await
        .expect("open run");
    browser
        .wait()
        .for_element(Locator::XPath(
            "//a[normalize-space()='Finish as completed']",
        ))
        .await
        .expect("finish link");
    assert!(text(&browser).await.contains(&format!("run {holder}")));
    shoot(&browser, "04-run-before-finish").await;
    // Finishing asks first, and says what it will do.
    browser
        .find(Locator::XPath(
            "//a[normalize-space()='Finish as completed']",
        ))
        .await
        .expect("finish link")
        .click()
        .await
        .expect("finish");
    let confirm = browser
        .wait()
        .for_element(Locator::Css("section.confirm"))
        .await
        .expect("confirmation")
        .text()
        .await
        .expect("confirmation text");
    assert!(
        confirm.contains("Finish this run as completed?") && confirm.contains("by token:root"),
        "{confirm}"
    );
    shoot(&browser, "04b-confirm-finish").await;
    browser
        .find(Locator::XPath(
            "//button[normalize-space()='Finish as completed']",
        ))
        .await
        .expect("finish button")
        .click()
        .await
        .expect("finish");
    let notice = browser
        .wait()
        .for_element(Locator::Css("p.notice"))
        .await
        .expect("notice")
        .text()
        .await
        .expect("notice text");
    assert!(notice.contains("Run finished as completed"), "{notice}");
    shoot(&browser, "05-run-finished").await;
    assert_eq!(
        daemon.get(&format!("/v1/runs/{holder}")).await["status"],
        "completed"
    );

    // A third event on the ticket now routes, and the deliveries page shows it.
    let third = webhook(&daemon, &uuid::Uuid::now_v7().to_string(), &ticket).await;
    assert_eq!(third["outcome"], "routed", "{third}");
    browser
        .goto(&url(&format!("/ui/deliveries?entity={ticket}")))
        .await
        .expect("deliveries");
    let first_row = browser
        .find(Locator::Css("tbody tr:first-child td:nth-child(2)"))
        .await
        .expect("newest row")
        .text()
        .await
        .expect("text");
    assert_eq!(first_row.trim(), "routed");
    // The chart, its counts and the reason column, and a table that fits 1,280 px.
    let page = text(&browser).await;
    assert!(page.contains("Deliveries per minute"), "{page}");
    assert!(page.contains("entity_locked 1"), "{page}");
    browser
        .find(Locator::Css("svg.chart rect"))
        .await
        .expect("a bar in the chart");
    let reason = browser
        .find(Locator::Css("tbody tr:nth-child(2) td.reason"))
        .await
        .expect("reason cell")
        .text()
        .await
        .expect("reason");
    assert!(!reason.trim().is_empty(), "the routed row says why");
    let sideways = browser
        .execute(
            "const w = document.querySelector('.table-wrap'); return w.scrollWidth - w.clientWidth;",
            vec![],
        )
        .await
        .expect("measure");
    assert!(
        sideways.as_i64().unwrap_or(0) <= 0,
        "the deliveries table scrolls sideways at 1280 px by {sideways}px"
    );
    shoot(&browser, "06-deliveries-third-routed").await;

    // Re-admit the entity_locked delivery: confirm, then the live replay of one, linked both
    // ways.
    browser
        .goto(&url(&format!(
            "/ui/deliveries/{}",
            second["intake_id"].as_str().unwrap_or("")
        )))
        .await
        .expect("delivery");
    browser
        .find(Locator::XPath(
            "//a[normalize-space()='Re-admit this delivery…']",
        ))
        .await
        .expect("re-admit link")
        .click()
        .await
        .expect("re-admit");
    let confirm = browser
        .wait()
        .for_element(Locator::Css("section.confirm"))
        .await
        .expect("confirmation")
        .text()
        .await
        .expect("text");
    assert!(confirm.contains("Re-admit 1 delivery?"), "{confirm}");
    shoot(&browser, "06b-confirm-readmit").await;
    browser
        .find(Locator::XPath(
            "//button[normalize-space()='Re-admit 1 delivery']",
        ))
        .await
        .expect("re-admit button")
        .click()
        .await
        .expect("re-admit");
    browser
        .wait()
        .for_element(Locator::Css("dl.facts"))
        .await
        .expect("the replay page");
    // The replay runs in the background: reload until it took the delivery.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let page = text(&browser).await;
        if page.contains("re-admitted as") {
            break;
        }
        assert!(Instant::now() < deadline, "{page}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        browser.refresh().await.expect("reload");
    }
    shoot(&browser, "06c-replay-of-one").await;
    browser
        .find(Locator::XPath(
            "//a[starts-with(normalize-space(), 'source delivery')]",
        ))
        .await
        .expect("source link")
        .click()
        .await
        .expect("open source");
    browser
        .wait()
        .for_element(Locator::Css("ul.replays-of"))
        .await
        .expect("the original lists its re-admission");
    shoot(&browser, "06d-delivery-readmitted").await;

    // The other pages, at desktop width and on a phone.
    for (name, path) in [
        ("07-runs", "/ui/runs".to_owned()),
        ("08-locks", "/ui/locks".to_owned()),
        ("09-workflows", "/ui/workflows".to_owned()),
        ("10-sources", "/ui/sources".to_owned()),
        (
            "11-delivery-routed",
            format!(
                "/ui/deliveries/{}",
                third["intake_id"].as_str().unwrap_or("")
            ),
        ),
    ] {
        browser.goto(&url(&path)).await.expect("page");
        let body = text(&browser).await;
        assert!(!body.contains("could not be rendered"), "{path}: {body}");
        if path == "/ui/sources" || path == "/ui/workflows" {
            assert_tables_fit(&browser, "1280 px").await;
        }
        shoot(&browser, name).await;
    }
    browser
        .goto(&url("/ui/deliveries?auto=on"))
        .await
        .expect("deliveries");
    shoot(&browser, "11b-deliveries-auto-refresh").await;
    // At 800 px: the page does not scroll sideways.
    browser.set_window_size(800, 900).await.expect("800 px");
    for (name, path) in [
        (
            "12a-800-deliveries",
            format!("/ui/deliveries?entity={ticket}"),
        ),
        ("12b-800-workflows", "/ui/workflows".to_owned()),
        ("12c-800-sources", "/ui/sources".to_owned()),
    ] {
        browser.goto(&url(&path)).await.expect("page");
        let overflow = browser
            .execute(
                "return document.documentElement.scrollWidth - window.innerWidth;",
                vec![],
            )
            .await
            .expect("measure");
        assert!(
            overflow.as_i64().unwrap_or(0) <= 0,
            "{path} overflows 800 px by {overflow}px"
        );
        if path == "/ui/sources" || path == "/ui/workflows" {
            assert_tables_fit(&browser, "800 px").await;
        }
        shoot(&browser, name).await;
    }
    browser
        .set_window_size(390, 844)
        .await
        .expect("phone width");
    for (name, path) in [
        (
            "12-phone-deliveries",
            format!("/ui/deliveries?entity={ticket}"),
        ),
        (
            "13-phone-delivery",
            format!(
                "/ui/deliveries/{}",
                second["intake_id"].as_str().unwrap_or("")
            ),
        ),
        ("14-phone-run", format!("/ui/runs/{holder}")),
    ] {
        browser.goto(&url(&path)).await.expect("page");
        // Nothing wider than the phone: the page scrolls inside tables, not sideways.
        let overflow = browser
            .execute(
                "return document.documentElement.scrollWidth - window.innerWidth;",
                vec![],
            )
            .await
            .expect("measure");
        assert!(
            overflow.as_i64().unwrap_or(0) <= 0,
            "{path} overflows the phone by {overflow}px"
        );
        shoot(&browser, name).await;
    }
    browser.close().await.expect("close browser");
    daemon.stop();
}
