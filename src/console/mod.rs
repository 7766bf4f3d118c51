//! The operator console (`/ui`): server-rendered HTML (askama templates in `templates/`) that
//! answers "why did this not run?" from the same store queries as `/v1`, readable without
//! JavaScript. One module per page; `session.rs` is login, logout and CSRF.
//!
//! Invariant: every page reads tenant rows through the viewer's [`Principal`] (its tenant
//! filter, or a 404 for a row it may not see), and every state change is a POST that carries
//! the session's CSRF token and checks the scope it needs.
//!
//! [`Principal`]: crate::http::auth::Principal

mod alerts;
mod chart;
mod deliveries;
mod delivery;
mod locks;
mod readmit;
mod replays;
mod runs;
mod schedules;
pub mod session;
mod sources;
mod test_events;
mod workflows;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;

use crate::http::{ApiError, AppState};

/// What every page shows around its content: who is logged in, with which scopes and
/// tenants, the CSRF token for the logout form, and which page is active.
#[derive(Debug, Clone)]
pub struct Chrome {
    pub user: String,
    pub scopes: String,
    pub tenants: String,
    pub csrf: String,
    pub active: &'static str,
}

/// A page that could not be shown, as an HTML page with its status.
#[derive(Debug)]
pub struct ConsoleError {
    status: StatusCode,
    message: String,
}

impl ConsoleError {
    pub fn new(status: StatusCode, message: &str) -> Self {
        Self {
            status,
            message: message.to_owned(),
        }
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, &format!("No {what} with that id."))
    }
}

/// A confirmation before an operator action: what will happen in a few lines, and a form that
/// posts `fields` (and the CSRF token) to `action` when the operator agrees.
#[derive(askama::Template)]
#[template(path = "confirm.html")]
pub struct Confirm {
    pub chrome: Chrome,
    pub title: String,
    pub lines: Vec<String>,
    pub action: String,
    pub fields: Vec<(String, String)>,
    pub button: String,
    pub danger: bool,
    /// Where "Go back" leads.
    pub back: String,
}

#[derive(askama::Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    status: u16,
    reason: &'a str,
    message: &'a str,
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let page = ErrorPage {
            status: self.status.as_u16(),
            reason: self.status.canonical_reason().unwrap_or("Error"),
            message: &self.message,
        };
        (self.status, render(&page)).into_response()
    }
}

impl From<ApiError> for ConsoleError {
    fn from(error: ApiError) -> Self {
        let status = error_status(&error);
        if status.is_server_error() {
            tracing::error!(%error, "console page failed");
            return Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "The store is unavailable; try again in a moment.",
            );
        }
        Self::new(status, &error.to_string())
    }
}

impl From<switchyard_store::DbErr> for ConsoleError {
    fn from(error: switchyard_store::DbErr) -> Self {
        ApiError::Database(error).into()
    }
}

fn error_status(error: &ApiError) -> StatusCode {
    match error {
        ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
        ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
        ApiError::NotFound(_) => StatusCode::NOT_FOUND,
        ApiError::Conflict(_) => StatusCode::CONFLICT,
        ApiError::Refused { status, .. } => *status,
        ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        ApiError::Unavailable(_) | ApiError::Database(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// A template rendered to HTML (a render failure is logged and shown as a plain 500).
pub fn render<T: askama::Template>(template: &T) -> Response {
    match template.render() {
        Ok(html) => Html(html).into_response(),
        Err(error) => {
            tracing::error!(%error, "console template failed to render");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the page could not be rendered",
            )
                .into_response()
        }
    }
}

const CSS: &str = include_str!("../../templates/static/console.css");

async fn css() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        CSS,
    )
        .into_response()
}

/// Every console route; pages are `no-store` and may not be framed or load anything but
/// their own stylesheet.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui", get(|| async { Redirect::to("/ui/deliveries") }))
        .route("/ui/", get(|| async { Redirect::to("/ui/deliveries") }))
        .route("/ui/static/console.css", get(css))
        .merge(session::router())
        .merge(deliveries::router())
        .merge(delivery::router())
        .merge(runs::router())
        .merge(locks::router())
        .merge(workflows::router())
        .merge(sources::router())
        .merge(schedules::router())
        .merge(replays::router())
        .merge(readmit::router())
        .merge(alerts::router())
        .layer(axum::middleware::map_response(harden))
}

async fn harden(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// `HH:MM` UTC of an epoch-ms time, the way the outcome sentences say it.
pub fn clock(millis: i64) -> String {
    chrono::DateTime::from_timestamp_millis(millis)
        .map(|t| t.format("%H:%M").to_string())
        .unwrap_or_default()
}

/// `2026-12-01 10:42:07` UTC.
pub fn stamp(millis: i64) -> String {
    chrono::DateTime::from_timestamp_millis(millis)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}

/// `2026-12-01 10:42:07.123` UTC: the ledger's times, to the millisecond.
pub fn stamp_ms(millis: i64) -> String {
    chrono::DateTime::from_timestamp_millis(millis)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S%.3f").to_string())
        .unwrap_or_default()
}

/// A long id as a table shows it: its first 8 and last 4 characters (the page keeps the whole
/// id in the cell's `title` and text for copying). Short ids are shown whole.
pub fn short_id(id: &str) -> String {
    let chars: Vec<char> = id.chars().collect();
    if chars.len() <= 16 {
        return id.to_owned();
    }
    let head: String = chars[..8].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}…{tail}")
}

/// A page that reloads itself every [`AutoRefresh::SECONDS`] while `auto=on` is in its
/// address (a `<meta http-equiv="refresh">`: no script), and the link that turns it on or off
/// with the page's filters kept.
#[derive(Debug, Clone)]
pub struct AutoRefresh {
    pub on: bool,
    pub toggle: String,
}

impl AutoRefresh {
    pub const SECONDS: u32 = 15;

    pub fn new(path: &str, filters: &[(&str, Option<&str>)], auto: Option<&str>) -> Self {
        let on = auto == Some("on");
        let mut pairs = filters.to_vec();
        if !on {
            pairs.push(("auto", Some("on")));
        }
        Self {
            on,
            toggle: format!("{path}{}", query_string(&pairs)),
        }
    }

    pub fn seconds(&self) -> u32 {
        Self::SECONDS
    }
}

/// An optional filter from a form: blank means unset.
pub fn given(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// `key=value&...` of the non-blank pairs, URL-encoded, for pagination links.
pub fn query_string(pairs: &[(&str, Option<&str>)]) -> String {
    let mut out = url_pairs(pairs);
    if !out.is_empty() {
        out.insert(0, '?');
    }
    out
}

fn url_pairs(pairs: &[(&str, Option<&str>)]) -> String {
    pairs
        .iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k}={}", encode(v))))
        .collect::<Vec<_>>()
        .join("&")
}

fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// Page size of the console's listings.
pub const PAGE: u64 = 50;

/// The link to the next page of a cursor-paged list (`path` with the same filters, `before`
/// the last row shown), or empty when this page was not full.
pub fn next_page(path: &str, filters: &[(&str, Option<&str>)], ids: &[&str]) -> String {
    match ids.last() {
        Some(last) if ids.len() as u64 == PAGE => {
            let mut pairs = filters.to_vec();
            pairs.push(("before", Some(last)));
            format!("{path}{}", query_string(&pairs))
        }
        _ => String::new(),
    }
}
