//! normalize() on fixture bodies of both connection styles: snapshots of the events, and every
//! refusal with its outcome and detail.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use switchyard_core::{Channel, Outcome};
use switchyard_webhook::{
    CommentPayload, Connection, NormalizeError, RequestIds, SIGNATURE_HEADER, TIMESTAMP_HEADER,
    TicketPayload, WebhookSourceConfig, normalize, sign, verify,
};

use super::{fixture, routed, snapshot, source};

const RAW_REF: &str = "raw:0192a4c1-0000-7000-8000-000000000001";

fn ok(body: &[u8], invocation_id: Option<&str>) -> switchyard_core::Normalized {
    let ids = RequestIds {
        signed: None,
        invocation_id,
    };
    normalize(body, ids, &source(), RAW_REF).unwrap()
}

fn refused(body: &[u8], source: &WebhookSourceConfig) -> NormalizeError {
    let ids = RequestIds {
        signed: None,
        invocation_id: Some("inv-1"),
    };
    normalize(body, ids, source, RAW_REF).unwrap_err()
}

fn payload(normalized: &switchyard_core::Normalized) -> TicketPayload {
    serde_json::from_value(routed(normalized).payload.clone()).unwrap()
}

#[test]
fn ticket_created_event() {
    // The invocation id is ignored: event subscriptions carry their own event id.
    let normalized = ok(&fixture("ticket_created.json"), Some("inv-ignored"));
    assert_eq!(
        normalized.delivery_id,
        "cbe4028c-7239-495d-b020-f22348516046"
    );
    let event = routed(&normalized);
    assert_eq!(event.channel, Channel::Webhook);
    assert_eq!(event.event_type, "ticket.created");
    assert_eq!(event.tenant_id, "acme");
    assert_eq!(event.target_entity_id, "5158");
    assert_eq!(event.raw_ref, RAW_REF);
    snapshot("ticket_created", &normalized);
}

#[test]
fn comment_added_event() {
    let normalized = ok(&fixture("comment_added.json"), None);
    let payload = payload(&normalized);
    let comment: CommentPayload = serde_json::from_value(payload.event["comment"].clone()).unwrap();
    assert_eq!(comment.author_id.as_deref(), Some("8447388090495"));
    assert_eq!(comment.author_is_staff, Some(true));
    assert_eq!(comment.is_public, Some(true));
    assert_eq!(routed(&normalized).event_type, "ticket.comment_added");
    snapshot("comment_added", &normalized);
}

#[test]
fn status_changed_event() {
    let normalized = ok(&fixture("status_changed.json"), None);
    let payload = payload(&normalized);
    assert_eq!(
        payload.event,
        json!({"previous": "open", "current": "solved"})
    );
    assert_eq!(payload.ticket.status.as_deref(), Some("solved"));
    assert_eq!(payload.ticket.organization_id, None);
    snapshot("status_changed", &normalized);
}

#[test]
fn trigger_body_with_numeric_ids() {
    let normalized = ok(
        &fixture("trigger_numeric_ids.json"),
        Some("01JH6Q3M8X4ZQK2V5N7R9T1W3Y"),
    );
    assert_eq!(normalized.delivery_id, "01JH6Q3M8X4ZQK2V5N7R9T1W3Y");
    let payload = payload(&normalized);
    assert_eq!(payload.connection, Connection::Trigger);
    assert_eq!(payload.ticket.requester_id.as_deref(), Some("20978392"));
    assert_eq!(routed(&normalized).target_entity_id, "35436");
    snapshot("trigger_numeric_ids", &normalized);
}

#[test]
fn trigger_body_with_space_separated_tags() {
    let normalized = ok(&fixture("trigger_space_tags.json"), Some("inv-7"));
    let payload = payload(&normalized);
    assert_eq!(payload.ticket.tags, ["vip", "billing", "refund_requested"]);
    assert_eq!(payload.ticket.status.as_deref(), Some("hold"));
    assert_eq!(payload.ticket.assignee_id, None);
    snapshot("trigger_space_tags", &normalized);
}

#[test]
fn a_trigger_body_without_invocation_id_is_identified_by_its_digest() {
    let body = fixture("trigger_numeric_ids.json");
    let expected = format!("sha256:{}", hex::encode(Sha256::digest(&body)));
    assert_eq!(ok(&body, None).delivery_id, expected);
    assert_eq!(ok(&body, Some("  ")).delivery_id, expected);

    let mut other = body.clone();
    other.push(b'\n');
    assert_ne!(ok(&other, None).delivery_id, expected);
}

