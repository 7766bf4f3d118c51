//! Callbacks `normalize` refuses: unknown teams (`unauthorized_source`) and malformed bodies
//! (`invalid_event`), each with its stable detail.

use serde_json::{Value, json};
use switchyard_core::Outcome;
use switchyard_slack::{SlackError, SlackIntake, normalize};

use crate::normalize::edited;
use crate::{RAW_REF, source};

fn error(result: Result<SlackIntake, SlackError>) -> (Outcome, String) {
    let err = result.unwrap_err();
    (err.outcome().unwrap(), err.detail())
}

#[test]
fn unknown_team_is_unauthorized() {
    for name in [
        "message_plain.json",
        "app_rate_limited.json",
        "channel_join.json",
    ] {
        let got = error(edited(name, |v| v["team_id"] = json!("T0STRANGER")));
        assert_eq!(
            got,
            (
                Outcome::UnauthorizedSource,
                "no tenant claims team T0STRANGER".into()
            ),
            "{name}"
        );
    }
    // Even when the rest of the payload is broken: tenancy is checked first.
    let got = error(edited("message_plain.json", |v| {
        v["team_id"] = json!("T0STRANGER");
        v.as_object_mut().unwrap().remove("event_id");
    }));
    assert_eq!(got.0, Outcome::UnauthorizedSource);
}

#[test]
fn malformed_callbacks_are_invalid_with_a_specific_detail() {
    let invalid = |detail: &str| (Outcome::InvalidEvent, detail.to_string());
    let config = source();
    assert_eq!(
        error(normalize(b"token=abc&x=1", &config, RAW_REF)),
        invalid("not_json")
    );
    assert_eq!(
        error(normalize(b"[1,2]", &config, RAW_REF)),
        invalid("not_an_object")
    );
    assert_eq!(
        error(normalize(b"{}", &config, RAW_REF)),
        invalid("missing_field:type")
    );
    assert_eq!(
        error(normalize(br#"{"type":"block_actions"}"#, &config, RAW_REF)),
        invalid("unsupported_callback_type:block_actions")
    );
    assert_eq!(
        error(normalize(
            br#"{"type":"url_verification"}"#,
            &config,
            RAW_REF
        )),
        invalid("missing_field:challenge")
    );

    let remove = |key: &'static str| {
        move |v: &mut Value| {
            v.as_object_mut().unwrap().remove(key);
        }
    };
    let remove_in_event = |key: &'static str| {
        move |v: &mut Value| {
            v["event"].as_object_mut().unwrap().remove(key);
        }
    };
    let cases: Vec<(&str, Result<SlackIntake, SlackError>, &str)> = vec![
        (
            "message_plain.json",
            edited("message_plain.json", remove("event")),
            "missing_field:event",
        ),
        (
            "message_plain.json",
            edited("message_plain.json", remove("event_id")),
            "missing_field:event_id",
        ),
        (
            "message_plain.json",
            edited("message_plain.json", remove("team_id")),
            "missing_field:team_id",
        ),
        (
            "message_plain.json",
            edited("message_plain.json", |v| v["event_id"] = json!("")),
            "missing_field:event_id",
        ),
        (
            "message_plain.json",
            edited("message_plain.json", |v| v["event"] = json!("hello")),
            "wrong_type:event",
        ),
        (
            "message_plain.json",
            edited("message_plain.json", remove_in_event("type")),
            "missing_field:event.type",
        ),
        (
            "message_plain.json",
            edited("message_plain.json", remove_in_event("ts")),
            "missing_field:event.ts",
        ),
        (
            "message_plain.json",
            edited("message_plain.json", remove_in_event("channel")),
            "missing_field:event.channel",
        ),
        (
            "message_plain.json",
            edited("message_plain.json", |v| {
                v["event"]["ts"] = json!(1355517523.5)
            }),
            "wrong_type:event.ts",
        ),
        (
            "message_plain.json",
            edited("message_plain.json", |v| {
                v["event"]["text"] = json!({"a": 1})
            }),
            "wrong_type:event.text",
        ),
        (
            "file_share.json",
            edited("file_share.json", |v| v["event"]["files"] = json!("x")),
            "wrong_type:event.files",
        ),
        (
            "message_changed.json",
            edited("message_changed.json", remove_in_event("message")),
            "missing_field:event.message",
        ),
        (
            "message_changed.json",
            edited("message_changed.json", |v| {
                v["event"]["message"].as_object_mut().unwrap().remove("ts");
            }),
            "missing_field:event.message.ts",
        ),
        (
            "message_changed.json",
            edited("message_changed.json", |v| {
                v["event"]["message"]["thread_ts"] = json!(5)
            }),
            "wrong_type:event.message.thread_ts",
        ),
        (
            "message_deleted.json",
            edited("message_deleted.json", remove_in_event("deleted_ts")),
            "missing_field:event.deleted_ts",
        ),
        (
            "app_mention.json",
            edited("app_mention.json", remove_in_event("channel")),
            "missing_field:event.channel",
        ),
        (
            "app_rate_limited.json",
            edited("app_rate_limited.json", remove("minute_rate_limited")),
            "missing_field:minute_rate_limited",
        ),
        (
            "app_rate_limited.json",
            edited("app_rate_limited.json", |v| {
                v["minute_rate_limited"] = json!("soon")
            }),
            "wrong_type:minute_rate_limited",
        ),
        (
            "app_rate_limited.json",
            edited("app_rate_limited.json", remove("api_app_id")),
            "missing_field:api_app_id",
        ),
    ];
    for (name, result, detail) in cases {
        assert_eq!(error(result), invalid(detail), "{name}: expected {detail}");
    }
}

#[test]
fn not_json_keeps_the_parse_error_as_source() {
    let err = normalize(b"{\"type\":", &source(), RAW_REF).unwrap_err();
    let source = std::error::Error::source(&err).expect("the serde_json error is kept");
    assert!(source.to_string().contains("EOF"), "{source}");
}
