//! The webhook notifier: the alert as a CloudEvents JSON POST, signed per Standard Webhooks
//! by dispatch's own `HttpTransport` (the notification id is the `webhook-id`, stable across
//! retries, so a receiver deduplicates on it).

use switchyard_dispatch::{
    AttemptResult, HttpTarget, HttpTransport, Outbound, SigningKey, Transport,
};

use super::message::Message;
use crate::config::notifiers::WebhookNotifierConfig;

pub struct WebhookSender(HttpTransport);

impl WebhookSender {
    pub fn new(config: &WebhookNotifierConfig, secret: &str) -> Result<Self, String> {
        let key = SigningKey::parse(secret).map_err(|e| e.to_string())?;
        HttpTransport::new(HttpTarget {
            url: config.url.clone(),
            signing_keys: vec![key],
            timeout: config.timeout,
            max_in_flight: 4,
            retry_on_4xx: false,
        })
        .map(Self)
        .map_err(|e| e.to_string())
    }

    pub async fn send(&self, message: &Message<'_>) -> Result<(), String> {
        // The notification's id: a retry is the same message.
        let id = message.id;
        let body = message.cloudevent().to_string();
        let attempt = self
            .0
            .deliver(Outbound {
                id,
                tenant_id: message.alert.tenant_id.as_deref().unwrap_or(""),
                workflow_id: "",
                body: body.as_bytes(),
                traceparent: None,
                tracestate: None,
            })
            .await;
        match attempt.result {
            AttemptResult::Delivered => Ok(()),
            _ => Err(attempt
                .error
                .or_else(|| attempt.status.map(|status| format!("HTTP {status}")))
                .unwrap_or_else(|| "not delivered".into())),
        }
    }
}
