//! Slack Socket Mode frames, and each envelope taken down the path its HTTP callback takes:
//! an `events_api` payload is the Events API body (`Slack`'s endpoint), an `interactive`
//! payload is the interactivity body's `payload` field (`Interactivity`'s endpoint, form-encoded
//! as Slack would post it). Same normalisation, dedup by `event_id` / `trigger_id`, ledger row,
//! outcome and wait resume.
//!
//! Invariant: an envelope is acknowledged only when its delivery has a final answer (committed,
//! or refused for good), never before: a daemon killed in between loses nothing, because Slack
//! sends the unacknowledged envelope again and the copy is a `duplicate`.

use std::time::Instant;

use axum::http::{HeaderMap, HeaderValue, header};
use serde_json::Value;
use switchyard_core::Outcome;

use super::super::Slack;
use super::super::interactivity::Interactivity;
use crate::edge::ingest::submit_from_connection;
use crate::http::AppState;

/// One frame Slack sends on a Socket Mode connection.
#[derive(Debug)]
pub(super) enum Frame {
    /// The first frame of a connection.
    Hello,
    /// Slack will close this connection (`refresh_requested`, `warning`, `link_disabled`).
    Disconnect { reason: String },
    /// A delivery to acknowledge by its `envelope_id`.
    Envelope(Envelope),
    /// Anything else (logged, ignored).
    Other(String),
}

/// An envelope: `events_api`, `interactive` or `slash_commands`.
#[derive(Debug)]
pub(super) struct Envelope {
    pub envelope_id: String,
    pub kind: String,
    pub payload: Value,
    pub retry_attempt: u64,
}

/// Reads one text frame.
pub(super) fn parse(text: &str) -> Frame {
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return Frame::Other("not JSON".into());
    };
    let kind = value["type"].as_str().unwrap_or_default();
    match kind {
        "hello" => Frame::Hello,
        "disconnect" => Frame::Disconnect {
            reason: value["reason"].as_str().unwrap_or("unknown").to_owned(),
        },
        _ => match value["envelope_id"].as_str() {
            Some(id) if !id.is_empty() => Frame::Envelope(Envelope {
                envelope_id: id.to_owned(),
                kind: kind.to_owned(),
                payload: value["payload"].clone(),
                retry_attempt: value["retry_attempt"].as_u64().unwrap_or(0),
            }),
            _ => Frame::Other(format!("frame of type {kind:?} without envelope_id")),
        },
    }
}

/// Whether, and why, an envelope is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ack {
    /// Decided and answered with this outcome (recorded, or refused for good): acknowledge.
    Decided(Outcome),
    /// Not a kind this daemon takes (`slash_commands`, unknown types): acknowledge so Slack
    /// does not retry, record nothing.
    NotTaken,
    /// Not committed (the store is unavailable, or the source is gone): no ack, Slack retries.
    Withheld,
}

/// Takes `envelope` of source `source` down its HTTP callback's path; answers once decided.
pub(super) async fn deliver(state: &AppState, source: &str, envelope: &Envelope) -> Ack {
    let started = Instant::now();
    let mut headers = HeaderMap::new();
    if envelope.retry_attempt > 0 {
        headers.insert(
            "x-slack-retry-num",
            HeaderValue::from(envelope.retry_attempt),
        );
    }
    let response = match envelope.kind.as_str() {
        "events_api" => {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            let body = serde_json::to_vec(&envelope.payload).unwrap_or_default();
            submit_from_connection::<Slack>(state, source, headers, body.into()).await
        }
        "interactive" => {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-www-form-urlencoded"),
            );
            let body = format!(
                "payload={}",
                switchyard_slack::form_encode(&envelope.payload.to_string())
            );
            submit_from_connection::<Interactivity>(state, source, headers, body.into()).await
        }
        other => {
            tracing::info!(source, envelope_type = other, envelope_id = %envelope.envelope_id, "Socket Mode envelope of a kind this daemon does not take: acknowledged, not recorded");
            return Ack::NotTaken;
        }
    };
    let outcome = response.extensions().get::<Outcome>().copied();
    let status = response.status();
    if outcome.is_some() || status == axum::http::StatusCode::SERVICE_UNAVAILABLE {
        crate::metrics::metrics().delivery("slack", outcome, started.elapsed());
    }
    match outcome {
        Some(outcome) => Ack::Decided(outcome),
        None => {
            tracing::warn!(source, envelope_id = %envelope.envelope_id, %status, "Socket Mode envelope not committed: not acknowledged, Slack sends it again");
            Ack::Withheld
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_told_apart() {
        assert!(matches!(
            parse(r#"{"type":"hello","num_connections":2}"#),
            Frame::Hello
        ));
        assert!(matches!(
            parse(r#"{"type":"disconnect","reason":"refresh_requested"}"#),
            Frame::Disconnect { reason } if reason == "refresh_requested"
        ));
        let Frame::Envelope(envelope) = parse(
            r#"{"envelope_id":"e1","type":"events_api","payload":{"event_id":"Ev1"},"retry_attempt":2}"#,
        ) else {
            panic!("an envelope");
        };
        assert_eq!(
            (
                envelope.envelope_id.as_str(),
                envelope.kind.as_str(),
                envelope.retry_attempt
            ),
            ("e1", "events_api", 2)
        );
        assert_eq!(envelope.payload["event_id"], "Ev1");
        assert!(matches!(parse(r#"{"type":"events_api"}"#), Frame::Other(_)));
        assert!(matches!(parse("nope"), Frame::Other(_)));
    }
}
