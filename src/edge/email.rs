//! The email channel: a support mailbox polled over IMAP. Reached by a poller per source
//! (`mailbox::Mailboxes`, which records each fetched message through intake), never over HTTP.

mod mailbox;
mod probe;

pub use mailbox::StoredTokens;
pub use probe::mailbox_test;

use std::time::Duration;

use switchyard_core::Channel as EventChannel;
use switchyard_email::{Auth, Credentials, EmailSourceConfig};

use super::{Again, Channel, DryRun, DryRunResult, StartPollers, Stored};
use crate::config::{EnvLookup, ResolvedSource, SourceConfig, SourceSettings};
use crate::intake::{Delivery, DeliveryBody, digest_id};

const KIND: &str = "email";

/// The content type a fetched message is stored under.
const CONTENT_TYPE: &str = "message/rfc822";

/// The email channel's registration.
pub struct Email;

impl Channel for Email {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn pollers(&self) -> Option<StartPollers> {
        Some(|daemon| Box::new(mailbox::Mailboxes::new(daemon)))
    }

    fn renormalize(&self, source: &SourceConfig, stored: &Stored<'_>) -> Option<Again> {
        let SourceConfig::Email(config) = source else {
            return None;
        };
        let (uidvalidity, uid) = imap_position(stored.payload);
        Some(
            match switchyard_email::normalize(stored.body, config, uidvalidity, uid, stored.raw_ref)
            {
                Ok(normalized) => Again::of(normalized.disposition.into()),
                Err(error) => Again::of(DeliveryBody::Invalid {
                    detail: format!("{}: {error}", error.detail()),
                }),
            },
        )
    }

    fn stored_here(&self, content_type: &str) -> bool {
        content_type == CONTENT_TYPE
    }

    /// A raw RFC 5322 message, as the poller would fetch it (no IMAP position: UID 0).
    fn dry_run(&self, source: &ResolvedSource, run: &DryRun<'_>) -> Option<DryRunResult> {
        let ResolvedSource::Email { config, .. } = source else {
            return None;
        };
        let intake_id = uuid::Uuid::now_v7();
        let body = &run.request.body;
        Some(Ok(
            match switchyard_email::normalize(body, config, 0, 0, &Delivery::raw_ref(intake_id)) {
                Ok(normalized) => Delivery::new(
                    intake_id,
                    run.name,
                    normalized.delivery_id,
                    normalized.disposition.into(),
                ),
                Err(error) => Delivery::new(
                    intake_id,
                    run.name,
                    digest_id(body),
                    DeliveryBody::Invalid {
                        detail: format!("{}: {error}", error.detail()),
                    },
                ),
            },
        ))
    }
}

impl SourceSettings for EmailSourceConfig {
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
        EmailSourceConfig::validate(self).map_err(|e| e.to_string())
    }

    fn resolve(&self, env: EnvLookup<'_>) -> Result<ResolvedSource, String> {
        let credentials = match (&self.auth, &self.oauth2) {
            (Auth::Oauth2, Some(oauth2)) => Credentials::OAuth2(Box::new(
                oauth2
                    .resolve(env)
                    .map_err(|error| format!("{KIND} source `{}`: {error}", self.name))?,
            )),
            _ => Credentials::Password(self.secret(env, &self.password_env)?),
        };
        Ok(ResolvedSource::Email {
            credentials,
            config: self.clone(),
        })
    }

    /// The mailbox cursor makes redelivery of mail rare: no retry window.
    fn retry_window(&self) -> Option<(Duration, &'static str)> {
        None
    }

    fn produces(&self, tenant: &str, channel: EventChannel, event_type: &str) -> bool {
        channel == EventChannel::Email
            && self.tenant == tenant
            && [
                switchyard_email::EVENT_RECEIVED,
                switchyard_email::EVENT_REPLY,
            ]
            .contains(&event_type)
    }
}

/// The mailbox position an email was fetched at, as its recorded payload says.
fn imap_position(payload: Option<&str>) -> (u32, u32) {
    let payload: Option<serde_json::Value> = payload.and_then(|p| serde_json::from_str(p).ok());
    let read = |key: &str| {
        payload
            .as_ref()
            .and_then(|p| p.pointer(&format!("/imap/{key}")))
            .and_then(serde_json::Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0)
    };
    (read("uidvalidity"), read("uid"))
}