/// A signed trigger delivery is named by what was signed, never by the unsigned invocation
/// header; the invocation is kept as the key a retry signed afresh shares with its first copy.
#[test]
fn a_signed_trigger_body_is_identified_by_its_signed_parts() {
    const SECRET: &[u8] = b"s3cret";
    let body = fixture("trigger_numeric_ids.json");
    let now = chrono::DateTime::parse_from_rfc3339("2025-01-08T10:13:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    let tolerance = std::time::Duration::from_secs(300);
    let signed_at = |timestamp: &str| {
        let signature = sign(SECRET, timestamp, &body);
        let headers = [
            (SIGNATURE_HEADER, signature.as_str()),
            (TIMESTAMP_HEADER, timestamp),
        ];
        verify(headers.as_slice(), &body, SECRET, tolerance, now).unwrap()
    };
    let first = signed_at("2025-01-08T10:12:08Z");
    let ids = |invocation_id| RequestIds {
        signed: Some(&first),
        invocation_id,
    };
    let original = normalize(&body, ids(Some("inv-1")), &source(), RAW_REF).unwrap();
    assert_eq!(original.delivery_id, first.delivery_id());
    // The captured request resent with another invocation id, or none: the same delivery.
    for resent in [Some("inv-2"), None] {
        let again = normalize(&body, ids(resent), &source(), RAW_REF).unwrap();
        assert_eq!(again.delivery_id, original.delivery_id, "{resent:?}");
    }
    assert_eq!(
        ids(Some("inv-1")).retry_key().as_deref(),
        Some("invocation:inv-1")
    );
    assert_eq!(ids(None).retry_key(), None);

    // Zendesk's retry, signed afresh: another delivery id, the same invocation key.
    let retry = signed_at("2025-01-08T10:12:40Z");
    let retry_ids = RequestIds {
        signed: Some(&retry),
        invocation_id: Some("inv-1"),
    };
    let retried = normalize(&body, retry_ids, &source(), RAW_REF).unwrap();
    assert_ne!(retried.delivery_id, original.delivery_id);
    assert_eq!(retry_ids.retry_key(), ids(Some("inv-1")).retry_key());

    // A body refused as invalid routes nothing: signed, its bytes alone name it.
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&body)));
    assert_eq!(ids(Some("inv-2")).invalid_delivery_id(&body), digest);
    assert_eq!(retry_ids.invalid_delivery_id(&body), digest);

    // Without a signature there is no second key: the invocation is the delivery id.
    let unsigned = RequestIds {
        signed: None,
        invocation_id: Some("inv-1"),
    };
    assert_eq!(unsigned.retry_key(), None);

    // Event subscriptions name themselves, signed or not.
    let event = fixture("ticket_created.json");
    let named = normalize(&event, ids(Some("inv-1")), &source(), RAW_REF).unwrap();
    assert_eq!(named.delivery_id, "cbe4028c-7239-495d-b020-f22348516046");
}

#[test]
fn tenant_comes_from_the_source_never_the_payload() {
    let mut body: Value = serde_json::from_slice(&fixture("ticket_created.json")).unwrap();
    body["tenant_id"] = json!("globex");
    body["detail"]["tenant"] = json!("globex");
    let normalized = ok(&serde_json::to_vec(&body).unwrap(), None);
    assert_eq!(routed(&normalized).tenant_id, "acme");
}

#[test]
fn a_configured_account_accepts_its_own_payloads() {
    let pinned = WebhookSourceConfig {
        account_id: Some(22129848),
        ..source()
    };
    let normalized = normalize(
        &fixture("ticket_created.json"),
        RequestIds::default(),
        &pinned,
        RAW_REF,
    )
    .unwrap();
    assert_eq!(payload(&normalized).account_id.as_deref(), Some("22129848"));

    // A string account id is the same account.
    let body = br#"{"type":"zen:event-type:ticket.created","id":"e1","account_id":"22129848","subject":"zen:ticket:1"}"#;
    normalize(body, RequestIds::default(), &pinned, RAW_REF).unwrap();

    // A trigger body without account_id is labelled with the configured account.
    let normalized = normalize(
        &fixture("trigger_numeric_ids.json"),
        RequestIds::default(),
        &pinned,
        RAW_REF,
    )
    .unwrap();
    assert_eq!(payload(&normalized).account_id.as_deref(), Some("22129848"));
}

#[test]
fn another_account_is_unauthorized_before_anything_else_is_read() {
    let pinned = WebhookSourceConfig {
        account_id: Some(1),
        ..source()
    };
    let err = refused(&fixture("ticket_created.json"), &pinned);
    assert_eq!(err.detail(), "account_mismatch");
    assert_eq!(err.outcome(), Outcome::UnauthorizedSource);
    assert!(err.is_unauthorized());
    assert_eq!(
        err.to_string(),
        "the payload names account 22129848, but this source is for account 1"
    );

    // Even a non-ticket event from another account is an account problem first.
    assert_eq!(
        refused(&fixture("user_created.json"), &pinned).detail(),
        "account_mismatch"
    );
    // An account id that cannot be read is not the configured one.
    let odd = br#"{"account_id":{"id":1},"event_type":"ticket.updated","ticket":{"id":1}}"#;
    assert_eq!(refused(odd, &pinned).detail(), "account_mismatch");
}

