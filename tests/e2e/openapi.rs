//! The OpenAPI document at `GET /v1/openapi.json`, as a client generator would rely on it:
//! served without a token, OpenAPI 3.1, naming every route the daemon registers (its source's
//! `.route(..)` calls, the console's `/ui` pages excepted) and only routes it serves; and the
//! API reference page (`docs/api.md`) names exactly the document's endpoints. (Its validity by an independent
//! validator, and the daemon's answers against it, are `.ci/schemathesis.sh`'s.)

use std::collections::BTreeSet;
use std::path::Path;

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::harness::{Daemon, TOKEN, TestDb, config};
use super::spine::WORKED_EXAMPLE;

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// Every `METHOD path` the document describes, the method upper-case.
fn documented(document: &Value) -> BTreeSet<String> {
    let paths = document["paths"].as_object().expect("paths");
    let mut operations = BTreeSet::new();
    for (path, item) in paths {
        for method in METHODS {
            if item.get(method).is_some() {
                operations.insert(format!("{} {path}", method.to_uppercase()));
            }
        }
    }
    operations
}

/// The end of the call whose argument list starts at `text[open]` (a `(`).
fn closing(text: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (at, c) in text[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return open + at;
                }
            }
            _ => {}
        }
    }
    text.len()
}

/// Every `METHOD path` registered by a `.route("path", method(handler)...)` call in the
/// daemon's source outside the console.
fn registered(dir: &Path, into: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            if !path.ends_with("console") {
                registered(&path, into);
            }
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read source");
        let mut from = 0;
        while let Some(at) = text[from..].find(".route(") {
            let open = from + at + ".route".len();
            from = open + 1;
            let rest = text[from..].trim_start();
            let Some(literal) = rest.strip_prefix('"') else {
                continue; // not a router's route (`locks.route(...)` and the like)
            };
            let route = &literal[..literal.find('"').expect("closing quote")];
            let call = &text[open..closing(&text, open)];
            let mut methods = 0;
            for method in METHODS {
                let mut search = 0;
                while let Some(found) = call[search..].find(&format!("{method}(")) {
                    let start = search + found;
                    let before = call[..start].chars().next_back();
                    if before.is_none_or(|c| !(c.is_alphanumeric() || c == '_')) {
                        into.insert(format!("{} {route}", method.to_uppercase()));
                        methods += 1;
                    }
                    search = start + 1;
                }
            }
            assert!(
                methods > 0,
                "{}: no method found in the route `{route}`",
                path.display()
            );
        }
    }
}

async fn document(daemon: &Daemon) -> Value {
    // No token: the document describes the API, not a deployment.
    let response = daemon
        .client()
        .get(daemon.url("/v1/openapi.json"))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json")),
        "served as JSON"
    );
    response.json().await.expect("the document is JSON")
}

#[tokio::test]
async fn the_document_names_every_route_the_daemon_serves_and_no_other() {
    let Some(db) = TestDb::create(super::harness::Backend::Sqlite).await else {
        return;
    };
    let daemon = Daemon::start(&db, &config(&db, WORKED_EXAMPLE), &[]).await;
    let document = document(&daemon).await;
    assert_eq!(document["openapi"], "3.1.0", "OpenAPI 3.1");
    assert_eq!(
        document["components"]["securitySchemes"]["bearer"]["scheme"], "bearer",
        "the bearer token is declared"
    );

    let operations = documented(&document);
    let mut routes = BTreeSet::new();
    registered(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut routes,
    );
    assert!(routes.len() > 30, "the scan found the routes: {routes:?}");
    let undocumented: Vec<_> = routes.difference(&operations).collect();
    assert!(
        undocumented.is_empty(),
        "routes without a `#[utoipa::path]` in the document: {undocumented:?}"
    );
    let unregistered: Vec<_> = operations.difference(&routes).collect();
    assert!(
        unregistered.is_empty(),
        "documented, but no `.route(..)` registers them: {unregistered:?}"
    );

    // And the daemon serves each: the router's own 404 (`no endpoint at`) or 405 would mean
    // the document names a route that is not there.
    for operation in &operations {
        let (method, path) = operation.split_once(' ').expect("METHOD path");
        let concrete = path
            .replace("{id}", "x")
            .replace("{token}", "x")
            .replace("{name}", "x");
        let request = match method {
            "GET" => daemon.client().get(daemon.url(&concrete)),
            "POST" => daemon
                .client()
                .post(daemon.url(&concrete))
                .header("content-type", "application/json")
                .body("{\"probe\": true}"),
            other => panic!("{operation}: a method the test does not send: {other}"),
        };
        let response = request.bearer_auth(TOKEN).send().await.expect("send");
        let status = response.status();
        let text = response.text().await.expect("body");
        let answer: Value = serde_json::from_str(&text).unwrap_or(json!({}));
        assert_ne!(
            status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{operation}: {text}"
        );
        assert!(
            !(status == StatusCode::NOT_FOUND
                && answer["detail"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("no endpoint at"))),
            "{operation} is documented but not served: {text}"
        );
        assert!(
            !status.is_server_error() || status == StatusCode::SERVICE_UNAVAILABLE,
            "{operation}: {status} {text}"
        );
    }

    // Every operation says what it answers and has its own id (client generators name
    // methods by it), and every refusal's shape is a named schema.
    let mut ids = BTreeSet::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("item") {
            let id = operation["operationId"].as_str().expect("an operationId");
            assert!(
                ids.insert(id.to_owned()),
                "{method} {path}: `{id}` is not unique"
            );
            let responses = operation["responses"].as_object().expect("responses");
            assert!(
                responses.keys().any(|s| s.starts_with('2')),
                "{method} {path}: a success answer"
            );
        }
    }
    assert!(document["components"]["schemas"]["Problem"].is_object());
    daemon.stop();
}

/// The API reference, `docs/api.md` (the whole page is the API section): every
/// `METHOD /path` it names.
fn docs_endpoints() -> BTreeSet<String> {
    let page = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/api.md"))
        .expect("docs/api.md");
    let section = page
        .strip_prefix("# HTTP API\n")
        .expect("docs/api.md is the HTTP API page");
    let mut named = BTreeSet::new();
    for method in METHODS.map(str::to_uppercase) {
        let needle = format!("{method} /");
        let mut from = 0;
        while let Some(at) = section[from..].find(&needle) {
            let path_start = from + at + method.len() + 1;
            let path: String = section[path_start..]
                .chars()
                .take_while(|c| !matches!(c, '`' | '?' | ' ' | '|' | ')' | ','))
                .collect();
            named.insert(format!("{method} {path}"));
            from = path_start;
        }
    }
    named
}

#[tokio::test]
async fn the_docs_api_page_names_exactly_the_documented_endpoints() {
    let Some(db) = TestDb::create(super::harness::Backend::Sqlite).await else {
        return;
    };
    let daemon = Daemon::start(&db, &config(&db, WORKED_EXAMPLE), &[]).await;
    let operations = documented(&document(&daemon).await);
    daemon.stop();
    let named = docs_endpoints();
    let missing: Vec<_> = operations.difference(&named).collect();
    assert!(
        missing.is_empty(),
        "endpoints docs/api.md does not name: {missing:?}"
    );
    let unknown: Vec<_> = named.difference(&operations).collect();
    assert!(
        unknown.is_empty(),
        "docs/api.md names endpoints the daemon does not serve: {unknown:?}"
    );
}
