//! The web_form channel: a browser-facing form endpoint on `POST /v1/ingest/web_form/{name}`
//! for `application/x-www-form-urlencoded` and `multipart/form-data` posts, mapped by the
//! source's config (`switchyard_json_webhook`) like any JSON webhook, with what a public form
//! needs: an `Origin` allowlist, a honeypot field, a rate per client address, a size cap, and
//! an answer a browser can use (303 to the configured thank-you URL, or JSON for `fetch`).
//!
//! Every post to a form that exists is recorded with its bytes: a foreign or missing `Origin`
//! as `unauthorized_source` (answered 403), a client past its rate as `rate_limited` (429), a
//! filled honeypot as `ineligible` (answered as if accepted, so a bot learns nothing), a
//! submission the mapping cannot read as `invalid_event` (400). Identical submissions within
//! `dedup_window` are one (`duplicate`): the page's submission id when the mapping names one,
//! else the digest of the fields.
//!
//! Invariant: nothing but the source's config decides the tenant, and a refused post never
//! makes a run; its delivery id is its own intake id, so it never shadows a later real one.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Extension, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::post;
use serde_json::{Map, Value, json};
use switchyard_core::{Channel as EventChannel, Outcome, Rate};
use switchyard_json_webhook::form::add_field;
use switchyard_json_webhook::{Submission, WebFormSourceConfig, normalize_form, urlencoded_fields};
use uuid::Uuid;

use super::body::{self, UnverifiedBudget};
use super::{Again, Channel, DryRun, DryRunResult, Stored};
use crate::config::{EnvLookup, ResolvedSource, SourceConfig, SourceSettings};
use crate::http::intake_answer::{self, Style};
use crate::http::{ApiError, AppState};
use crate::intake::{Delivery, DeliveryBody, digest_id};

const KIND: &str = "web_form";

/// The web_form channel's registration.
pub struct WebForm;

impl Channel for WebForm {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn routes(&self) -> Option<Router<AppState>> {
        Some(
            Router::new()
                .route("/v1/ingest/web_form/{name}", post(serve))
                .layer(Extension(ClientRates::default())),
        )
    }

    /// The bytes are mapped again (honeypot included); the `Origin` and the client's rate
    /// were the request's and are not stored.
    fn renormalize(&self, source: &SourceConfig, stored: &Stored<'_>) -> Option<Again> {
        let SourceConfig::WebForm(config) = source else {
            return None;
        };
        let headers = HeaderMap::new();
        let body = Bytes::copy_from_slice(stored.body);
        let read = futures::executor::block_on(read_submission(
            config,
            stored.content_type,
            body,
            &headers,
            stored.raw_ref,
        ));
        Some(Again::of(read.body))
    }

    /// The `Origin` check (unless `skip_verify`), then the fields as the endpoint reads them;
    /// the client's rate is the running daemon's and is not tried.
    fn dry_run(&self, source: &ResolvedSource, run: &DryRun<'_>) -> Option<DryRunResult> {
        let config = form_of(source)?;
        let headers = &run.request.headers;
        let intake_id = Uuid::now_v7();
        let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
        if !run.skip_verify && !origin.is_some_and(|o| config.allows(o)) {
            return Some(Err(intake_answer::refuse(
                Outcome::UnauthorizedSource,
                format!(
                    "{}: allowed_origins is {:?} (pass --header Origin:<one of them>)",
                    origin.map_or("missing_origin".into(), |o| format!("foreign_origin `{o}`")),
                    config.allowed_origins
                ),
                Style::Standard,
            )));
        }
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/x-www-form-urlencoded");
        let read = futures::executor::block_on(read_submission(
            config,
            content_type,
            run.request.body.clone(),
            headers,
            &Delivery::raw_ref(intake_id),
        ));
        let id = read
            .identity
            .unwrap_or_else(|| digest_id(&run.request.body));
        Some(Ok(Delivery::new(intake_id, run.name, id, read.body)))
    }

