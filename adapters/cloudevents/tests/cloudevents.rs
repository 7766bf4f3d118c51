//! switchyard-cloudevents through its public API, on the CloudEvents spec's own examples:
//! snapshots of the normalised events in both content modes, every refusal, the signature.

// A failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use switchyard_cloudevents::{
    CloudEventsSourceConfig, ConfigError, Mode, NormalizeError, ParseError, VerifyError,
    delivery_id, identity, normalize, parse, sign, verify,
};
use switchyard_core::standard_webhooks::SigningKey;
use switchyard_core::{Channel, Disposition, Event, Normalized};

const RAW_REF: &str = "raw:0192a4c1-0000-7000-8000-000000000001";
/// The Standard Webhooks spec's test secret.
const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A binary-mode fixture: its header lines and its body.
fn binary_fixture(name: &str) -> (Vec<(String, String)>, Vec<u8>) {
    let raw = String::from_utf8(fixture(name)).unwrap();
    let (head, body) = raw.split_once("\n\n").unwrap();
    let headers = head
        .lines()
        .map(|line| {
            let (name, value) = line.split_once(':').unwrap();
            (name.trim().to_owned(), value.trim().to_owned())
        })
        .collect();
    (headers, body.as_bytes().to_vec())
}

fn borrowed(headers: &[(String, String)]) -> Vec<(&str, &str)> {
    headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect()
}

const STRUCTURED: [(&str, &str); 1] = [(
    "content-type",
    "application/cloudevents+json; charset=utf-8",
)];

fn source() -> CloudEventsSourceConfig {
    CloudEventsSourceConfig {
        name: "publisher".into(),
        tenant: "acme".into(),
        signing_secret_env: Some("PUBLISHER_SECRET".into()),
        channel: Channel::Webhook,
        timestamp_tolerance: CloudEventsSourceConfig::DEFAULT_TIMESTAMP_TOLERANCE,
    }
}

fn routed(normalized: &Normalized) -> &Event {
    match &normalized.disposition {
        Disposition::Route(event) => event,
        other => panic!("expected a routed event, got {other:?}"),
    }
}

/// Snapshots the whole adapter output under `tests/snapshots/<name>.snap`, keys sorted.
fn snapshot(name: &str, normalized: &Normalized) {
    let event = routed(normalized);
    event.validate().unwrap();
    let output = serde_json::json!({
        "delivery_id": normalized.delivery_id,
        "event": event,
    });
    insta::with_settings!({sort_maps => true, prepend_module_to_snapshot => false}, {
        insta::assert_json_snapshot!(name, output);
    });
}

fn structured(name: &str) -> Normalized {
    let event = parse(&STRUCTURED[..], &fixture(name)).unwrap();
    assert_eq!(event.mode, Mode::Structured);
    normalize(&event, &source(), RAW_REF).unwrap()
}

fn binary(name: &str) -> Normalized {
    let (headers, body) = binary_fixture(name);
    let event = parse(&borrowed(&headers)[..], &body).unwrap();
    assert_eq!(event.mode, Mode::Binary);
    normalize(&event, &source(), RAW_REF).unwrap()
}

