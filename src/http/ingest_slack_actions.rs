//! `POST /v1/ingest/slack/{name}/interactivity`: Slack interactive messages (button clicks) that
//! resume waits. Verified exactly like the Events API endpoint (v0 signature over the raw form
//! body, 300 s window) before anything else; read by the Slack adapter
//! (`normalize_interaction`); decided as a resume (`waits::resume`): the button's `value` holds
//! the resume token (or `{"token": ..., "proposal_digest": ...}`), the decision is the button's
//! `action_id`, the actor the Slack user who clicked.

use axum::Router;
use axum::extract::{Extension, Path, Request, State};
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};
use switchyard_core::Outcome;
use uuid::Uuid;

use super::AppState;
use super::ingest_body::{self, UnverifiedBudget};
use super::intake_answer::{self, Style};
use crate::intake::{Delivery, DeliveryBody, Raw, digest_id};
use crate::waits::resume::ResumeClaim;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/ingest/slack/{name}/interactivity", post(ingest))
}

async fn ingest(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Extension(budget): Extension<UnverifiedBudget>,
    request: Request,
) -> Response {
    let live = state.live.current();
    let received = ingest_body::receive(
        &budget,
        &live,
        "slack",
        &name,
        request,
        super::ingest_slack::slack_source,
    )
    .await;
    let ((config, secret), request) = match received {
        Ok(received) => received,
        Err(refused) => return refused,
    };
    let body = request.body.clone();
    let header = |name: &str| request.headers.get(name).and_then(|v| v.to_str().ok());
    if let Err(error) = switchyard_slack::verify(
        header("x-slack-request-timestamp"),
        header("x-slack-signature"),
        &body,
        secret,
        chrono::Utc::now(),
    ) {
        return unauthorized(&name, &error);
    }
    let intake_id = Uuid::now_v7();
    let raw = Raw {
        content_type: "application/x-www-form-urlencoded".into(),
        bytes: body.clone(),
    };
    let action =
        match switchyard_slack::normalize_interaction(&body, config, &Delivery::raw_ref(intake_id))
        {
            Ok(action) => action,
            Err(error) if error.outcome() == Some(Outcome::InvalidEvent) => {
                let mut delivery = Delivery::new(
                    intake_id,
                    name,
                    digest_id(&body),
                    DeliveryBody::Invalid {
                        detail: error.detail(),
                    },
                );
                delivery.raw = Some(raw);
                return intake_answer::submit(&state, delivery, Style::Slack).await;
            }
            Err(error) => return unauthorized(&name, &error),
        };
    let claim = claim_of(&action);
    let mut event = action.event;
    event.payload["value"] = json!(format!(
        "redacted:sha256:{}",
        &crate::waits::token_hash(&claim.token)[..16]
    ));
    let mut delivery = Delivery::new(
        intake_id,
        name,
        action.delivery_id,
        DeliveryBody::Route(event),
    );
    delivery.raw = Some(raw);
    super::waits::submit_resume(&state, delivery, claim, Style::Slack).await
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

fn unauthorized(source: &str, error: &switchyard_slack::SlackError) -> Response {
    let detail = error.detail();
    tracing::warn!(
        source,
        detail,
        outcome = "unauthorized_source",
        "Slack interaction refused"
    );
    intake_answer::refuse(Outcome::UnauthorizedSource, detail, Style::Slack)
}