    fn stored_here(&self, content_type: &str) -> bool {
        content_type.starts_with("application/x-www-form-urlencoded")
            || content_type.starts_with("multipart/form-data")
    }
}

impl SourceSettings for WebFormSourceConfig {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn tenants(&self) -> Vec<&str> {
        vec![self.tenant.as_str()]
    }

    fn validate(&self) -> Result<(), String> {
        WebFormSourceConfig::validate(self).map_err(|e| e.to_string())
    }

    fn resolve(&self, _env: EnvLookup<'_>) -> Result<ResolvedSource, String> {
        Ok(ResolvedSource::WebForm {
            config: self.clone(),
        })
    }

    fn produces(&self, tenant: &str, channel: EventChannel, event_type: &str) -> bool {
        self.tenant == tenant
            && self.channel == channel
            && super::json_webhook::literal_allows(self.event_type.parts(), event_type)
    }
}

/// Each client address's GCRA time per source, in memory: a public form's abuse ceiling, per
/// daemon (a ceiling shared by replicas is `[rates] source.<name>`, counted in the store).
#[derive(Debug, Clone, Default)]
pub struct ClientRates(Arc<Mutex<HashMap<ClientKey, i64>>>);

/// A source's name and a client address (`None`: a request without a peer address).
type ClientKey = (String, Option<IpAddr>);

impl ClientRates {
    /// Admits one submission of `client` to `source`, or names the instant (µs) one would be.
    fn admit(
        &self,
        source: &str,
        client: Option<IpAddr>,
        rate: &Rate,
        now_us: i64,
    ) -> Result<(), i64> {
        let mut times = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if times.len() > 10_000 {
            times.retain(|_, tat| *tat > now_us);
        }
        let key = (source.to_owned(), client);
        let tat = times.get(&key).copied().unwrap_or(0);
        let next = rate.admit(tat, now_us)?;
        times.insert(key, next);
        Ok(())
    }
}

/// What the fields of a submission made.
#[derive(Debug)]
pub(crate) struct Read {
    /// Route, ineligible (a bot) or invalid.
    pub body: DeliveryBody,
    /// The page's submission id, or the digest of the fields; `None` for an unreadable body.
    pub identity: Option<String>,
}

/// Reads and maps a submission (the endpoint, replay and the dry run take this path).
pub(crate) async fn read_submission(
    config: &WebFormSourceConfig,
    content_type: &str,
    body: Bytes,
    headers: &HeaderMap,
    raw_ref: &str,
) -> Read {
    let fields = match fields_of(content_type, body, config.max_file_bytes).await {
        Ok(fields) => fields,
        Err(detail) => {
            return Read {
                body: DeliveryBody::Invalid { detail },
                identity: None,
            };
        }
    };
    let digest = digest_id(Value::Object(fields.clone()).to_string().as_bytes());
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    match normalize_form(config, fields, &header, raw_ref) {
        Ok(Submission::Mapped(mapped)) => Read {
            identity: Some(mapped.delivery_id.unwrap_or(digest)),
            body: DeliveryBody::Route(mapped.event),
        },
        Ok(Submission::Bot { detail, mapped }) => Read {
            body: DeliveryBody::Ineligible {
                detail,
                event: mapped.map(|m| m.event),
            },
            identity: Some(digest),
        },
        Err(error) => Read {
            body: DeliveryBody::Invalid {
                detail: format!("{}: {error}", error.detail()),
            },
            identity: Some(digest),
        },
    }
}