#[test]
fn structured_json_data() {
    let normalized = structured("structured_json_data.json");
    assert_eq!(normalized.delivery_id, r#"["/mycontext","C234-1234-1234"]"#);
    let event = routed(&normalized);
    assert_eq!(event.event_type, "com.example.someevent");
    assert_eq!(event.target_entity_id, "mynewfile.jpg");
    assert_eq!(event.tenant_id, "acme");
    assert_eq!(event.payload["data"]["appinfoB"], 123);
    assert_eq!(event.payload["time"], "2018-04-05T17:31:00Z");
    assert!(
        event.payload["extensions"].get("unsetextension").is_none(),
        "a null extension is unset"
    );
    snapshot("structured_json_data", &normalized);
}

#[test]
fn binary_json_data_is_the_same_event_as_structured() {
    let normalized = binary("binary_json_data.http");
    let from_structured = structured("structured_json_data.json");
    assert_eq!(normalized.delivery_id, from_structured.delivery_id);
    let (b, s) = (routed(&normalized), routed(&from_structured));
    assert_eq!(b.payload["data"], s.payload["data"]);
    assert_eq!(
        (&b.event_type, &b.target_entity_id),
        (&s.event_type, &s.target_entity_id)
    );
    // Binary-mode extension values are header text.
    assert_eq!(b.payload["extensions"]["comexampleothervalue"], "5");
    assert_eq!(s.payload["extensions"]["comexampleothervalue"], 5);
    snapshot("binary_json_data", &normalized);
}

#[test]
fn string_data_in_both_modes() {
    let s = structured("structured_string_data.json");
    let b = binary("binary_string_data.http");
    assert_eq!(routed(&s).payload["data"], "I'm just a string");
    assert_eq!(routed(&b).payload["data"], "I'm just a string");
    snapshot("structured_string_data", &s);
    snapshot("binary_string_data", &b);
}

#[test]
fn base64_data_is_kept_as_sent() {
    let normalized = structured("structured_binary_data.json");
    let event = routed(&normalized);
    assert_eq!(event.payload["data"], serde_json::Value::Null);
    assert_eq!(
        event.payload["data_base64"],
        "... base64 encoded string ..."
    );
    snapshot("structured_binary_data", &normalized);
}

#[test]
fn binary_bodies_that_are_neither_json_nor_text_are_base64() {
    let headers = [
        ("ce-specversion", "1.0"),
        ("ce-id", "1"),
        ("ce-source", "/s"),
        ("ce-type", "t"),
        ("ce-subject", "e"),
        ("content-type", "application/octet-stream"),
    ];
    let event = parse(&headers[..], &[0xff, 0x00, 0x01]).unwrap();
    let normalized = normalize(&event, &source(), RAW_REF).unwrap();
    assert_eq!(routed(&normalized).payload["data_base64"], "/wAB");
}

#[test]
fn the_specs_own_examples_have_no_subject_and_are_invalid_here() {
    for event in [
        parse(&STRUCTURED[..], &fixture("spec_structured_json_data.json")).unwrap(),
        {
            let (headers, body) = binary_fixture("spec_binary_json_data.http");
            parse(&borrowed(&headers)[..], &body).unwrap()
        },
    ] {
        let error = normalize(&event, &source(), RAW_REF).unwrap_err();
        assert_eq!(error, NormalizeError::MissingSubject);
        assert_eq!(error.detail(), "missing_subject");
        assert!(!error.is_unauthorized());
    }
}

#[test]
fn batched_mode_is_refused_as_an_unsupported_media_type() {
    let headers = [("content-type", "application/cloudevents-batch+json")];
    let error = parse(&headers[..], &fixture("spec_batch.json")).unwrap_err();
    assert_eq!(error, ParseError::Batched);
    assert!(error.is_unsupported_media_type());
    assert!(
        error.to_string().contains("one event per request"),
        "{error}"
    );
}

#[test]
fn a_request_that_is_no_cloudevent_is_refused() {
    let headers = [("content-type", "application/json")];
    let error = parse(&headers[..], b"{}").unwrap_err();
    assert!(matches!(error, ParseError::NotACloudEvent(ref ct) if ct == "application/json"));
    assert!(error.is_unsupported_media_type());
}

#[test]
fn malformed_events_name_what_is_wrong() {
    let cases: &[(&str, &str)] = &[
        (r#"[1]"#, "invalid_json"),
        (r#"{"#, "invalid_json"),
        (
            r#"{"specversion":"1.0","source":"/s","type":"t"}"#,
            "missing_attribute",
        ),
        (
            r#"{"specversion":"1.0","id":"","source":"/s","type":"t"}"#,
            "missing_attribute",
        ),
        (
            r#"{"specversion":"0.3","id":"1","source":"/s","type":"t"}"#,
            "unsupported_specversion",
        ),
        (
            r#"{"specversion":"1.0","id":5,"source":"/s","type":"t"}"#,
            "invalid_attribute",
        ),
        (
            r#"{"specversion":"1.0","id":"1","source":"/s","type":"t","time":"yesterday"}"#,
            "invalid_attribute",
        ),
        (
            r#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":{},"data_base64":"AA=="}"#,
            "invalid_attribute",
        ),
        (
            r#"{"specversion":"1.0","id":"1","source":"/s","type":"t","Bad-Name":1}"#,
            "invalid_attribute",
        ),
    ];
    for (body, detail) in cases {
        let error = parse(&STRUCTURED[..], body.as_bytes()).unwrap_err();
        assert_eq!(error.detail(), *detail, "{body}: {error}");
        assert!(!error.is_unsupported_media_type());
    }
    let headers = [
        ("ce-specversion", "1.0"),
        ("ce-id", "1"),
        ("ce-source", "/s"),
        ("ce-type", "t"),
        ("content-type", "application/json"),
    ];
    let error = parse(&headers[..], b"not json").unwrap_err();
    assert_eq!(error.detail(), "invalid_json_data");
}

#[test]
fn a_tenantid_extension_must_agree_with_the_source() {
    let body = br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","subject":"e","tenantid":"globex"}"#;
    let event = parse(&STRUCTURED[..], body).unwrap();
    let error = normalize(&event, &source(), RAW_REF).unwrap_err();
    assert!(error.is_unauthorized());
    assert_eq!(error.detail(), "tenant_mismatch");
    let body = br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","subject":"e","tenantid":"acme"}"#;
    let event = parse(&STRUCTURED[..], body).unwrap();
    assert!(normalize(&event, &source(), RAW_REF).is_ok());
}

#[test]
fn the_channel_comes_from_the_source() {
    let mut source = source();
    source.channel = Channel::Chat;
    let event = parse(&STRUCTURED[..], &fixture("structured_json_data.json")).unwrap();
    assert_eq!(
        routed(&normalize(&event, &source, RAW_REF).unwrap()).channel,
        Channel::Chat
    );
}

#[test]
fn delivery_ids_of_different_pairs_never_collide() {
    assert_ne!(delivery_id("a,b", "c"), delivery_id("a", "b,c"));
    assert_ne!(delivery_id("a\"", "b"), delivery_id("a", "\"b"));
}

/// The `ce-*` headers of binary mode are outside the signature: a signed request is its signed
/// `webhook-id`, so a copy with new attributes is the same delivery; the event's
/// `(source, id)` stays as the second key. A token-authenticated request is `(source, id)`.
#[test]
fn a_signed_request_is_identified_by_its_message_id_whatever_its_ce_headers() {
    let key = SigningKey::parse(SECRET).unwrap();
    let (headers, body) = binary_fixture("binary_json_data.http");
    let now = 1_700_000_000;
    let signature = sign(&key, "msg_7", now, &body);
    let mut signed_headers = borrowed(&headers);
    signed_headers.extend(signature.iter().map(|(n, v)| (*n, v.as_str())));
    let signed = verify(
        &signed_headers[..],
        &body,
        &key,
        Duration::from_secs(300),
        now,
    )
    .unwrap();
    assert_eq!(signed.message_id(), "msg_7");

    let event = parse(&signed_headers[..], &body).unwrap();
    let first = identity(&event, Some(&signed));
    assert_eq!(first.delivery_id, "webhook-id:msg_7");
    assert_eq!(
        first.message_key.as_deref(),
        Some(delivery_id(&event.source, &event.id).as_str())
    );

    // The captured request with new attributes: the signature still holds, the identity too.
    let mut resent: Vec<(&str, &str)> = signed_headers
        .iter()
        .copied()
        .filter(|(name, _)| !matches!(*name, "ce-id" | "ce-type" | "ce-subject"))
        .collect();
    resent.extend([
        ("ce-id", "forged-1"),
        ("ce-type", "forged.type"),
        ("ce-subject", "X"),
    ]);
    let again = verify(&resent[..], &body, &key, Duration::from_secs(300), now).unwrap();
    let forged = parse(&resent[..], &body).unwrap();
    assert_eq!(forged.id, "forged-1");
    assert_eq!(
        identity(&forged, Some(&again)).delivery_id,
        first.delivery_id
    );

    // Without a signature (a bearer token authenticated it): the event's own identity.
    let by_token = identity(&event, None);
    assert_eq!(by_token.delivery_id, delivery_id(&event.source, &event.id));
    assert_eq!(by_token.message_key, None);
}

#[test]
fn signatures_verify_over_the_raw_body() {
    let key = SigningKey::parse(SECRET).unwrap();
    let body = fixture("structured_json_data.json");
    let now = 1_700_000_000;
    let signed = sign(&key, "msg_1", now, &body);
    let headers: Vec<(&str, &str)> = signed.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let tolerance = Duration::from_secs(300);
    verify(&headers[..], &body, &key, tolerance, now + 10).unwrap();

    let mut tampered = body.clone();
    tampered[0] = b' ';
    let error = verify(&headers[..], &tampered, &key, tolerance, now).unwrap_err();
    assert_eq!(error.detail(), "bad_signature");

    let error = verify(&headers[..], &body, &key, tolerance, now + 301).unwrap_err();
    assert_eq!(error.detail(), "stale_timestamp");

    let error = verify(&headers[..2], &body, &key, tolerance, now).unwrap_err();
    assert!(matches!(
        error,
        VerifyError::MissingHeader("webhook-signature")
    ));

    // An empty and a truncated signature fail (the reference verifier once accepted `v1,`).
    for bad in ["v1,", "v1,dGVzdA=="] {
        let headers = [headers[0], headers[1], ("webhook-signature", bad)];
        assert!(
            verify(&headers[..], &body, &key, tolerance, now).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn the_standard_webhooks_vector_verifies() {
    let key = SigningKey::parse(SECRET).unwrap();
    let headers = [
        ("webhook-id", "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk"),
        ("webhook-timestamp", "1649367553"),
        (
            "webhook-signature",
            "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=",
        ),
    ];
    let body = br#"{"email":"test@example.com","username":"test_user"}"#;
    verify(
        &headers[..],
        body,
        &key,
        Duration::from_secs(300),
        1_649_367_553,
    )
    .unwrap();
}

#[test]
fn config_is_checked() {
    assert!(source().validate().is_ok());
    let mut bad = source();
    bad.name = "a/b".into();
    assert!(matches!(
        bad.validate(),
        Err(ConfigError::NameNotUrlSafe(_))
    ));
    let mut bad = source();
    bad.tenant = " ".into();
    assert!(matches!(bad.validate(), Err(ConfigError::EmptyTenant(_))));
    let mut bad = source();
    bad.signing_secret_env = Some("A B".into());
    assert!(matches!(
        bad.validate(),
        Err(ConfigError::MalformedSecretEnv(_))
    ));
    let mut token_only = source();
    token_only.signing_secret_env = None;
    assert!(token_only.validate().is_ok());
}
