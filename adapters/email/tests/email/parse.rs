//! `normalize` on fixture messages: every snapshot shows the whole outcome, so a reviewer sees
//! what a workflow would read.

use std::path::PathBuf;

use serde_json::{Value, json};
use switchyard_core::{Disposition, Normalized};
use switchyard_email::{EmailSourceConfig, ParseError, normalize};

fn source() -> EmailSourceConfig {
    let mut source = EmailSourceConfig::new(
        "support-inbox",
        "acme",
        "imap.example.com",
        "support@example.com",
        "SUPPORT_IMAP_PASSWORD",
    );
    source.ticket_ref = Some(r"\[#(?P<id>\d+)\]".parse().unwrap());
    source
}

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn run(name: &str) -> Result<Normalized, ParseError> {
    normalize(&fixture(name), &source(), 7, 42, "raw:fixture")
}

/// The whole outcome as JSON: what the daemon would record.
fn view(normalized: &Normalized) -> Value {
    match &normalized.disposition {
        Disposition::Route(event) => json!({
            "delivery_id": normalized.delivery_id,
            "disposition": "route",
            "event": event,
        }),
        Disposition::Ineligible { detail, event } => json!({
            "delivery_id": normalized.delivery_id,
            "disposition": "ineligible",
            "detail": detail,
            "event": event,
        }),
    }
}

fn snapshot(name: &str) -> Value {
    let normalized = run(&format!("{name}.eml")).unwrap_or_else(|e| panic!("{name}: {e}"));
    if let Disposition::Route(event)
    | Disposition::Ineligible {
        event: Some(event), ..
    } = &normalized.disposition
    {
        event.validate().unwrap();
    }
    view(&normalized)
}

macro_rules! fixture_snapshots {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            // Kept in tests/snapshots/, beside the fixtures, not under tests/email/.
            insta::with_settings!({snapshot_path => "../snapshots", prepend_module_to_snapshot => false}, {
                insta::assert_json_snapshot!(stringify!($name), snapshot(stringify!($name)));
            });
        }
    )*};
}

fixture_snapshots!(
    plain,
    multipart_alternative,
    html_only,
    quoted_printable_latin1,
    base64_utf8_subject,
    with_attachment,
    reply_with_references,
    auto_reply,
    bulk,
    own_address,
    broken_mime,
    no_message_id,
);

#[test]
fn unreadable_bytes_are_a_parse_error_with_a_stable_detail() {
    let cases = [
        ("empty.eml", ParseError::Empty, "empty_message"),
        ("garbage.eml", ParseError::NoHeaders, "no_headers"),
        (
            "no_sender_no_body.eml",
            ParseError::NoSenderNoBody,
            "no_sender_no_body",
        ),
    ];
    for (name, error, detail) in cases {
        assert_eq!(run(name), Err(error.clone()), "{name}");
        assert_eq!(error.detail(), detail);
    }
    let whitespace = normalize(b" \r\n\r\n", &source(), 1, 1, "raw:x");
    assert_eq!(whitespace, Err(ParseError::Empty));
}

#[test]
fn a_reply_contends_for_the_lock_of_the_message_that_opened_its_thread() {
    let mut source = source();
    source.ticket_ref = None;
    let opened = normalize(&fixture("plain.eml"), &source, 7, 1, "raw:1").unwrap();
    let reply = normalize(
        &fixture("reply_with_references.eml"),
        &source,
        7,
        2,
        "raw:2",
    )
    .unwrap();
    let ours = normalize(&fixture("own_address.eml"), &source, 7, 3, "raw:3").unwrap();
    let target = |n: &Normalized| match &n.disposition {
        Disposition::Route(e) | Disposition::Ineligible { event: Some(e), .. } => {
            (e.target_entity_id.clone(), e.event_type.clone())
        }
        Disposition::Ineligible { event: None, .. } => panic!("no event"),
    };
    let root = "CAF=plain-1@mail.customer.example".to_owned();
    assert_eq!(target(&opened), (root.clone(), "email.received".into()));
    assert_eq!(target(&reply), (root.clone(), "email.reply".into()));
    assert_eq!(target(&ours), (root, "email.reply".into()));
}

#[test]
fn own_address_comes_from_the_address_key_when_set() {
    let mut source = source();
    source.username = "support-login".into();
    let routed = normalize(&fixture("own_address.eml"), &source, 7, 3, "raw:3").unwrap();
    assert!(matches!(routed.disposition, Disposition::Route(_)));
    source.address = Some("support@example.com".into());
    let ours = normalize(&fixture("own_address.eml"), &source, 7, 3, "raw:3").unwrap();
    assert!(
        matches!(&ours.disposition, Disposition::Ineligible { detail, .. } if detail == "own_address")
    );
}

#[test]
fn auto_submitted_no_is_an_ordinary_message() {
    let raw = b"From: a@customer.example\r\nSubject: hi\r\nAuto-Submitted: No\r\nMessage-ID: <n@x>\r\n\r\nbody\r\n";
    let normalized = normalize(raw, &source(), 1, 1, "raw:x").unwrap();
    assert!(matches!(normalized.disposition, Disposition::Route(_)));
    let raw = b"From: a@customer.example\r\nSubject: hi\r\nAuto-Submitted: auto-generated; owner=x\r\n\r\nbody\r\n";
    let normalized = normalize(raw, &source(), 1, 1, "raw:x").unwrap();
    assert!(
        matches!(&normalized.disposition, Disposition::Ineligible { detail, .. } if detail == "auto_submitted:auto-generated")
    );
    assert_eq!(normalized.delivery_id, "1:1");
}

#[test]
fn long_bodies_are_cut_and_marked() {
    let mut raw = b"From: a@customer.example\r\nSubject: long\r\n\r\n".to_vec();
    raw.extend(std::iter::repeat_n(
        b'x',
        switchyard_email::MAX_TEXT_CHARS + 10,
    ));
    let normalized = normalize(&raw, &source(), 1, 1, "raw:x").unwrap();
    let Disposition::Route(event) = normalized.disposition else {
        panic!("not routed")
    };
    assert_eq!(
        event.payload["text"].as_str().unwrap().len(),
        switchyard_email::MAX_TEXT_CHARS
    );
    assert_eq!(event.payload["text_truncated"], true);
}
