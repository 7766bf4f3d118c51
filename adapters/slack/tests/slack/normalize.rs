//! `normalize` on fixtures built from Slack's documented payloads (snapshotted whole), and on
//! the edge cases the daemon relies on.

use serde_json::{Value, json};
use switchyard_core::{Channel, Disposition, Event};
use switchyard_slack::{SlackError, SlackEvent, SlackIntake, SlackSourceConfig, normalize};

use crate::{RAW_REF, fixture, snapshot, source};

fn read(name: &str) -> SlackIntake {
    normalize(&fixture(name), &source(), RAW_REF).unwrap_or_else(|e| panic!("{name}: {e:?}"))
}

fn callback(intake: &SlackIntake) -> &SlackEvent {
    match intake {
        SlackIntake::Event(event) => event,
        other => panic!("not an event_callback: {other:?}"),
    }
}

fn routed(intake: &SlackIntake) -> &Event {
    match &callback(intake).normalized.disposition {
        Disposition::Route(event) => event,
        other => panic!("not routed: {other:?}"),
    }
}

fn ineligible(intake: &SlackIntake) -> (&str, Option<&Event>) {
    match &callback(intake).normalized.disposition {
        Disposition::Ineligible { detail, event } => (detail, event.as_ref()),
        other => panic!("not ineligible: {other:?}"),
    }
}

/// Snapshots a fixture's normalisation and returns it for further assertions.
fn snap(name: &str) -> SlackIntake {
    let intake = read(&format!("{name}.json"));
    snapshot(name, &intake);
    intake
}

#[test]
fn plain_message() {
    let intake = snap("message_plain");
    let event = routed(&intake);
    assert_eq!(event.channel, Channel::Slack);
    assert_eq!(event.event_type, "message");
    assert_eq!(event.tenant_id, "acme");
    assert_eq!(event.target_entity_id, "C123ABC456:1355517523.000005");
    assert_eq!(event.raw_ref, RAW_REF);
    assert_eq!(event.payload["text"], "Hello world");
    assert_eq!(event.payload["urgent"], false);
    event.validate().unwrap();
    assert_eq!(callback(&intake).normalized.delivery_id, "Ev0PLAIN001");
    assert_eq!(
        callback(&intake).message_key.as_deref(),
        Some("slack:C123ABC456:1355517523.000005")
    );
}

#[test]
fn thread_reply_targets_its_root() {
    let intake = snap("message_in_thread");
    let event = routed(&intake);
    assert_eq!(event.target_entity_id, "C123ABC456:1482960137.003543");
    assert_eq!(event.payload["is_thread_reply"], true);
    assert_eq!(event.payload["ts"], "1483037603.017503");
    // The key is the reply's own identity, not the thread's.
    assert_eq!(
        callback(&intake).message_key.as_deref(),
        Some("slack:C123ABC456:1483037603.017503")
    );
}

#[test]
fn message_changed_is_keyed_on_the_original_message() {
    let intake = snap("message_changed");
    let event = routed(&intake);
    assert_eq!(event.event_type, "message_changed");
    assert_eq!(event.target_entity_id, "C123ABC456:1482960137.003543");
    assert_eq!(event.payload["ts"], "1483037603.017503");
    assert_eq!(
        event.payload["previous_text"],
        "Still failing for me after the restart"
    );
    assert_eq!(
        event.payload["text"],
        "Still failing for me after the restart, urgent please"
    );
    // Urgency is reported, but an edit stays an edit.
    assert_eq!(event.payload["urgent_rule"], "keyword:urgent");
    assert_eq!(
        callback(&intake).message_key.as_deref(),
        Some("slack:C123ABC456:1483037603.017503:edited:1483037700.000000")
    );
}

#[test]
fn message_deleted_is_keyed_on_the_deleted_message() {
    let intake = snap("message_deleted");
    let event = routed(&intake);
    assert_eq!(event.event_type, "message_deleted");
    assert_eq!(event.target_entity_id, "C123ABC456:1482960137.003543");
    assert_eq!(event.payload["ts"], "1483037603.017503");
    assert_eq!(event.payload["text"], Value::Null);
    assert_eq!(
        event.payload["previous_text"],
        "Still failing for me after the restart"
    );
    assert_eq!(
        callback(&intake).message_key.as_deref(),
        Some("slack:C123ABC456:1483037603.017503:deleted")
    );
}

#[test]
fn app_posts_with_bot_id_but_no_subtype_are_ineligible() {
    let intake = snap("bot_message_bot_id");
    let (detail, event) = ineligible(&intake);
    assert_eq!(detail, "bot_message");
    // The ledger still sees what was excluded.
    assert_eq!(event.unwrap().payload["bot_id"], "B0LAN0Z89");
}

#[test]
fn documented_bot_message_without_channel_is_ineligible_not_invalid() {
    // Slack's own example has no channel and an authorization without user_id.
    let intake = snap("bot_message_subtype");
    assert_eq!(ineligible(&intake), ("bot_message", None));
}

