//! The operator console (`/ui`) over real HTTP with a real session cookie: every page and
//! filter, status codes and the words an operator relies on, hostile payload text rendered
//! inert, CSRF on every state change, a `read` token that cannot change anything and a
//! tenant-scoped token that never sees another tenant's delivery.

use reqwest::StatusCode;
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use serde_json::json;

use super::access::{TOKEN_ENV, TOKENS};
use super::harness::{Daemon, TestDb, config, run_id, unique};

pub const CONSOLE_WORKFLOWS: &str = r#"
[[workflow]]
id = "triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 100 } ]

[[workflow]]
id = "tagging"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 50 } ]

[[workflow]]
id = "experimental"
tenant = "acme"
status = "draft"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 1000 } ]

[[workflow]]
id = "globex-triage"
tenant = "globex"
status = "live"
run_as = "globex-agent"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 10 } ]
"#;

/// What a hostile sender puts in a payload.
const HOSTILE: &str = "<script>alert('pwned')</script><img src=x onerror=alert(1)>";

/// A logged-in browser without a browser: the session cookie and the page's CSRF token.
pub struct Console {
    client: reqwest::Client,
    base: String,
    cookie: String,
}

fn set_cookie(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(str::to_owned)
}

fn cookie_value(set_cookie: &str) -> String {
    set_cookie
        .split(';')
        .next()
        .and_then(|pair| pair.split_once('='))
        .map(|(_, v)| v.to_owned())
        .unwrap_or_default()
}

/// The value of the first hidden `csrf` field of a page.
pub fn csrf_of(html: &str) -> String {
    let marker = "name=\"csrf\" value=\"";
    html.find(marker)
        .map(|at| {
            let rest = &html[at + marker.len()..];
            rest[..rest.find('"').unwrap_or(0)].to_owned()
        })
        .unwrap_or_default()
}

impl Console {
    fn client() -> reqwest::Client {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client")
    }

    /// Logs in through the form; returns the status of the login POST and, on success, the
    /// console.
    pub async fn try_login(daemon: &Daemon, token: &str) -> (StatusCode, Option<Console>) {
        let client = Console::client();
        let form = client
            .get(daemon.url("/ui/login"))
            .send()
            .await
            .expect("GET /ui/login");
        assert_eq!(form.status(), StatusCode::OK);
        let login_cookie = set_cookie(&form, "sy_login").expect("login cookie");
        let html = form.text().await.expect("login page");
        let csrf = csrf_of(&html);
        let answer = client
            .post(daemon.url("/ui/login"))
            .header(COOKIE, format!("sy_login={}", cookie_value(&login_cookie)))
            .form(&[("token", token), ("csrf", csrf.as_str())])
            .send()
            .await
            .expect("POST /ui/login");
        let status = answer.status();
        let Some(session) = set_cookie(&answer, "sy_session") else {
            return (status, None);
        };
        for attribute in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
            assert!(session.contains(attribute), "{session}");
        }
        assert_eq!(
            answer.headers().get(LOCATION).and_then(|l| l.to_str().ok()),
            Some("/ui/deliveries")
        );
        let console = Console {
            client,
            base: format!("http://{}", daemon.addr),
            cookie: format!("sy_session={}", cookie_value(&session)),
        };
        (status, Some(console))
    }

    pub async fn login(daemon: &Daemon, token: &str) -> Console {
        let (status, console) = Console::try_login(daemon, token).await;
        console.unwrap_or_else(|| panic!("login with {token} refused: {status}"))
    }

    pub async fn get(&self, path: &str) -> (StatusCode, String) {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .header(COOKIE, &self.cookie)
            .send()
            .await
            .expect("GET");
        let status = response.status();
        (status, response.text().await.expect("body"))
    }

    /// A page that must answer 200.
    pub async fn page(&self, path: &str) -> String {
        let (status, html) = self.get(path).await;
        assert_eq!(status, StatusCode::OK, "GET {path}: {html}");
        html
    }

    pub async fn post(&self, path: &str, form: &[(&str, &str)]) -> (StatusCode, String) {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .header(COOKIE, &self.cookie)
            .form(form)
            .send()
            .await
            .expect("POST");
        let status = response.status();
        let location = response
            .headers()
            .get(LOCATION)
            .and_then(|l| l.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body = response.text().await.expect("body");
        (status, if location.is_empty() { body } else { location })
    }
}

