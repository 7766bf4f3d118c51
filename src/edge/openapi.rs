//! The channels' ingest endpoints in the OpenAPI document: one `#[utoipa::path]` per route a
//! channel registers (`Channel::routes`). Their handlers are generic (`ingest::serve::<E>`), so
//! the paths are declared on the items below, beside nothing else; the route coverage test
//! (tests/e2e/openapi.rs) fails when a route is registered without one.

use utoipa::OpenApi;

use crate::http::openapi::IntakeRefusal;
use crate::intake::Answer;

#[derive(Debug, OpenApi)]
#[openapi(paths(
    webhook,
    json_webhook,
    cloudevents,
    slack,
    slack_interactivity,
    web_form
))]
struct IngestDoc;

/// The ingest endpoints' part of the document.
pub fn document() -> utoipa::openapi::OpenApi {
    IngestDoc::openapi()
}

/// A signed webhook delivery (Zendesk-shaped, or a preset's: GitHub, Stripe, Shopify, ...)
/// to the `webhook` source `name`; authenticated by its signature, not a token.
#[utoipa::path(post, path = "/v1/ingest/webhook/{name}", tag = "ingest", security(()),
    params(("name" = String, Path, description = "The source's name")),
    request_body(content = serde_json::Value, content_type = "application/json"),
    responses((status = 200, description = "The delivery's outcome", body = Answer),
        (status = "default", description = "The delivery's outcome (unauthorized_source 401, invalid_event 400, ...) or a refusal before intake", body = IntakeRefusal)))]
#[allow(dead_code)]
fn webhook() {}

/// A signed JSON webhook to the `json_webhook` source `name`, mapped by its config.
#[utoipa::path(post, path = "/v1/ingest/json_webhook/{name}", tag = "ingest", security(()),
    params(("name" = String, Path, description = "The source's name")),
    request_body(content = serde_json::Value, content_type = "application/json"),
    responses((status = 200, description = "The delivery's outcome", body = Answer),
        (status = "default", description = "The delivery's outcome or a refusal before intake", body = IntakeRefusal)))]
#[allow(dead_code)]
fn json_webhook() {}

/// A CloudEvent (structured `application/cloudevents+json`, or binary mode) to the
/// `cloudevents` source `name`.
#[utoipa::path(post, path = "/v1/ingest/cloudevents/{name}", tag = "ingest", security(()),
    params(("name" = String, Path, description = "The source's name")),
    request_body(content = serde_json::Value, content_type = "application/cloudevents+json"),
    responses((status = 200, description = "The delivery's outcome", body = Answer),
        (status = "default", description = "The delivery's outcome or a refusal before intake", body = IntakeRefusal)))]
#[allow(dead_code)]
fn cloudevents() {}

/// A Slack Events API request (signed with the app's signing secret) to the `slack` source
/// `name`; `url_verification` is answered with its challenge.
#[utoipa::path(post, path = "/v1/ingest/slack/{name}", tag = "ingest", security(()),
    params(("name" = String, Path, description = "The source's name")),
    request_body(content = serde_json::Value, content_type = "application/json"),
    responses((status = 200, description = "The delivery's outcome (Slack's style: invalid_event is 200 too), or the challenge", body = serde_json::Value),
        (status = "default", description = "The delivery's outcome or a refusal before intake", body = IntakeRefusal)))]
#[allow(dead_code)]
fn slack() {}

/// A Slack interactivity request (an approval button's click, a form body with `payload`).
#[utoipa::path(post, path = "/v1/ingest/slack/{name}/interactivity", tag = "ingest", security(()),
    params(("name" = String, Path, description = "The source's name")),
    request_body(content = String, content_type = "application/x-www-form-urlencoded"),
    responses((status = 200, description = "The resume's outcome", body = serde_json::Value),
        (status = "default", description = "The delivery's outcome or a refusal before intake", body = IntakeRefusal)))]
#[allow(dead_code)]
fn slack_interactivity() {}

/// A browser form post (urlencoded or multipart) to the `web_form` source `name`, checked by
/// its `Origin` and honeypot.
#[utoipa::path(post, path = "/v1/ingest/web_form/{name}", tag = "ingest", security(()),
    params(("name" = String, Path, description = "The source's name")),
    request_body(content = String, content_type = "application/x-www-form-urlencoded"),
    responses((status = 200, description = "The delivery's outcome, or a redirect to the form's thank-you page", body = serde_json::Value),
        (status = "default", description = "The delivery's outcome or a refusal before intake", body = serde_json::Value)))]
#[allow(dead_code)]
fn web_form() {}
