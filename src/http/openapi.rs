//! The OpenAPI 3.1 document of the `/v1` API and the health and metrics endpoints, derived from
//! the handlers' `#[utoipa::path]` attributes and their request types, so it cannot drift from
//! the code. The channels' ingest endpoints add theirs (`edge::openapi`); the composition root
//! (`crate::app`) merges both and serves the result at `GET /v1/openapi.json`, without a token
//! (it describes the API, never a deployment's sources, tenants or data).

use serde::Serialize;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use super::{admin, alerts, claims, events, health, metrics, replays, revisions, runs};
use super::{schedules, waits};

/// Every refusal outside an intake answer: a stable machine-readable `error` code
/// (`bad_request`, `unauthorized`, `forbidden`, `not_found`, `conflict`,
/// `unsupported_media_type`, `payload_too_large`, `store_unavailable`, ...) and a sentence.
#[derive(Debug, Serialize, ToSchema)]
pub struct Problem {
    /// The stable code a client branches on.
    pub error: String,
    /// What was wrong, for a person.
    pub detail: String,
}

/// What an intake endpoint may answer besides its decided outcome: either the delivery's
/// outcome (`invalid_event`, `unauthorized_source`, `rate_limited`, ...) or a refusal before
/// intake (token, content type, size, store unavailable).
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // a schema only: the answers it describes are built as `Answer` or `ApiError`
pub enum IntakeRefusal {
    Outcome(crate::intake::Answer),
    Problem(Problem),
}

/// The `/v1` API's bearer token (`Authorization: Bearer <token>`).
#[derive(Debug)]
struct BearerToken;

impl Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

#[derive(Debug, OpenApi)]
#[openapi(
    info(
        title = "Switchyard",
        description = "Turns work arriving on many channels into exactly one workflow run, or a named reason why not. Every refusal is JSON: `{\"error\", \"detail\"}`, or, on the intake endpoints, the delivery's `{\"outcome\", \"detail\"}`."
    ),
    paths(
        events::post_event,
        waits::post_resume,
        waits::open_wait,
        waits::list_waits,
        runs::list_runs,
        runs::get_run,
        runs::heartbeat,
        runs::finish,
        runs::redispatch,
        claims::claim,
        claims::extend,
        claims::release,
        admin::list_intake,
        admin::raw,
        admin::locks,
        admin::workflows,
        admin::sources,
        revisions::list,
        revisions::one,
        schedules::list,
        replays::create,
        replays::list,
        replays::one,
        replays::cancel,
        replays::rerun,
        alerts::list,
        alerts::acknowledge,
        alerts::silence,
        metrics::scrape_guarded,
        health::healthz,
        health::readyz,
        openapi_json,
    ),
    components(schemas(Problem, IntakeRefusal)),
    modifiers(&BearerToken),
    security(("bearer" = [])),
)]
struct ApiDoc;

/// The document for what this layer serves.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// Documents the route the composition root serves (it needs the edge's paths too).
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    tag = "meta",
    security(()),
    responses((status = 200, description = "This document", content_type = "application/json", body = serde_json::Value))
)]
#[allow(dead_code)]
fn openapi_json() {}