/// The fields of a urlencoded or multipart body, as one flat object. A file is refused unless
/// `max_file_bytes` allows it; then its name, type and size are its field's value.
async fn fields_of(
    content_type: &str,
    body: Bytes,
    max_file_bytes: usize,
) -> Result<Map<String, Value>, String> {
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match mime.as_str() {
        "application/x-www-form-urlencoded" => Ok(urlencoded_fields(&body)),
        "multipart/form-data" => {
            let malformed = |e: multer::Error| format!("malformed_form: {e}");
            let boundary = multer::parse_boundary(content_type).map_err(malformed)?;
            let stream = futures::stream::once(async move { Ok::<Bytes, std::io::Error>(body) });
            let mut multipart = multer::Multipart::new(stream, boundary);
            let mut fields = Map::new();
            while let Some(field) = multipart.next_field().await.map_err(malformed)? {
                let name = field.name().unwrap_or_default().to_owned();
                match field.file_name().map(str::to_owned) {
                    None => {
                        let text = field.text().await.map_err(malformed)?;
                        add_field(&mut fields, name, Value::String(text));
                    }
                    Some(filename) => {
                        let file_type = field.content_type().map(ToString::to_string);
                        let data = field.bytes().await.map_err(malformed)?;
                        if filename.is_empty() && data.is_empty() {
                            continue; // a file input left empty
                        }
                        if max_file_bytes == 0 {
                            return Err(format!(
                                "file_refused: field `{name}` carries a file, and this form \
                                 takes none (max_file_bytes = 0)"
                            ));
                        }
                        if data.len() > max_file_bytes {
                            return Err(format!(
                                "file_too_large: file `{filename}` in field `{name}` is {} bytes, \
                                 more than max_file_bytes ({max_file_bytes})",
                                data.len()
                            ));
                        }
                        add_field(
                            &mut fields,
                            name,
                            json!({"filename": filename, "content_type": file_type, "bytes": data.len()}),
                        );
                    }
                }
            }
            Ok(fields)
        }
        other => Err(format!(
            "unsupported_form: a form posts application/x-www-form-urlencoded or \
             multipart/form-data, not `{other}`"
        )),
    }
}

/// Why a post was refused before its fields mattered.
enum Refusal {
    /// No `Origin`, or one not allowed: 403.
    Origin(String),
    /// Past the client's rate: 429, retry after these seconds.
    Rate(String, u64),
}

/// The endpoint: find the form, read the body within the budget and the form's cap, check
/// `Origin` and the client's rate, read and map the fields, record, and answer.
async fn serve(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Extension(budget): Extension<UnverifiedBudget>,
    Extension(rates): Extension<ClientRates>,
    request: Request,
) -> Response {
    let live = state.live.current();
    let client = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| crate::server::client_of(peer.ip()));
    let (config, request) = match body::receive(&budget, &live, KIND, &name, request, form_of).await
    {
        Ok(received) => received,
        Err(refused) => return refused,
    };
    let wants_json = request
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("application/json"));
    if request.body.len() > config.max_body {
        return ApiError::TooLarge {
            limit: config.max_body,
        }
        .into_response();
    }
    let origin = request
        .headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let refusal = match origin.as_deref() {
        Some(origin) if config.allows(origin) => {
            let now_us = chrono::Utc::now().timestamp_micros();
            rates
                .admit(&name, client, &config.rate, now_us)
                .err()
                .map(|retry_at| {
                    let seconds =
                        u64::try_from((retry_at - now_us).max(0) / 1_000_000 + 1).unwrap_or(1);
                    Refusal::Rate(
                        format!(
                            "client {} is past this form's rate ({}); retry in {seconds} s",
                            client.map_or_else(|| "unknown".into(), |ip| ip.to_string()),
                            config.rate
                        ),
                        seconds,
                    )
                })
        }
        Some(origin) => Some(Refusal::Origin(format!(
            "foreign_origin: `{origin}` is not one of this form's allowed_origins"
        ))),
        None => Some(Refusal::Origin(
            "missing_origin: a form post carries `Origin`; this one has none".into(),
        )),
    };
    let intake_id = Uuid::now_v7();
    let content_type = request
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/octet-stream")
        .to_owned();
    let read = read_submission(
        config,
        &content_type,
        request.body.clone(),
        &request.headers,
        &Delivery::raw_ref(intake_id),
    )
    .await;
    let (delivery_id, delivery_body, forced) = match refusal {
        Some(refusal) => {
            let event = read.body.event().cloned();
            let (outcome, detail, status, retry) = match refusal {
                Refusal::Origin(detail) => (
                    Outcome::UnauthorizedSource,
                    detail,
                    StatusCode::FORBIDDEN,
                    None,
                ),
                Refusal::Rate(detail, seconds) => (
                    Outcome::RateLimited,
                    detail,
                    StatusCode::TOO_MANY_REQUESTS,
                    Some(seconds),
                ),
            };
            tracing::warn!(source = %name, outcome = outcome.as_str(), %detail, "web_form post refused");
            (
                format!("refused:{intake_id}"),
                DeliveryBody::Refused {
                    outcome,
                    detail,
                    event,
                },
                Some((status, retry)),
            )
        }
        None => {
            let id = match read.identity {
                // The digest within its window: identical posts in one window are one.
                Some(id) if config.delivery_id.is_none() || id.starts_with("sha256:") => {
                    let window = i64::try_from(config.dedup_window.as_millis()).unwrap_or(i64::MAX);
                    format!(
                        "form:{id}:{}",
                        switchyard_store::now_millis() / window.max(1)
                    )
                }
                Some(id) => id,
                None => digest_id(&request.body),
            };
            (id, read.body, None)
        }
    };
    let mut delivery = Delivery::new(intake_id, name, delivery_id, delivery_body);
    delivery.raw = Some(crate::intake::Raw {
        content_type,
        bytes: request.body.clone(),
    });
    drop(request);
    let response = intake_answer::submit(&state, delivery, Style::Standard).await;
    let allowed_origin = origin.filter(|o| config.allows(o));
    answer(response, config, allowed_origin, wants_json, forced).await
}

