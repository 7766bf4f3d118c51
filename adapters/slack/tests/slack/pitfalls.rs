//! Why content and the event_callback envelope are read from raw JSON: slack-morphism 2.31's
//! typed events lose or refuse real payloads. If an upgrade fixes these, these tests fail and
//! the raw reading can be reconsidered; the adapter's own results are checked beside them.

use slack_morphism::events::{SlackEventCallbackBody, SlackPushEvent};
use switchyard_core::Disposition;
use switchyard_slack::{SlackIntake, normalize};

use crate::{RAW_REF, fixture, source};

fn typed(name: &str) -> Result<SlackPushEvent, serde_json::Error> {
    serde_json::from_slice(&fixture(name))
}

fn our_text(name: &str) -> serde_json::Value {
    let SlackIntake::Event(event) = normalize(&fixture(name), &source(), RAW_REF).unwrap() else {
        panic!("not an event")
    };
    let Disposition::Route(event) = event.normalized.disposition else {
        panic!("not routed")
    };
    event.payload["text"].clone()
}

#[test]
fn numeric_metadata_empties_a_typed_message_but_not_ours() {
    let SlackPushEvent::EventCallback(callback) = typed("message_metadata_numeric.json").unwrap()
    else {
        panic!("not an event_callback")
    };
    let SlackEventCallbackBody::Message(message) = callback.event else {
        panic!("still parses as a message")
    };
    assert!(
        message.content.is_none(),
        "slack-morphism drops text, files and metadata"
    );
    assert_eq!(
        our_text("message_metadata_numeric.json"),
        "Checkout error rate above threshold"
    );

    // With string-only metadata the same message keeps its content in slack-morphism.
    let mut value: serde_json::Value =
        serde_json::from_slice(&fixture("message_metadata_numeric.json")).unwrap();
    value["event"]["metadata"]["event_payload"] = serde_json::json!({"urgent": "true"});
    let SlackPushEvent::EventCallback(callback) = serde_json::from_value(value).unwrap() else {
        panic!()
    };
    let SlackEventCallbackBody::Message(message) = callback.event else {
        panic!()
    };
    assert!(message.content.is_some_and(|c| c.text.is_some()));
}

#[test]
fn numeric_metadata_turns_a_typed_app_mention_into_unknown() {
    let SlackPushEvent::EventCallback(callback) =
        typed("app_mention_metadata_numeric.json").unwrap()
    else {
        panic!("not an event_callback")
    };
    assert!(
        matches!(callback.event, SlackEventCallbackBody::Unknown(_)),
        "{:?}",
        callback.event
    );
    assert_eq!(
        our_text("app_mention_metadata_numeric.json"),
        "<@U0LAN0Z89> checkout error rate above threshold"
    );
}

#[test]
fn slacks_documented_bot_message_envelope_does_not_parse_as_typed() {
    // Its authorization has no user_id, which SlackEventAuthorization requires.
    let err = typed("bot_message_subtype.json").unwrap_err();
    assert!(err.to_string().contains("user_id"), "{err}");
    assert!(normalize(&fixture("bot_message_subtype.json"), &source(), RAW_REF).is_ok());
}
