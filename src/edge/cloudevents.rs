//! The CloudEvents channel: CloudEvents 1.0 over HTTP on `POST /v1/ingest/cloudevents/{name}`
//! (structured and binary mode). Authenticated before parsing, by a Standard Webhooks signature
//! over the raw body or the daemon's API token; translated by the CloudEvents adapter; answered
//! after the commit. Batched mode and requests that are no CloudEvent are 415, recorded nowhere.
//!
//! A signed request is identified by its signed `webhook-id` (`switchyard_cloudevents::identity`):
//! binary mode's `ce-*` headers are outside the signature, so a captured request resent with
//! new ones is a `duplicate`, never a second run.

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use switchyard_cloudevents::{CloudEventsSourceConfig, Signed};
use switchyard_core::standard_webhooks::SigningKey;
use switchyard_core::{Channel as EventChannel, Outcome};
use uuid::Uuid;

use super::body::{Unverified, stored_message_key};
use super::ingest::{Endpoint, Step, Submit, serve};
use super::{Again, Channel, DryRun, DryRunResult, Stored};
use crate::config::{EnvLookup, ResolvedSource, Scope, SourceConfig, SourceSettings};
use crate::http::intake_answer::{self, Style};
use crate::http::{ApiError, AppState};
use crate::intake::{Answer, Delivery, DeliveryBody, digest_id};
use crate::live::Live;

const KIND: &str = "cloudevents";

/// The CloudEvents channel's registration.
pub struct CloudEvents;

impl Channel for CloudEvents {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn routes(&self) -> Option<Router<AppState>> {
        Some(Router::new().route("/v1/ingest/cloudevents/{name}", post(serve::<CloudEvents>)))
    }

    /// Binary mode carries the trace context in `ce-traceparent`, structured mode in the body
    /// (adopted in `normalize`); a plain `traceparent` header is read after them.
    fn trace_headers(&self) -> &'static [&'static str] {
        &["ce-", ""]
    }

    fn renormalize(&self, source: &SourceConfig, stored: &Stored<'_>) -> Option<Again> {
        let SourceConfig::CloudEvents(config) = source else {
            return None;
        };
        let headers = [("content-type", stored.content_type)];
        let event = match switchyard_cloudevents::parse(&headers[..], stored.body) {
            Ok(event) => event,
            Err(_) if !self.stored_here(stored.content_type) => {
                return Some(Again::Unreadable(
                    "a binary-mode CloudEvent: its ce-* headers are not stored",
                ));
            }
            Err(error) => {
                return Some(Again::of(DeliveryBody::Invalid {
                    detail: format!("{}: {error}", error.detail()),
                }));
            }
        };
        Some(
            match switchyard_cloudevents::normalize(&event, config, stored.raw_ref) {
                Ok(normalized) => Again::of(normalized.disposition.into()),
                Err(error) if error.is_unauthorized() => {
                    Again::unauthorized(format!("{}: {error}", error.detail()))
                }
                Err(error) => Again::of(DeliveryBody::Invalid {
                    detail: format!("{}: {error}", error.detail()),
                }),
            },
        )
    }

    fn dry_run(&self, source: &ResolvedSource, run: &DryRun<'_>) -> Option<DryRunResult> {
        super::ingest::dry_run::<CloudEvents>(
            source,
            run.name,
            run.request,
            run.live,
            run.skip_verify,
        )
    }

    /// Structured and batched mode's media types name CloudEvents; binary mode's is the data's.
    fn stored_here(&self, content_type: &str) -> bool {
        content_type.contains("cloudevents")
    }
}

impl SourceSettings for CloudEventsSourceConfig {
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
        CloudEventsSourceConfig::validate(self).map_err(|e| e.to_string())
    }

    fn resolve(&self, env: EnvLookup<'_>) -> Result<ResolvedSource, String> {
        Ok(ResolvedSource::CloudEvents {
            key: match &self.signing_secret_env {
                Some(var) => Some(SigningKey::parse(&self.secret(env, var)?).map_err(|error| {
                    format!(
                        "cloudevents source `{}`: the secret in `{var}` is unusable: {error}",
                        self.name
                    )
                })?),
                None => None,
            },
            config: self.clone(),
        })
    }

    fn signing_secret_env(&self) -> Option<&str> {
        self.signing_secret_env.as_deref()
    }

    // Publishers' retry policies vary; a day is the common upper bound (Knative, Svix).
    fn retry_window(&self) -> Option<(Duration, &'static str)> {
        Some((
            Duration::from_secs(24 * 60 * 60),
            "CloudEvents publishers may retry for hours; 24h assumed",
        ))
    }

    fn produces(&self, tenant: &str, channel: EventChannel, _event_type: &str) -> bool {
        self.tenant == tenant && self.channel == channel
    }
}

/// The request's headers as the adapter reads them. The whole map stays with the request, so
/// intake-wide concerns (trace context) can read it too.
fn header_pairs(headers: &HeaderMap) -> Vec<(&str, &str)> {
    headers
        .iter()
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
        .collect()
}

fn unauthorized(name: &str, detail: String) -> Response {
    tracing::warn!(source = %name, %detail, outcome = "unauthorized_source", "cloudevents delivery refused");
    intake_answer::refuse(Outcome::UnauthorizedSource, detail, Style::Standard)
}