#[test]
fn app_mention() {
    let intake = snap("app_mention");
    let event = routed(&intake);
    assert_eq!(event.event_type, "app_mention");
    assert_eq!(event.target_entity_id, "C123ABC456:1515449522.000016");
}

#[test]
fn a_message_and_its_app_mention_share_a_message_key() {
    let mention = read("app_mention.json");
    let message = read("message_mentioning_app.json");
    assert_eq!(routed(&message).event_type, "message");
    assert_ne!(
        callback(&mention).normalized.delivery_id,
        callback(&message).normalized.delivery_id
    );
    assert_eq!(
        callback(&mention).message_key,
        callback(&message).message_key
    );
    assert_eq!(
        routed(&mention).target_entity_id,
        routed(&message).target_entity_id
    );
}

#[test]
fn channel_join_is_ineligible_housekeeping() {
    let intake = snap("channel_join");
    assert_eq!(ineligible(&intake).0, "channel_join");
}

#[test]
fn numeric_metadata_keeps_the_content_and_flags_urgent() {
    let intake = snap("message_metadata_numeric");
    let event = routed(&intake);
    assert_eq!(event.event_type, "urgent_message");
    assert_eq!(event.payload["urgent_rule"], "metadata");
    assert_eq!(event.payload["text"], "Checkout error rate above threshold");
    assert_eq!(event.payload["metadata"]["event_payload"]["count"], 3);
}

#[test]
fn numeric_metadata_on_an_app_mention_keeps_the_content() {
    let intake = snap("app_mention_metadata_numeric");
    let event = routed(&intake);
    assert_eq!(event.event_type, "app_mention");
    assert_eq!(event.payload["urgent"], true);
    assert_eq!(
        event.payload["text"],
        "<@U0LAN0Z89> checkout error rate above threshold"
    );
}

#[test]
fn url_verification_returns_the_challenge() {
    let intake = snap("url_verification");
    assert_eq!(
        intake,
        SlackIntake::UrlVerification {
            challenge: "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P".into()
        }
    );
}

#[test]
fn app_rate_limited_is_its_own_variant() {
    let intake = snap("app_rate_limited");
    let SlackIntake::AppRateLimited(notice) = intake else {
        panic!("{intake:?}")
    };
    assert_eq!(notice.tenant_id, "acme");
    assert_eq!(notice.delivery_id, "app_rate_limited:T0123ABC:1518467820");
    assert_eq!(notice.minute_rate_limited.timestamp(), 1_518_467_820);
}

#[test]
fn keyword_makes_a_message_urgent() {
    let intake = snap("message_urgent_keyword");
    let event = routed(&intake);
    assert_eq!(event.event_type, "urgent_message");
    assert_eq!(event.payload["urgent_rule"], "keyword:urgent");
}

#[test]
fn urgently_is_not_urgent() {
    let intake = snap("message_urgently");
    let event = routed(&intake);
    assert_eq!(event.event_type, "message");
    assert_eq!(event.payload["urgent"], false);
    assert_eq!(event.payload["urgent_rule"], Value::Null);
}

#[test]
fn file_share_is_a_message_with_its_files() {
    let intake = snap("file_share");
    let event = routed(&intake);
    assert_eq!(event.event_type, "message");
    assert_eq!(event.payload["subtype"], "file_share");
    assert_eq!(event.payload["files"][0]["mimetype"], "image/png");
    assert_eq!(event.payload["files"][1]["id"], "F12345678");
    assert_eq!(event.payload["channel_type"], "im");
}

#[test]
fn other_event_types_are_ineligible_without_an_event() {
    let intake = snap("reaction_added");
    assert_eq!(
        ineligible(&intake),
        ("unsupported_event_type:reaction_added", None)
    );
    assert_eq!(callback(&intake).normalized.delivery_id, "Ev0REACTION");
}

// ---- cases built from the fixtures, edited in place ----

/// A fixture's JSON with `edit` applied, normalised with `config`.
pub fn variant(
    name: &str,
    config: &SlackSourceConfig,
    edit: impl FnOnce(&mut Value),
) -> Result<SlackIntake, SlackError> {
    let mut value: Value = serde_json::from_slice(&fixture(name)).unwrap();
    edit(&mut value);
    normalize(&serde_json::to_vec(&value).unwrap(), config, RAW_REF)
}

pub fn edited(name: &str, edit: impl FnOnce(&mut Value)) -> Result<SlackIntake, SlackError> {
    variant(name, &source(), edit)
}

#[test]
fn every_message_in_an_urgent_channel_is_urgent() {
    let intake = edited("message_plain.json", |v| {
        v["event"]["channel"] = json!("C0INCIDENTS")
    })
    .unwrap();
    let event = routed(&intake);
    assert_eq!(event.event_type, "urgent_message");
    assert_eq!(event.payload["urgent_rule"], "channel");
}

