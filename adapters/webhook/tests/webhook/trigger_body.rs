//! TRIGGER_BODY.md and the template fixture must say the same thing, and the template must be
//! something normalize() recognises.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{fixture, source};

fn doc() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/TRIGGER_BODY.md");
    std::fs::read_to_string(path).unwrap()
}

/// Every `{{...}}` in `text`.
fn placeholders(text: &str) -> BTreeSet<String> {
    text.split("{{")
        .skip(1)
        .filter_map(|rest| {
            rest.split_once("}}")
                .map(|(name, _)| name.trim().to_owned())
        })
        .collect()
}

#[test]
fn the_documented_body_is_the_fixture() {
    let doc = doc();
    let block = doc
        .split("```json\n")
        .nth(1)
        .and_then(|rest| rest.split_once("```"))
        .map(|(block, _)| block)
        .expect("TRIGGER_BODY.md has a ```json block");
    let documented: Value = serde_json::from_str(block).unwrap();
    let fixture: Value = serde_json::from_slice(&fixture("trigger_body_template.json")).unwrap();
    assert_eq!(documented, fixture);
}

#[test]
fn every_placeholder_in_the_body_is_in_the_table() {
    let doc = doc();
    let table: BTreeSet<String> = doc
        .lines()
        .filter(|line| line.starts_with("| `"))
        .flat_map(placeholders)
        .collect();
    let body = String::from_utf8(fixture("trigger_body_template.json")).unwrap();
    let used = placeholders(&body);
    assert!(!used.is_empty());
    let missing: Vec<_> = used.difference(&table).collect();
    assert!(
        missing.is_empty(),
        "placeholders missing from the table: {missing:?}"
    );
}

#[test]
fn the_unrendered_template_is_recognised_but_refused() {
    // What arrives if a body is sent without Zendesk rendering its placeholders.
    let template = fixture("trigger_body_template.json");
    let err = switchyard_webhook::normalize(
        &template,
        switchyard_webhook::RequestIds::default(),
        &source(),
        "raw:1",
    )
    .unwrap_err();
    assert_eq!(err.detail(), "malformed_ticket_id");
    assert!(
        err.to_string().contains("unrendered Zendesk placeholder"),
        "{err}"
    );
}