/// (body, detail, part of the message) for every invalid_event refusal.
#[test]
fn invalid_bodies_are_refused_with_specific_details() {
    let cases: &[(&[u8], &str, &str)] = &[
        (b"ticket 5158 was created", "not_json", "the body is not JSON"),
        (b"", "not_json", "the body is not JSON"),
        (b"[1,2]", "not_object", "not an object"),
        (br#"{"hello":"world"}"#, "unrecognised_shape", "neither a Zendesk event"),
        (
            br#"{"type":"zen:event-type:ticket.created","id":"e1","detail":{}}"#,
            "missing_ticket_id",
            "no ticket id: neither `detail.id` nor a `subject`",
        ),
        (
            br#"{"type":"zen:event-type:ticket.created","id":"e1","detail":{"id":"5"},"subject":"zen:ticket:6"}"#,
            "ticket_id_conflict",
            "`detail.id` is 5 but `subject` names ticket 6",
        ),
        (
            br#"{"type":"zen:event-type:ticket.","id":"e1","subject":"zen:ticket:6"}"#,
            "malformed_event_type",
            "malformed event type `zen:event-type:ticket.`",
        ),
        (
            br#"{"type":"zen:something-else","id":"e1","subject":"zen:ticket:6"}"#,
            "non_ticket_event_type",
            "`zen:something-else`",
        ),
        (
            br#"{"ticket":{"id":"5"}}"#,
            "missing_event_type",
            "no `event_type`",
        ),
        (
            br#"{"event_type":"ticket.updated","ticket":{"subject":"x"}}"#,
            "missing_ticket_id",
            "the body's `ticket` has no `id`",
        ),
        (
            br#"{"event_type":"ticket.updated","ticket":{"id":""}}"#,
            "missing_ticket_id",
            "no ticket id",
        ),
        (
            br#"{"event_type":"ticket.updated"}"#,
            "missing_ticket_id",
            "no `ticket` object",
        ),
        (
            br#"{"event_type":"ticket.updated","ticket":{"id":-3}}"#,
            "malformed_ticket_id",
            "not a non-negative integer",
        ),
        (
            br#"{"event_type":"ticket.updated","ticket":{"id":"12 34"}}"#,
            "malformed_ticket_id",
            "contains whitespace",
        ),
        (
            br#"{"event_type":"ticket updated","ticket":{"id":"1"}}"#,
            "non_ticket_event_type",
            "`ticket updated`",
        ),
        (
            br#"{"event_type":"ticket.up dated","ticket":{"id":"1"}}"#,
            "malformed_event_type",
            "`ticket.up dated`",
        ),
    ];
    for (body, detail, message) in cases {
        let err = refused(body, &source());
        let shown = String::from_utf8_lossy(body);
        assert_eq!(err.detail(), *detail, "{shown}: {err}");
        assert_eq!(err.outcome(), Outcome::InvalidEvent, "{shown}");
        assert!(err.to_string().contains(message), "{shown}: {err}");
    }
}

#[test]
fn non_ticket_event_types_are_invalid() {
    let err = refused(&fixture("user_created.json"), &source());
    assert_eq!(err.detail(), "non_ticket_event_type");
    assert_eq!(
        err.to_string(),
        "non-ticket event type `zen:event-type:user.created`: only `ticket.*` events are accepted"
    );

    let trigger = br#"{"event_type":"zen:event-type:organization.created","ticket":{"id":"1"}}"#;
    assert_eq!(
        refused(trigger, &source()).detail(),
        "non_ticket_event_type"
    );
}

#[test]
fn the_ticket_id_may_come_from_the_subject_alone() {
    let body = br#"{"type":"zen:event-type:ticket.tags_changed","id":"e9","subject":"zen:ticket:77","event":{"added":["x"]}}"#;
    let normalized = ok(body, None);
    let event = routed(&normalized);
    assert_eq!(event.target_entity_id, "77");
    assert_eq!(event.event_type, "ticket.tags_changed");
    // Types without a dedicated shape keep Zendesk's `event` object as delivered.
    assert_eq!(event.payload["event"], json!({"added": ["x"]}));
}

#[test]
fn a_zendesk_style_event_type_in_a_trigger_body_means_the_same_event() {
    let body = br#"{"event_type":"zen:event-type:ticket.created","ticket":{"id":"9"}}"#;
    let normalized = ok(body, Some("inv"));
    let event = routed(&normalized);
    assert_eq!(event.event_type, "ticket.created");
    assert_eq!(
        event.payload["source_event_type"],
        "zen:event-type:ticket.created"
    );
}

#[test]
fn every_payload_key_is_present_even_for_a_minimal_body() {
    let normalized = ok(
        br#"{"event_type":"ticket.updated","ticket":{"id":9}}"#,
        None,
    );
    let payload = &routed(&normalized).payload;
    let mut keys: Vec<&str> = payload
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "account_id",
            "assignee_id",
            "connection",
            "created_at",
            "description",
            "event",
            "external_id",
            "group_id",
            "occurred_at",
            "organization_id",
            "priority",
            "requester_id",
            "source_event_type",
            "status",
            "subject",
            "tags",
            "ticket_id",
            "ticket_type",
            "updated_at",
            "via_channel",
        ]
    );
    assert_eq!(payload["event"], json!({}));
    assert_eq!(payload["tags"], json!([]));
    assert_eq!(payload["status"], Value::Null);
}