impl Endpoint for CloudEvents {
    const KIND: &'static str = KIND;
    type Source<'l> = (&'l CloudEventsSourceConfig, Option<&'l SigningKey>);
    /// What the publisher signed (`None`: a token admitted it); who sent it, as a resume's
    /// actor is bound to: the token's name, or `source:<name>`; and the request's headers as
    /// the adapter reads them.
    type Verified<'r> = (Option<Signed>, String, Vec<(&'r str, &'r str)>);

    fn unverified(request: &Unverified) -> Option<Self::Verified<'_>> {
        Some((None, "dry-run".into(), header_pairs(&request.headers)))
    }

    fn source(source: &ResolvedSource) -> Option<Self::Source<'_>> {
        match source {
            ResolvedSource::CloudEvents { config, key } => Some((config, key.as_ref())),
            _ => None,
        }
    }

    /// A token with `events:write` for the source's tenant, or the source's signature; a token
    /// that is wrong or lacks the right is refused outright, never retried as a signature.
    fn verify<'r>(
        (config, key): Self::Source<'_>,
        name: &str,
        request: &'r Unverified,
        live: &Live,
    ) -> Step<Self::Verified<'r>> {
        let headers = &request.headers;
        let pairs = header_pairs(headers);
        match (crate::http::auth::bearer_principal(headers, live), key) {
            (Some(Some(principal)), _) => {
                if let Err(error) = principal.require(Scope::EventsWrite) {
                    return Err(error.into_response());
                }
                if !principal.sees(&config.tenant) {
                    return Err(ApiError::Refused {
                        status: StatusCode::FORBIDDEN,
                        error: "tenant_forbidden",
                        detail: format!(
                            "token `{}` may not send events for tenant `{}` (source `{name}`)",
                            principal.name, config.tenant
                        ),
                    }
                    .into_response());
                }
                Ok((None, principal.name, pairs))
            }
            (Some(None), _) => Err(unauthorized(name, "bad_token: unknown bearer token".into())),
            (None, Some(key)) => {
                let now = chrono::Utc::now().timestamp();
                match switchyard_cloudevents::verify(
                    &pairs[..],
                    &request.body,
                    key,
                    config.timestamp_tolerance,
                    now,
                ) {
                    Ok(signed) => Ok((Some(signed), format!("source:{name}"), pairs)),
                    Err(error) => Err(unauthorized(name, format!("{}: {error}", error.detail()))),
                }
            }
            (None, None) => Err(unauthorized(
                name,
                format!(
                    "missing_credentials: cloudevents source `{name}` has no signing secret, so \
                     only requests with a token that has `events:write` for its tenant \
                     (Authorization: Bearer) are accepted"
                ),
            )),
        }
    }

    fn normalize<'r>(
        (config, _): Self::Source<'_>,
        (signed, caller, pairs): Self::Verified<'r>,
        name: String,
        intake_id: Uuid,
        request: &'r Unverified,
    ) -> Step<(Delivery, Submit)> {
        let body = &request.body;
        let delivery = match switchyard_cloudevents::parse(&pairs[..], body) {
            Err(error) if error.is_unsupported_media_type() => {
                let mut response = (
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    Json(Answer::refused(
                        Outcome::InvalidEvent,
                        format!("{}: {error}", error.detail()),
                    )),
                )
                    .into_response();
                response.extensions_mut().insert(Outcome::InvalidEvent);
                return Err(response);
            }
            // Unreadable: a signed request is still its message, whatever its headers say.
            Err(error) => Delivery::new(
                intake_id,
                name,
                signed
                    .as_ref()
                    .map_or_else(|| digest_id(body), Signed::delivery_id),
                DeliveryBody::Invalid {
                    detail: format!("{}: {error}", error.detail()),
                },
            ),
            Ok(event) => {
                // A structured event carries its trace context as extension attributes in the
                // body (binary mode's `ce-traceparent` header was read on the way in).
                if let Some(traceparent) =
                    event.extensions.get("traceparent").and_then(|v| v.as_str())
                {
                    let tracestate = event.extensions.get("tracestate").and_then(|v| v.as_str());
                    crate::telemetry::adopt(traceparent, tracestate);
                }
                let identity = switchyard_cloudevents::identity(&event, signed.as_ref());
                let body = match switchyard_cloudevents::normalize(
                    &event,
                    config,
                    &Delivery::raw_ref(intake_id),
                ) {
                    Ok(normalized) => normalized.disposition.into(),
                    Err(error) if error.is_unauthorized() => {
                        return Err(unauthorized(&name, format!("{}: {error}", error.detail())));
                    }
                    Err(error) => DeliveryBody::Invalid {
                        detail: format!("{}: {error}", error.detail()),
                    },
                };
                let mut delivery = Delivery::new(intake_id, name, identity.delivery_id, body);
                delivery.message_key = identity.message_key.map(stored_message_key);
                delivery
            }
        };
        let submit = Submit::ResumeOrIntake {
            at: &["data"],
            caller,
            style: Style::Standard,
        };
        Ok((delivery, submit))
    }

    fn content_type(headers: &HeaderMap) -> String {
        headers
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/octet-stream")
            .to_owned()
    }
}
