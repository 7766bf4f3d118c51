//! The json_webhook channel: any signed JSON webhook on `POST /v1/ingest/json_webhook/{name}`,
//! verified by its source's preset before the body is parsed, then mapped by its config
//! (`switchyard_json_webhook`) to the canonical event; answered after the commit.
//!
//! A delivery is identified by its mapped `delivery_id`, by the signed `webhook-id` of a
//! Standard Webhooks request, or else by its body's digest. Where the id comes from a header
//! the signature does not cover (GitHub's `X-GitHub-Delivery`, Shopify's `X-Shopify-Webhook-Id`),
//! the body's digest is the message key: a captured request resent with a new id is a
//! `duplicate` of the first copy that routed, never a second run.

use std::time::Duration;

use axum::Router;
use axum::routing::post;
use switchyard_core::{Channel as EventChannel, Outcome};
use switchyard_json_webhook::template::Part;
use switchyard_json_webhook::{JsonWebhookSourceConfig, Preset, Verified, Verifier};
use uuid::Uuid;

use super::body::{Unverified, stored_message_key};
use super::ingest::{Endpoint, Step, Submit, serve};
use super::{Again, Channel, DryRun, DryRunResult, Stored};
use crate::config::{EnvLookup, ResolvedSource, SourceConfig, SourceSettings};
use crate::http::AppState;
use crate::http::intake_answer::{self, Style};
use crate::intake::{Delivery, DeliveryBody, digest_id};
use crate::live::Live;

const KIND: &str = "json_webhook";

/// The json_webhook channel's registration.
pub struct JsonWebhook;

impl Channel for JsonWebhook {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn routes(&self) -> Option<Router<AppState>> {
        Some(Router::new().route("/v1/ingest/json_webhook/{name}", post(serve::<JsonWebhook>)))
    }

    fn dry_run(&self, source: &ResolvedSource, run: &DryRun<'_>) -> Option<DryRunResult> {
        super::ingest::dry_run::<JsonWebhook>(
            source,
            run.name,
            run.request,
            run.live,
            run.skip_verify,
        )
    }

    fn renormalize(&self, source: &SourceConfig, stored: &Stored<'_>) -> Option<Again> {
        let SourceConfig::JsonWebhook(config) = source else {
            return None;
        };
        let mapping = config.mapping();
        let templates = [mapping.event_type, mapping.target_entity_id];
        if templates.iter().any(|t| t.reads_header()) || reads_header_payload(config) {
            return Some(Again::Unreadable(
                "the mapping reads request headers, which are not stored",
            ));
        }
        let none = |_: &str| None;
        Some(
            match switchyard_json_webhook::normalize_json(
                config,
                stored.body,
                &none,
                stored.raw_ref,
            ) {
                Ok(mapped) => Again::of(DeliveryBody::Route(mapped.event)),
                Err(error) => Again::of(DeliveryBody::Invalid {
                    detail: format!("{}: {error}", error.detail()),
                }),
            },
        )
    }
}

fn reads_header_payload(config: &JsonWebhookSourceConfig) -> bool {
    match &config.payload {
        Some(switchyard_json_webhook::PayloadSpec::Pointer(t)) => t.reads_header(),
        Some(switchyard_json_webhook::PayloadSpec::Table(table)) => {
            table.values().any(|t| t.reads_header())
        }
        None => false,
    }
}

impl SourceSettings for JsonWebhookSourceConfig {
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
        JsonWebhookSourceConfig::validate(self).map_err(|e| e.to_string())
    }

    fn resolve(&self, env: EnvLookup<'_>) -> Result<ResolvedSource, String> {
        let secrets = self
            .verify
            .secret_vars()
            .into_iter()
            .map(|var| self.secret(env, var))
            .collect::<Result<Vec<_>, _>>()?;
        let verifier = self
            .verify
            .verifier(secrets)
            .map_err(|error| format!("json_webhook source `{}`: {error}", self.name))?;
        Ok(ResolvedSource::JsonWebhook {
            config: Box::new(self.clone()),
            verifier: Box::new(verifier),
        })
    }

    fn signing_secret_env(&self) -> Option<&str> {
        self.verify.secret_vars().first().copied()
    }

    fn retry_window(&self) -> Option<(Duration, &'static str)> {
        Some(match self.verify.preset {
            Preset::Stripe => (
                Duration::from_secs(3 * 24 * 60 * 60),
                "Stripe retries for up to three days",
            ),
            _ => (
                Duration::from_secs(24 * 60 * 60),
                "webhook senders retry for hours; 24h assumed",
            ),
        })
    }

    fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.delivery_id.is_none() && self.verify.preset != Preset::StandardWebhooks {
            warnings.push(format!(
                "json_webhook source `{}` maps no `delivery_id`: deliveries are identified by \
                 their body's digest, so a retry whose body differs (a new timestamp in it) is \
                 routed again; map the sender's delivery id (a header or a body field)",
                self.name
            ));
        }
        warnings
    }

    fn produces(&self, tenant: &str, channel: EventChannel, event_type: &str) -> bool {
        self.tenant == tenant
            && self.channel == channel
            && literal_allows(self.event_type.parts(), event_type)
    }
}

