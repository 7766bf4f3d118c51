//! The webhook channel: Zendesk-shaped ticket webhooks on `POST /v1/ingest/webhook/{name}`.
//! Verified before parsing; translated by the webhook adapter; answered after the ledger commit.
//!
//! A signed trigger delivery is identified by what Zendesk signed, never by the unsigned
//! `X-Zendesk-Webhook-Invocation-Id`: a captured request resent with a new invocation id is a
//! `duplicate`. The invocation is recorded as the delivery's message key, so a retry Zendesk
//! signed afresh is a `duplicate` of a first copy that routed (`switchyard_webhook::RequestIds`).

use std::time::Duration;

use axum::Router;
use axum::routing::post;
use switchyard_core::{Channel as EventChannel, Outcome};
use switchyard_webhook::{INVOCATION_ID_HEADER, RequestIds, Signed, WebhookSourceConfig};
use uuid::Uuid;

use super::body::{Unverified, stored_message_key};
use super::ingest::{Endpoint, Step, Submit, serve};
use super::{Again, Channel, DryRun, DryRunResult, Stored};
use crate::config::{EnvLookup, ResolvedSource, SourceConfig, SourceSettings};
use crate::http::AppState;
use crate::http::intake_answer::{self, Style};
use crate::intake::{Delivery, DeliveryBody};
use crate::live::Live;

const KIND: &str = "webhook";

/// The webhook channel's registration.
pub struct Webhook;

impl Channel for Webhook {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn routes(&self) -> Option<Router<AppState>> {
        Some(Router::new().route("/v1/ingest/webhook/{name}", post(serve::<Webhook>)))
    }

    fn signed_only(&self) -> bool {
        true
    }

    fn dry_run(&self, source: &ResolvedSource, run: &DryRun<'_>) -> Option<DryRunResult> {
        super::ingest::dry_run::<Webhook>(source, run.name, run.request, run.live, run.skip_verify)
    }

    fn renormalize(&self, source: &SourceConfig, stored: &Stored<'_>) -> Option<Again> {
        let SourceConfig::Webhook(config) = source else {
            return None;
        };
        // The request's headers are not stored; the recorded delivery id names it.
        let ids = RequestIds {
            signed: None,
            invocation_id: Some(stored.delivery_id),
        };
        Some(
            match switchyard_webhook::normalize(stored.body, ids, config, stored.raw_ref) {
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
}

impl SourceSettings for WebhookSourceConfig {
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
        WebhookSourceConfig::validate(self).map_err(|e| e.to_string())
    }

    fn resolve(&self, env: EnvLookup<'_>) -> Result<ResolvedSource, String> {
        Ok(ResolvedSource::Webhook {
            secret: match &self.signing_secret_env {
                Some(var) => Some(self.secret(env, var)?),
                None => None,
            },
            config: self.clone(),
        })
    }

    fn signing_secret_env(&self) -> Option<&str> {
        self.signing_secret_env.as_deref()
    }

    fn unsigned(&self) -> Option<&'static str> {
        self.insecure_skip_signature
            .then_some("insecure_skip_signature = true")
    }

    fn retry_window(&self) -> Option<(Duration, &'static str)> {
        Some((
            Duration::from_secs(24 * 60 * 60),
            "Zendesk retries for hours; 24h assumed",
        ))
    }

    fn produces(&self, tenant: &str, channel: EventChannel, event_type: &str) -> bool {
        channel == EventChannel::Webhook
            && self.tenant == tenant
            && event_type.starts_with("ticket.")
    }
}

impl Endpoint for Webhook {
    const KIND: &'static str = KIND;
    type Source<'l> = (&'l WebhookSourceConfig, Option<&'l str>);
    /// What Zendesk signed; `None` for a source that skips signatures.
    type Verified<'r> = Option<Signed>;

    fn unverified(_request: &Unverified) -> Option<Option<Signed>> {
        Some(None)
    }

    fn source(source: &ResolvedSource) -> Option<Self::Source<'_>> {
        match source {
            ResolvedSource::Webhook { config, secret } => Some((config, secret.as_deref())),
            _ => None,
        }
    }

    fn verify(
        (config, secret): Self::Source<'_>,
        name: &str,
        request: &Unverified,
        _live: &Live,
    ) -> Step<Option<Signed>> {
        let Some(secret) = secret else {
            return Ok(None);
        };
        let header = |name: &str| request.headers.get(name).and_then(|v| v.to_str().ok());
        switchyard_webhook::verify(
            header,
            &request.body,
            secret.as_bytes(),
            config.timestamp_tolerance,
            chrono::Utc::now(),
        )
        .map(Some)
        .map_err(|error| {
            tracing::warn!(source = %name, detail = error.detail(), %error, outcome = "unauthorized_source", "webhook delivery refused");
            intake_answer::refuse(
                Outcome::UnauthorizedSource,
                format!("{}: {error}", error.detail()),
                Style::Standard,
            )
        })
    }

    fn normalize(
        (config, _): Self::Source<'_>,
        signed: Option<Signed>,
        name: String,
        intake_id: Uuid,
        request: &Unverified,
    ) -> Step<(Delivery, Submit)> {
        let body = &request.body;
        let header = |name: &str| request.headers.get(name).and_then(|v| v.to_str().ok());
        let ids = RequestIds {
            signed: signed.as_ref(),
            invocation_id: header(INVOCATION_ID_HEADER),
        };
        let mut delivery = match switchyard_webhook::normalize(
            body,
            ids,
            config,
            &Delivery::raw_ref(intake_id),
        ) {
            Ok(normalized) => Delivery::new(
                intake_id,
                name,
                normalized.delivery_id,
                normalized.disposition.into(),
            ),
            Err(error) if error.is_unauthorized() => {
                tracing::warn!(source = %name, detail = error.detail(), %error, outcome = "unauthorized_source", "webhook delivery refused");
                return Err(intake_answer::refuse(
                    Outcome::UnauthorizedSource,
                    format!("{}: {error}", error.detail()),
                    Style::Standard,
                ));
            }
            Err(error) => Delivery::new(
                intake_id,
                name,
                ids.invalid_delivery_id(body),
                DeliveryBody::Invalid {
                    detail: format!("{}: {error}", error.detail()),
                },
            ),
        };
        delivery.message_key = ids.retry_key().map(stored_message_key);
        Ok((delivery, Submit::Intake(Style::Webhook)))
    }
}