fn form_of(source: &ResolvedSource) -> Option<&WebFormSourceConfig> {
    match source {
        ResolvedSource::WebForm { config } => Some(config),
        _ => None,
    }
}

/// The answer a browser can use: JSON for `fetch` (`Accept: application/json`); otherwise a
/// 303 to `redirect` for a submission that was taken (a bot's too), or a short page.
async fn answer(
    response: Response,
    config: &WebFormSourceConfig,
    allowed_origin: Option<String>,
    wants_json: bool,
    forced: Option<(StatusCode, Option<u64>)>,
) -> Response {
    let Some(outcome) = response.extensions().get::<Outcome>().copied() else {
        return response; // 503 and other refusals before the store: as they are
    };
    let (mut parts, body) = response.into_parts();
    if let Some((status, retry)) = forced {
        parts.status = status;
        if let Some(seconds) = retry {
            parts
                .headers
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
    }
    let mut response = if wants_json {
        Response::from_parts(parts, body)
    } else {
        let text = axum::body::to_bytes(body, 1 << 16)
            .await
            .unwrap_or_default();
        let answer: Value = serde_json::from_slice(&text).unwrap_or_default();
        let taken = parts.status.is_success();
        let mut page = match (&config.redirect, taken) {
            (Some(url), true) => match HeaderValue::from_str(url) {
                Ok(location) => {
                    (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response()
                }
                Err(_) => thanks().into_response(),
            },
            (None, true) => thanks().into_response(),
            (_, false) => (parts.status, refusal_page(&answer)).into_response(),
        };
        if let Some(retry) = parts.headers.get(header::RETRY_AFTER) {
            page.headers_mut()
                .insert(header::RETRY_AFTER, retry.clone());
        }
        page
    };
    if let Some(origin) = allowed_origin
        && let Ok(value) = HeaderValue::from_str(&origin)
    {
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
        headers.insert(header::VARY, HeaderValue::from_static("Origin"));
    }
    response.extensions_mut().insert(outcome);
    response
}

fn thanks() -> Html<&'static str> {
    Html("<!doctype html><title>Thank you</title><p>Thank you: your submission was received.</p>")
}

fn refusal_page(answer: &Value) -> Html<String> {
    let escape = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    let outcome = answer["outcome"].as_str().unwrap_or("refused");
    let detail = answer["detail"].as_str().unwrap_or_default();
    Html(format!(
        "<!doctype html><title>Not accepted</title><h1>Your submission was not accepted</h1>\
         <p><code>{}</code>: {}</p>",
        escape(outcome),
        escape(detail)
    ))
}