/// Whether a template could render `event_type`: all-literal templates must equal it, others
/// must start with their leading literal.
pub(super) fn literal_allows(parts: &[Part], event_type: &str) -> bool {
    match parts {
        [Part::Literal(text)] => text == event_type,
        [Part::Literal(prefix), ..] => event_type.starts_with(prefix.as_str()),
        _ => true,
    }
}

impl Endpoint for JsonWebhook {
    const KIND: &'static str = KIND;
    type Source<'l> = (&'l JsonWebhookSourceConfig, &'l Verifier);
    type Verified<'r> = Verified;

    fn unverified(_request: &Unverified) -> Option<Verified> {
        Some(Verified::default())
    }

    fn source(source: &ResolvedSource) -> Option<Self::Source<'_>> {
        match source {
            ResolvedSource::JsonWebhook { config, verifier } => Some((&**config, &**verifier)),
            _ => None,
        }
    }

    fn verify(
        (_, verifier): Self::Source<'_>,
        name: &str,
        request: &Unverified,
        _live: &Live,
    ) -> Step<Verified> {
        let header = |n: &str| request.headers.get(n).and_then(|v| v.to_str().ok());
        verifier
            .verify(&header, &request.body, chrono::Utc::now().timestamp())
            .map_err(|error| {
                tracing::warn!(source = %name, preset = verifier.preset().as_str(), detail = error.detail(), %error, outcome = "unauthorized_source", "json_webhook delivery refused");
                intake_answer::refuse(
                    Outcome::UnauthorizedSource,
                    format!("{}: {error}", error.detail()),
                    Style::Standard,
                )
            })
    }

    fn normalize(
        (config, verifier): Self::Source<'_>,
        verified: Verified,
        name: String,
        intake_id: Uuid,
        request: &Unverified,
    ) -> Step<(Delivery, Submit)> {
        let delivery = normalize_request(
            config,
            verifier.preset(),
            verified,
            name,
            intake_id,
            &request.headers,
            &request.body,
        );
        // A 429 trips many senders' circuit breakers: `rate_limited` is recorded and 200.
        Ok((delivery, Submit::Intake(Style::Webhook)))
    }
}

/// The delivery a verified request makes (the dry run takes the same path).
pub(crate) fn normalize_request(
    config: &JsonWebhookSourceConfig,
    preset: Preset,
    verified: Verified,
    name: String,
    intake_id: Uuid,
    headers: &axum::http::HeaderMap,
    body: &[u8],
) -> Delivery {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let fallback = || {
        verified
            .signed_id
            .clone()
            .unwrap_or_else(|| digest_id(body))
    };
    let mut delivery = match switchyard_json_webhook::normalize_json(
        config,
        body,
        &header,
        &Delivery::raw_ref(intake_id),
    ) {
        Ok(mapped) => {
            let id = mapped.delivery_id.unwrap_or_else(fallback);
            Delivery::new(intake_id, name, id, DeliveryBody::Route(mapped.event))
        }
        Err(error) => Delivery::new(
            intake_id,
            name,
            switchyard_json_webhook::delivery_id_of(config, body, &header).unwrap_or_else(fallback),
            DeliveryBody::Invalid {
                detail: format!("{}: {error}", error.detail()),
            },
        ),
    };
    if preset.signs_body_only()
        && config
            .delivery_id
            .as_ref()
            .is_some_and(|template| template.reads_header())
    {
        delivery.message_key = Some(stored_message_key(digest_id(body)));
    }
    delivery
}
