//! The requests: signed Zendesk `ticket.created` event-subscription webhooks, or canonical
//! events to `POST /v1/events`. Each has a distinct delivery id; most name a new ticket, a
//! share names one ticket per run that every such request contends on.
//!
//! Bodies are spliced from fixed pieces (no serialisation per request); a webhook's HMAC is
//! computed per request, since its id differs, which costs the generator about a microsecond.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use switchyard_webhook::{SIGNATURE_HEADER, TIMESTAMP_HEADER, sign};

use crate::args::Scenario;
use crate::config::{API_TOKEN, WEBHOOK_SECRET};

/// A real Zendesk event-subscription body (PROTOCOLS.md), cut where the ids go: the ticket id
/// (twice) and the event id.
const WEBHOOK_PIECES: [&str; 4] = [
    r#"{"account_id":22129848,"detail":{"actor_id":"8447388090494","assignee_id":"8447388090494","brand_id":"8447346621310","created_at":"2025-01-08T10:12:07Z","custom_status":"8447320465790","description":"The printer on the third floor is on fire again; please send someone with an extinguisher.","external_id":null,"form_id":"8646151517822","group_id":"8447320466430","id":""#,
    r#"","is_public":true,"organization_id":"8447346622462","priority":"LOW","requester_id":"8447388090494","status":"OPEN","subject":"Printer on fire","submitter_id":"8447388090494","tags":["printer","fire"],"type":"TASK","updated_at":"2025-01-08T10:12:07Z","via":{"channel":"web_service"}},"event":{},"id":""#,
    r#"","subject":"zen:ticket:"#,
    r#"","time":"2025-01-08T10:12:07.672717030Z","type":"zen:event-type:ticket.created","zendesk_event_version":"2022-11-06"}"#,
];

/// A canonical event from a web form, cut where the entity id goes.
const EVENT_PIECES: [&str; 2] = [
    r#"{"channel":"web_form","event_type":"ticket.created","tenant_id":"acme","target_entity_id":""#,
    r#"","payload":{"subject":"Printer on fire","description":"The printer on the third floor is on fire again; please send someone with an extinguisher.","requester":"jane@example.com","priority":"low","tags":["printer","fire"],"form":"it-helpdesk"}}"#,
];

/// Makes the requests of one load run; shared by its connections.
#[derive(Debug)]
pub struct Workload {
    scenario: Scenario,
    /// Distinguishes this run's delivery ids and tickets from every other run's.
    tag: String,
    /// Requests per thousand that target the run's one shared ticket.
    hot_permille: u64,
    next: AtomicU64,
    host: HeaderValue,
    bearer: HeaderValue,
    path: &'static str,
}

impl Workload {
    pub fn new(scenario: Scenario, tag: String, hot_share: f64, host: &str) -> Self {
        Self {
            scenario,
            tag,
            hot_permille: (hot_share.clamp(0.0, 1.0) * 1000.0).round() as u64,
            next: AtomicU64::new(0),
            host: HeaderValue::from_str(host).unwrap_or(HeaderValue::from_static("127.0.0.1")),
            bearer: HeaderValue::from_str(&format!("Bearer {API_TOKEN}"))
                .unwrap_or(HeaderValue::from_static("")),
            path: match scenario {
                Scenario::Webhook => WEBHOOK_PATH,
                Scenario::Events => "/v1/events",
            },
        }
    }

    /// The delivery id and ticket of request `n`.
    fn ids(&self, n: u64) -> (String, String) {
        let delivery = format!("{}-{n}", self.tag);
        // `hot_permille` of every 1000 requests, spread evenly (every 10th for 10%).
        let ticket = if (n * self.hot_permille) % 1000 < self.hot_permille {
            format!("{}-hot", self.tag)
        } else {
            delivery.clone()
        };
        (delivery, ticket)
    }

    /// The next request.
    pub fn request(&self) -> Request<Full<Bytes>> {
        let (delivery, ticket) = self.ids(self.next.fetch_add(1, Ordering::Relaxed));
        let builder = Request::post(self.path)
            .header(HOST, self.host.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let (builder, body) = match self.scenario {
            Scenario::Webhook => {
                let body = webhook_body(&ticket, &delivery);
                let timestamp =
                    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
                let signature = sign(WEBHOOK_SECRET.as_bytes(), &timestamp, body.as_bytes());
                let builder = builder
                    .header(SIGNATURE_HEADER, signature)
                    .header(TIMESTAMP_HEADER, timestamp);
                (builder, body)
            }
            Scenario::Events => {
                let body = event_body(&ticket);
                let builder = builder
                    .header(AUTHORIZATION, self.bearer.clone())
                    .header("idempotency-key", delivery);
                (builder, body)
            }
        };
        let body = Full::new(Bytes::from(body));
        builder
            .body(body.clone())
            .unwrap_or_else(|_| Request::new(body))
    }
}

/// Where the webhook source listens (kept in step with `config::WEBHOOK_SOURCE` by a test).
const WEBHOOK_PATH: &str = "/v1/ingest/webhook/zendesk";

fn webhook_body(ticket: &str, delivery: &str) -> String {
    let [a, b, c, d] = WEBHOOK_PIECES;
    let mut body = String::with_capacity(a.len() + b.len() + c.len() + d.len() + 96);
    for piece in [a, ticket, b, delivery, c, ticket, d] {
        body.push_str(piece);
    }
    body
}

fn event_body(ticket: &str) -> String {
    let [a, b] = EVENT_PIECES;
    let mut body = String::with_capacity(a.len() + b.len() + 48);
    body.push_str(a);
    body.push_str(ticket);
    body.push_str(b);
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::WEBHOOK_SOURCE;

    #[test]
    fn bodies_are_json_with_the_ids_in_place() {
        let webhook: serde_json::Value =
            serde_json::from_str(&webhook_body("t-1", "d-1")).expect("webhook JSON");
        assert_eq!(webhook["id"], "d-1");
        assert_eq!(webhook["detail"]["id"], "t-1");
        assert_eq!(webhook["subject"], "zen:ticket:t-1");
        let event: serde_json::Value = serde_json::from_str(&event_body("t-2")).expect("JSON");
        assert_eq!(event["target_entity_id"], "t-2");
        assert_eq!(WEBHOOK_PATH, format!("/v1/ingest/webhook/{WEBHOOK_SOURCE}"));
    }

    #[test]
    fn the_hot_share_is_spread_over_requests() {
        let workload = Workload::new(Scenario::Events, "r".into(), 0.1, "127.0.0.1:1");
        let tickets: Vec<_> = (0..1000).map(|n| workload.ids(n).1).collect();
        assert_eq!(tickets.iter().filter(|t| *t == "r-hot").count(), 100);
        let distinct: std::collections::HashSet<_> = tickets.iter().collect();
        assert_eq!(distinct.len(), 901);
    }
}
