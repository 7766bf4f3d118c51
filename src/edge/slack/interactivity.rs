//! `POST /v1/ingest/slack/{name}/interactivity`: Slack interactive messages (button clicks) that
//! resume waits. Verified exactly like the Events API endpoint (v0 signature over the raw form
//! body, 300 s window) before anything else; read by the Slack adapter
//! (`normalize_interaction`); decided as a resume (`waits::resume`): the button's `value` holds
//! the resume token (or `{"token": ..., "proposal_digest": ...}`), the decision is the button's
//! `action_id`, the actor the Slack user who clicked.

use axum::http::HeaderMap;
use serde_json::{Value, json};
use switchyard_core::Outcome;
use switchyard_slack::SlackSourceConfig;
use uuid::Uuid;

use super::{KIND, slack_source, unauthorized, verify};
use crate::config::ResolvedSource;
use crate::edge::body::Unverified;
use crate::edge::ingest::{Endpoint, Step, Submit};
use crate::http::intake_answer::Style;
use crate::intake::{Delivery, DeliveryBody, digest_id};
use crate::live::Live;
use crate::waits::resume::ResumeClaim;

/// The interactivity endpoint.
pub struct Interactivity;

impl Endpoint for Interactivity {
    const KIND: &'static str = KIND;
    type Source<'l> = (&'l SlackSourceConfig, Option<&'l str>);
    type Verified<'r> = ();

    fn source(source: &ResolvedSource) -> Option<Self::Source<'_>> {
        slack_source(source)
    }

    fn verify(
        (_, secret): Self::Source<'_>,
        name: &str,
        request: &Unverified,
        _live: &Live,
    ) -> Step<()> {
        verify(secret, request)
            .map_err(|error| unauthorized(name, &error, "Slack interaction refused"))
    }

    fn normalize(
        (config, _): Self::Source<'_>,
        (): (),
        name: String,
        intake_id: Uuid,
        request: &Unverified,
    ) -> Step<(Delivery, Submit)> {
        let body = &request.body;
        let action = match switchyard_slack::normalize_interaction(
            body,
            config,
            &Delivery::raw_ref(intake_id),
        ) {
            Ok(action) => action,
            Err(error) if error.outcome() == Some(Outcome::InvalidEvent) => {
                let delivery = Delivery::new(
                    intake_id,
                    name,
                    digest_id(body),
                    DeliveryBody::Invalid {
                        detail: error.detail(),
                    },
                );
                return Ok((delivery, Submit::Intake(Style::Slack)));
            }
            Err(error) => return Err(unauthorized(&name, &error, "Slack interaction refused")),
        };
        let claim = claim_of(&action);
        let mut event = action.event;
        event.payload["value"] = json!(format!(
            "redacted:sha256:{}",
            &crate::waits::token_hash(&claim.token)[..16]
        ));
        let delivery = Delivery::new(
            intake_id,
            name,
            action.delivery_id,
            DeliveryBody::Route(event),
        );
        Ok((delivery, Submit::Resume(claim, Style::Slack)))
    }

    fn content_type(_headers: &HeaderMap) -> String {
        "application/x-www-form-urlencoded".into()
    }
}

/// The resume a click claims: the token (and optionally the proposal digest) from the button's
/// value, the decision from its `action_id`, the actor from Slack's `user.id`.
fn claim_of(action: &switchyard_slack::BlockAction) -> ResumeClaim {
    let (token, proposal_digest) = match serde_json::from_str::<Value>(&action.value) {
        Ok(Value::Object(value)) => (
            value
                .get("token")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            value
                .get("proposal_digest")
                .and_then(Value::as_str)
                .map(str::to_owned),
        ),
        _ => (action.value.clone(), None),
    };
    ResumeClaim {
        token,
        proposal_digest,
        decision: action.action_id.clone(),
        actor: Some(action.user_id.clone()),
        caller: None,
    }
}
