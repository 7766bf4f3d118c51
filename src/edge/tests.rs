//! The registration table: every `[[source]]` kind has exactly one channel, each says the same
//! kind everywhere, and an unknown kind is refused by config naming the known ones.

use serde::Deserialize;

use super::{CHANNELS, Stored, channel_of, routes};
use crate::config::{ServerConfig, SourceConfig};

/// Only the `[[source]]` entries of a config file.
#[derive(Debug, Deserialize)]
struct Sources {
    #[serde(default)]
    source: Vec<SourceConfig>,
}

const ALL_SOURCES: &str = include_str!("../../examples/all-sources.toml");

/// The kinds config accepts, as its refusal of an unknown one lists them.
fn configurable_kinds() -> Vec<String> {
    let error = toml::from_str::<Sources>("[[source]]\nkind = \"sms\"\nname = \"x\"\n")
        .expect_err("an unknown kind is refused");
    let text = error.to_string();
    assert!(text.contains("unknown variant `sms`"), "{text}");
    let (_, listed) = text
        .split_once("expected one of ")
        .expect("the kinds are listed");
    let listed = listed.lines().next().unwrap_or_default();
    listed
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_configurable_kind_has_exactly_one_channel() {
    let kinds = configurable_kinds();
    let of_sources: Vec<_> = CHANNELS
        .iter()
        .filter(|c| c.config_table() == "source")
        .collect();
    assert_eq!(kinds.len(), of_sources.len(), "{kinds:?}");
    for kind in &kinds {
        let registered = CHANNELS.iter().filter(|c| c.kind() == kind).count();
        assert_eq!(registered, 1, "`{kind}` has {registered} registrations");
    }
    // The one channel configured otherwise: `[[schedule]]`, reached by a poller, not HTTP.
    let others: Vec<_> = CHANNELS
        .iter()
        .filter(|c| c.config_table() != "source")
        .map(|c| (c.kind(), c.config_table(), c.routes().is_none()))
        .collect();
    assert_eq!(others, [("schedule", "schedule", true)]);
    for channel in of_sources {
        assert!(
            kinds.iter().any(|kind| kind == channel.kind()),
            "channel `{}` is no `[[source]]` kind",
            channel.kind()
        );
    }
}

#[test]
fn each_source_names_the_kind_it_was_configured_as_and_finds_its_channel() {
    let sources = toml::from_str::<Sources>(ALL_SOURCES)
        .expect("the example parses")
        .source;
    let written: toml::Value = toml::from_str(ALL_SOURCES).expect("TOML");
    let written: Vec<&str> = written["source"]
        .as_array()
        .expect("[[source]] entries")
        .iter()
        .map(|source| source["kind"].as_str().expect("a kind"))
        .collect();
    let mut covered: Vec<&str> = written.clone();
    covered.sort_unstable();
    covered.dedup();
    let mut kinds = configurable_kinds();
    kinds.sort_unstable();
    assert_eq!(covered, kinds, "examples/all-sources.toml shows every kind");
    for (source, kind) in sources.iter().zip(&written) {
        assert_eq!(source.kind(), *kind, "{source:?}");
        let channel = channel_of(source).expect("a registration");
        assert_eq!(channel.kind(), *kind);
    }
}

#[test]
fn a_channel_normalises_again_only_sources_of_its_own_kind() {
    let sources = toml::from_str::<Sources>(ALL_SOURCES)
        .expect("the example parses")
        .source;
    let stored = Stored {
        body: b"{}",
        content_type: "application/json",
        delivery_id: "d-1",
        payload: None,
        raw_ref: "raw:00000000-0000-0000-0000-000000000000",
    };
    for channel in CHANNELS {
        for source in &sources {
            let again = channel.renormalize(source, &stored);
            assert_eq!(
                again.is_some(),
                channel.kind() == source.kind(),
                "{} reading a {} source",
                channel.kind(),
                source.kind()
            );
        }
    }
}

#[test]
fn stored_bytes_tell_which_kind_received_them_only_where_a_kind_says_so() {
    let claimed = |content_type: &str| -> Vec<&str> {
        CHANNELS
            .iter()
            .filter(|c| c.stored_here(content_type))
            .map(|c| c.kind())
            .collect()
    };
    assert_eq!(claimed("message/rfc822"), ["email"]);
    assert_eq!(
        claimed("application/cloudevents+json; charset=utf-8"),
        ["cloudevents"]
    );
    assert!(claimed("application/json").is_empty());
    assert_eq!(claimed("application/x-www-form-urlencoded"), ["web_form"]);
    assert_eq!(claimed("multipart/form-data; boundary=x"), ["web_form"]);
}

#[test]
fn every_channel_s_routes_merge_into_one_router() {
    // Two channels claiming one path, or a route layer on a channel without routes, panics here.
    let _ = routes(&ServerConfig::default());
}

#[test]
fn every_channel_is_reached_one_way_routes_or_pollers() {
    for channel in CHANNELS {
        assert!(
            channel.routes().is_some() != channel.pollers().is_some(),
            "`{}` must have routes or pollers, not both or neither",
            channel.kind()
        );
    }
    let email = CHANNELS.iter().find(|c| c.kind() == "email");
    assert!(
        email.is_some_and(|c| c.pollers().is_some()),
        "email is polled"
    );
}

#[test]
fn only_the_endpoints_of_signature_only_channels_are_spared_the_token_throttle() {
    for channel in CHANNELS {
        let kind = channel.kind();
        for path in [
            format!("/v1/ingest/{kind}/acme"),
            format!("/v1/ingest/{kind}/acme/interactivity"),
            format!("/v1/ingest/{kind}/"),
        ] {
            assert_eq!(super::signed_only(&path), channel.signed_only(), "{path}");
        }
        // No endpoint of the kind: its segment must end in `/`.
        assert!(!super::signed_only(&format!("/v1/ingest/{kind}")));
        assert!(!super::signed_only(&format!("/v1/ingest/{kind}x/acme")));
    }
    for path in [
        "/v1/ingest/sms/x",
        "/v1/ingest/",
        "/v1/events",
        "/v1/runs",
        "/ui/login",
    ] {
        assert!(!super::signed_only(path), "{path}");
    }
    // What the throttle spared before channels were registered: Zendesk's and Slack's endpoints,
    // which take signatures only; CloudEvents takes tokens too, so its failures count.
    assert!(super::signed_only("/v1/ingest/webhook/zendesk"));
    assert!(super::signed_only("/v1/ingest/slack/acme/interactivity"));
    assert!(!super::signed_only("/v1/ingest/cloudevents/billing"));
}
