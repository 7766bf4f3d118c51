//! The CloudEvents run message, snapshotted whole.

use switchyard_core::{Channel, Event};
use switchyard_dispatch::message::{CONTENT_TYPE, RUN_START};
use switchyard_dispatch::{PrincipalInfo, RunInfo, RunMessage};

fn sample(traceparent: Option<String>) -> RunMessage {
    let run = RunInfo {
        id: "run_01J9Z3K2".into(),
        workflow_id: "triage".into(),
        tenant_id: "acme".into(),
        target_entity_id: "ticket-4711".into(),
        fencing_token: 42,
        lease_expires_at: "2026-01-02T03:09:05.678Z".into(),
        config_revision: "rev-7".into(),
        intake_id: "intake_01J9Z3JX".into(),
        attempt: 1,
        principal: Some(PrincipalInfo {
            id: "acme-triage-bot".into(),
            tenant: "acme".into(),
            kind: "service".into(),
            capabilities: vec!["ticket:write".into()],
        }),
        deadline: Some("2026-01-02T04:04:05.678Z".into()),
        budgets: serde_json::json!({"max_attempts": 8, "steps": 40, "cost_usd": 2.5})
            .as_object()
            .cloned(),
    };
    let event = Event {
        channel: Channel::Webhook,
        event_type: "ticket.created".into(),
        tenant_id: "acme".into(),
        target_entity_id: "ticket-4711".into(),
        payload: serde_json::json!({"subject": "Printer on fire", "priority": 1}),
        raw_ref: "raw/acme/01J9Z3JX".into(),
    };
    RunMessage::run_start(
        "dsp_01J9Z3M0",
        "switchyard://host-a",
        1_767_323_045_678,
        run,
        event,
        traceparent,
    )
}

#[test]
fn run_start_snapshot() {
    let message = sample(Some(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
    ));
    let json: serde_json::Value = serde_json::from_slice(&message.to_json()).unwrap();
    insta::assert_json_snapshot!("run_start", json);
}

#[test]
fn envelope_attributes() {
    let message = sample(None);
    assert_eq!(message.specversion, "1.0");
    assert_eq!(message.kind, RUN_START);
    assert_eq!(message.subject, "ticket-4711");
    assert_eq!(message.time, "2026-01-02T03:04:05.678Z");
    assert_eq!(CONTENT_TYPE, "application/cloudevents+json");

    let json: serde_json::Value = serde_json::from_slice(&message.to_json()).unwrap();
    let object = json.as_object().unwrap();
    assert!(!object.contains_key("traceparent"), "omitted when None");
    assert_eq!(object["type"], "switchyard.run.start");
    assert_eq!(object["datacontenttype"], "application/json");
}

#[test]
fn round_trips() {
    for traceparent in [None, Some("00-abc-def-01".to_owned())] {
        let message = sample(traceparent);
        let back: RunMessage = serde_json::from_slice(&message.to_json()).unwrap();
        assert_eq!(back, message);
    }
}