#[test]
fn bots_route_when_ignore_bots_is_off() {
    let config = SlackSourceConfig {
        ignore_bots: false,
        ..source()
    };
    for name in ["bot_message_bot_id.json", "bot_message_subtype.json"] {
        let result = variant(name, &config, |v| {
            v["event"]["channel"] = json!("C123ABC456")
        });
        let intake = result.unwrap();
        assert_eq!(routed(&intake).event_type, "message", "{name}");
    }
}

#[test]
fn edits_and_deletions_of_bot_posts_are_bot_messages_too() {
    let changed = edited("message_changed.json", |v| {
        v["event"]["message"]["bot_id"] = json!("B0LAN0Z89")
    })
    .unwrap();
    assert_eq!(ineligible(&changed).0, "bot_message");
    let deleted = edited("message_deleted.json", |v| {
        v["event"]["previous_message"]["bot_id"] = json!("B0LAN0Z89")
    })
    .unwrap();
    assert_eq!(ineligible(&deleted).0, "bot_message");
    let slackbot = edited("message_plain.json", |v| {
        v["event"]["user"] = json!("USLACKBOT")
    })
    .unwrap();
    assert_eq!(ineligible(&slackbot).0, "bot_message");
}

#[test]
fn real_message_subtypes_route_and_housekeeping_does_not() {
    for subtype in ["thread_broadcast", "file_share", "me_message"] {
        let intake = edited("message_plain.json", |v| {
            v["event"]["subtype"] = json!(subtype)
        })
        .unwrap();
        assert_eq!(routed(&intake).payload["subtype"], subtype);
    }
    for subtype in [
        "channel_leave",
        "channel_topic",
        "channel_purpose",
        "channel_name",
        "pinned_item",
    ] {
        let intake = edited("message_plain.json", |v| {
            v["event"]["subtype"] = json!(subtype)
        })
        .unwrap();
        assert_eq!(ineligible(&intake).0, subtype);
        assert!(
            ineligible(&intake).1.is_some(),
            "the event is kept when it can be built"
        );
    }
    let unknown = edited("message_plain.json", |v| {
        v["event"]["subtype"] = json!("group_join")
    })
    .unwrap();
    assert_eq!(ineligible(&unknown).0, "unsupported_subtype:group_join");
}

#[test]
fn hidden_bookkeeping_and_unchanged_edits_are_ineligible() {
    // `message_replied` as the Events API sends it: no subtype, hidden, no text of its own.
    let replied = edited("message_plain.json", |v| {
        v["event"]["hidden"] = json!(true);
        v["event"]["message"] = json!({"type": "message", "ts": "1355517523.000005"});
    })
    .unwrap();
    assert_eq!(ineligible(&replied).0, "hidden_message");

    let unfurl = edited("message_changed.json", |v| {
        v["event"]["message"]["text"] = v["event"]["previous_message"]["text"].clone();
    })
    .unwrap();
    assert_eq!(ineligible(&unfurl).0, "message_changed_text_unchanged");

    let tombstone = edited("message_changed.json", |v| {
        v["event"]["message"]["subtype"] = json!("tombstone");
    })
    .unwrap();
    assert_eq!(ineligible(&tombstone).0, "tombstone");

    // Slack's documented example has no previous_message: the edit routes.
    let no_previous = edited("message_changed.json", |v| {
        v["event"]
            .as_object_mut()
            .unwrap()
            .remove("previous_message");
    })
    .unwrap();
    assert_eq!(routed(&no_previous).payload["previous_text"], Value::Null);
}

#[test]
fn deletion_without_previous_message_targets_the_deleted_ts() {
    let intake = edited("message_deleted.json", |v| {
        v["event"]
            .as_object_mut()
            .unwrap()
            .remove("previous_message");
    })
    .unwrap();
    assert_eq!(
        routed(&intake).target_entity_id,
        "C123ABC456:1483037603.017503"
    );
}

#[test]
fn edited_app_mention_is_keyed_like_the_matching_edit() {
    let mention = edited("app_mention.json", |v| {
        v["event"]["edited"] = json!({"user": "U061F7AUR", "ts": "1515449600.000000"});
    })
    .unwrap();
    assert_eq!(
        callback(&mention).message_key.as_deref(),
        Some("slack:C123ABC456:1515449522.000016:edited:1515449600.000000")
    );
}

#[test]
fn tenant_comes_from_the_team_map() {
    let intake = edited("message_plain.json", |v| v["team_id"] = json!("T0999XYZ")).unwrap();
    assert_eq!(routed(&intake).tenant_id, "globex");
    // A team_id inside the event does not change the tenant.
    let intake = edited("message_plain.json", |v| {
        v["event"]["team"] = json!("T0999XYZ")
    })
    .unwrap();
    assert_eq!(routed(&intake).tenant_id, "acme");
}