async fn post(
    daemon: &Daemon,
    key: &str,
    tenant: &str,
    entity: &str,
    subject: &str,
) -> serde_json::Value {
    let (status, answer) = daemon
        .post_event(
            key,
            &json!({
                "channel": "webhook",
                "event_type": "ticket.created",
                "tenant_id": tenant,
                "target_entity_id": entity,
                "payload": {"subject": subject},
            }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer
}

fn intake_id(answer: &serde_json::Value) -> String {
    answer["intake_id"].as_str().expect("intake_id").to_owned()
}

#[tokio::test]
async fn every_page_and_filter_answers_and_a_finished_run_frees_its_ticket() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let text = config(&db, &format!("{TOKENS}\n{CONSOLE_WORKFLOWS}"));
        let daemon = Daemon::start(&db, &text, &TOKEN_ENV).await;
        let ticket = unique("TCK");
        let first_key = unique("first");
        let first = post(&daemon, &first_key, "acme", &ticket, "Printer on fire").await;
        let second = post(&daemon, &unique("second"), "acme", &ticket, HOSTILE).await;
        let globex = post(&daemon, &unique("g"), "globex", &unique("G"), "elsewhere").await;
        assert_eq!(second["outcome"], "entity_locked", "{backend:?}: {second}");
        let (holder, first_id, second_id) = (run_id(&first), intake_id(&first), intake_id(&second));

        // Not logged in: every page sends the browser to the login form.
        let anonymous = Console {
            client: Console::client(),
            base: format!("http://{}", daemon.addr),
            cookie: "sy_session=forged".into(),
        };
        for path in [
            "/ui/deliveries",
            "/ui/runs",
            "/ui/locks",
            "/ui/workflows",
            "/ui/sources",
            format!("/ui/deliveries/{first_id}").as_str(),
        ] {
            let response = anonymous
                .client
                .get(format!("{}{path}", anonymous.base))
                .send()
                .await
                .expect("GET");
            assert_eq!(response.status(), StatusCode::SEE_OTHER, "{path}");
            assert_eq!(
                response
                    .headers()
                    .get(LOCATION)
                    .and_then(|l| l.to_str().ok()),
                Some("/ui/login")
            );
        }
        assert_eq!(anonymous.get("/ui/runs").await.0, StatusCode::SEE_OTHER);
        // Wrong tokens at the door.
        assert_eq!(
            Console::try_login(&daemon, "nope").await.0,
            StatusCode::UNAUTHORIZED
        );
        let (status, refused) = Console::try_login(&daemon, "sender-token-secret").await;
        assert_eq!(
            (status, refused.is_none()),
            (StatusCode::FORBIDDEN, true),
            "no read scope"
        );
        // A login POST without the form's cookie (cross-site) is refused.
        let forged = Console::client()
            .post(daemon.url("/ui/login"))
            .form(&[("token", "root-token-secret"), ("csrf", "guess")])
            .send()
            .await
            .expect("POST");
        assert_eq!(forged.status(), StatusCode::FORBIDDEN);
        assert!(set_cookie(&forged, "sy_session").is_none());

        let ui = Console::login(&daemon, "root-token-secret").await;

        // Deliveries, newest first, and each filter.
        let list = ui.page("/ui/deliveries").await;
        for needle in [&first_id, &second_id, &intake_id(&globex), &ticket] {
            assert!(
                list.contains(needle.as_str()),
                "{backend:?}: {needle} in the list"
            );
        }
        assert!(list.find(&second_id) < list.find(&first_id), "newest first");
        assert!(
            list.contains("o-entity_locked\">entity_locked<"),
            "colour with its word"
        );
        let by_entity = ui.page(&format!("/ui/deliveries?entity={ticket}")).await;
        assert!(by_entity.contains(&first_id) && by_entity.contains(&second_id));
        assert!(!by_entity.contains(&intake_id(&globex)), "{backend:?}");
        let by_outcome = ui
            .page(&format!(
                "/ui/deliveries?entity={ticket}&outcome=entity_locked"
            ))
            .await;
        assert!(by_outcome.contains(&second_id) && !by_outcome.contains(&first_id));
        let by_delivery = ui
            .page(&format!("/ui/deliveries?delivery={first_key}"))
            .await;
        assert!(by_delivery.contains(&first_id) && !by_delivery.contains(&second_id));
        let by_tenant = ui.page("/ui/deliveries?tenant=globex").await;
        assert!(by_tenant.contains(&intake_id(&globex)) && !by_tenant.contains(&first_id));
        let by_source = ui.page("/ui/deliveries?source=zendesk").await;
        assert!(by_source.contains("No deliveries match"), "{backend:?}");
        let future = ui.page("/ui/deliveries?since=2999-01-01T00:00").await;
        assert!(future.contains("No deliveries match"));
        let past = ui
            .page(&format!(
                "/ui/deliveries?since=2000-01-01&until=2999-01-01&entity={ticket}"
            ))
            .await;
        assert!(past.contains(&first_id));
        assert_eq!(
            ui.get("/ui/deliveries?outcome=exploded").await.0,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            ui.get("/ui/deliveries?since=yesterday").await.0,
            StatusCode::BAD_REQUEST
        );
        // Cursor pagination: the page after the newest row holds the older ones.
        let older = ui
            .page(&format!(
                "/ui/deliveries?entity={ticket}&before={second_id}"
            ))
            .await;
        assert!(
            older.contains(&first_id) && !older.contains(&format!("/ui/deliveries/{second_id}"))
        );

        // One delivery: the outcome in words, the decision step by step, the holder.
        let locked = ui.page(&format!("/ui/deliveries/{second_id}")).await;
        assert!(
            locked.contains(&format!(
                "entity_locked: run {holder} of workflow triage holds {ticket} until "
            )),
            "{backend:?}: {locked}"
        );
        assert!(
            locked.contains(&format!("href=\"/ui/runs/{holder}\"")),
            "holder link"
        );
        assert!(
            locked.contains("draft: never matches a real event"),
            "the draft candidate"
        );
        assert!(locked.contains("won, but its entity was locked"));
        assert!(
            locked.contains("not tried: a higher priority won"),
            "tagging"
        );
        assert!(locked.contains("Normalised event"));
        // Hostile payload text is shown, inert.
        assert!(!locked.contains("<script>alert"), "{locked}");
        assert!(!locked.contains("<img src=x"), "{locked}");
        assert!(
            locked.contains("&#60;script&#62;alert("),
            "escaped: {locked}"
        );
        let revealed = ui
            .page(&format!("/ui/deliveries/{second_id}?reveal=raw"))
            .await;
        assert!(revealed.contains("bytes of application/json"), "{revealed}");
        assert!(!revealed.contains("<script>alert") && revealed.contains("&#60;script&#62;"));
        let routed = ui.page(&format!("/ui/deliveries/{first_id}")).await;
        assert!(routed.contains(&format!(
            "routed: run {holder} of workflow triage was created for {ticket}"
        )));
        assert!(routed.contains("Reveal raw bytes"));
        assert_eq!(
            ui.get("/ui/deliveries/00000000-0000-0000-0000-000000000000")
                .await
                .0,
            StatusCode::NOT_FOUND
        );

        // Runs and their filters, one run with lease and fencing token.
        let runs = ui.page("/ui/runs").await;
        assert!(runs.contains(&holder));
        assert!(ui.page("/ui/runs?status=queued").await.contains(&holder));
        assert!(!ui.page("/ui/runs?status=completed").await.contains(&holder));
        assert!(
            !ui.page("/ui/runs?workflow=globex-triage")
                .await
                .contains(&holder)
        );
        assert!(
            ui.page(&format!("/ui/runs?entity={ticket}"))
                .await
                .contains(&holder)
        );
        assert_eq!(
            ui.get("/ui/runs?status=sleeping").await.0,
            StatusCode::BAD_REQUEST
        );
        let run = ui.page(&format!("/ui/runs/{holder}")).await;
        assert!(
            run.contains("Fencing token") && run.contains(&format!("holds {ticket} until")),
            "{run}"
        );
        assert!(run.contains("Finish as completed") && run.contains("Cancel run"));
        assert!(run.contains(&format!("/ui/deliveries/{first_id}")));

        // Locks, workflows (with outcomes of the last 24 hours), sources and targets.
        let locks = ui.page("/ui/locks").await;
        assert!(locks.contains(&ticket) && locks.contains(&holder));
        let workflows = ui.page("/ui/workflows").await;
        for needle in [
            "triage",
            "experimental",
            "s-draft\">draft<",
            "entity_locked 1",
            "routed 1",
            "(in force)",
        ] {
            assert!(
                workflows.contains(needle),
                "{backend:?}: {needle} in {workflows}"
            );
        }
        let sources = ui.page("/ui/sources").await;
        assert!(
            sources.contains("Targets") && sources.contains(">pull<"),
            "{sources}"
        );

        // CSRF: a finish without the token (or with another) changes nothing.
        let csrf = csrf_of(&run);
        let (status, _) = ui
            .post(
                &format!("/ui/runs/{holder}/finish"),
                &[("status", "completed")],
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let (status, _) = ui
            .post(
                &format!("/ui/runs/{holder}/finish"),
                &[("status", "completed"), ("csrf", "forged")],
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(
            daemon.get(&format!("/v1/runs/{holder}")).await["status"],
            "queued"
        );
        let (status, location) = ui
            .post(
                &format!("/ui/runs/{holder}/finish"),
                &[("status", "completed"), ("csrf", &csrf)],
            )
            .await;
        assert_eq!(status, StatusCode::SEE_OTHER, "{location}");
        assert_eq!(
            daemon.get(&format!("/v1/runs/{holder}")).await["status"],
            "completed"
        );
        let finished = ui.page(&location).await;
        assert!(finished.contains("Run finished as completed"), "{finished}");
        assert!(
            !finished.contains("Finish as completed"),
            "no finish button on a finished run"
        );
        // The ticket is free: a third event routes.
        let third = post(&daemon, &unique("third"), "acme", &ticket, "again").await;
        assert_eq!(third["outcome"], "routed", "{backend:?}: {third}");

        // Logout ends the session.
        let (status, _) = ui.post("/ui/logout", &[("csrf", "forged")]).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let (status, location) = ui.post("/ui/logout", &[("csrf", &csrf)]).await;
        assert_eq!(
            (status, location.as_str()),
            (StatusCode::SEE_OTHER, "/ui/login")
        );
        assert_eq!(ui.get("/ui/deliveries").await.0, StatusCode::SEE_OTHER);

        daemon.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn a_read_token_changes_nothing_and_a_tenant_token_sees_only_its_tenant() {
    let Some(db) = TestDb::create(super::harness::Backend::Sqlite).await else {
        return;
    };
    let text = config(&db, &format!("{TOKENS}\n{CONSOLE_WORKFLOWS}"));
    let daemon = Daemon::start(&db, &text, &TOKEN_ENV).await;
    let ticket = unique("TCK");
    let acme = post(&daemon, &unique("a"), "acme", &ticket, "acme's").await;
    let globex_entity = unique("GLX");
    let globex_key = unique("globex-key");
    let globex = post(&daemon, &globex_key, "globex", &globex_entity, "globex's").await;
    let (acme_run, globex_run) = (run_id(&acme), run_id(&globex));
    let (acme_id, globex_id) = (intake_id(&acme), intake_id(&globex));

    // `read`: sees, but no button that changes state, and its POSTs are refused.
    let reader = Console::login(&daemon, "reader-token-secret").await;
    let run = reader.page(&format!("/ui/runs/{acme_run}")).await;
    for button in [
        "Finish as completed",
        "Cancel run",
        "Redispatch",
        "/finish\"",
        "/redispatch\"",
    ] {
        assert!(!run.contains(button), "a read token sees no `{button}`");
    }
    let csrf = csrf_of(&run);
    assert!(!csrf.is_empty(), "the logout form carries the CSRF token");
    for path in [
        format!("/ui/runs/{acme_run}/finish"),
        format!("/ui/runs/{acme_run}/redispatch"),
    ] {
        let (status, body) = reader
            .post(&path, &[("status", "completed"), ("csrf", &csrf)])
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
        assert!(
            body.contains("runs:write"),
            "the refusal names the scope: {body}"
        );
    }
    assert_eq!(
        daemon.get(&format!("/v1/runs/{acme_run}")).await["status"],
        "queued"
    );
    let delivery = reader.page(&format!("/ui/deliveries/{acme_id}")).await;
    assert!(!delivery.contains("Reveal raw bytes") && delivery.contains("raw:read"));
    let (status, body) = reader
        .get(&format!("/ui/deliveries/{acme_id}?reveal=raw"))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body.contains("raw:read"));

    // A tenant-scoped token: never another tenant's delivery, in the list, by URL or in search.
    let ops = Console::login(&daemon, "acme-token-secret").await;
    let list = ops.page("/ui/deliveries").await;
    assert!(
        list.contains(&acme_id) && !list.contains(&globex_id) && !list.contains(&globex_entity)
    );
    assert_eq!(
        ops.get(&format!("/ui/deliveries/{globex_id}")).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        ops.get(&format!("/ui/deliveries/{globex_id}?reveal=raw"))
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    for search in [
        "/ui/deliveries?tenant=globex".to_owned(),
        format!("/ui/deliveries?entity={globex_entity}"),
        format!("/ui/deliveries?delivery={globex_key}"),
        "/ui/deliveries?outcome=routed".to_owned(),
        "/ui/runs?tenant=globex".to_owned(),
        format!("/ui/runs?entity={globex_entity}"),
        "/ui/runs".to_owned(),
        "/ui/locks".to_owned(),
        "/ui/locks?tenant=globex".to_owned(),
    ] {
        let html = ops.page(&search).await;
        // The search box echoes what was typed; no row may show it.
        assert!(
            !html.contains(&globex_id)
                && !html.contains(&format!(">{globex_entity}<"))
                && !html.contains(&globex_run),
            "{search} shows nothing of globex: {html}"
        );
    }
    assert_eq!(
        ops.get(&format!("/ui/runs/{globex_run}")).await.0,
        StatusCode::NOT_FOUND
    );
    let csrf = csrf_of(&ops.page("/ui/runs").await);
    let (status, _) = ops
        .post(
            &format!("/ui/runs/{globex_run}/finish"),
            &[("status", "completed"), ("csrf", &csrf)],
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        daemon.get(&format!("/v1/runs/{globex_run}")).await["status"],
        "queued"
    );
    let workflows = ops.page("/ui/workflows").await;
    assert!(workflows.contains("triage") && !workflows.contains("globex-triage"));
    // Its own tenant's run it may finish (it has runs:write).
    let (status, _) = ops
        .post(
            &format!("/ui/runs/{acme_run}/finish"),
            &[("status", "cancelled"), ("csrf", &csrf)],
        )
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(
        daemon.get(&format!("/v1/runs/{acme_run}")).await["status"],
        "cancelled"
    );
}
