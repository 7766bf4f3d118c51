//! The approval message's Block Kit bodies: the proposal with Approve / Reject buttons
//! (`chat.postMessage`), and the same message once its wait ended, without buttons
//! (`chat.update`). Pure.
//!
//! Invariant: both buttons carry the one value the wait was opened with (its resume token,
//! bound to the run, the wait and the proposal digest); the decision is the button's
//! `action_id` (`approve` or `reject`).

use serde_json::{Value, json};
use switchyard_store::entities::wait::{self, WaitStatus};

/// The `chat.postMessage` body.
pub(super) fn approval(channel: &str, body: &str, wait: &wait::Model, value: &str) -> Value {
    json!({
        "channel": channel,
        "text": format!("Approval needed: {body}"),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": body}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": context(wait)}]},
            {"type": "actions", "block_id": "switchyard_wait", "elements": [
                {"type": "button", "action_id": "approve", "style": "primary",
                 "text": {"type": "plain_text", "text": "Approve"}, "value": value},
                {"type": "button", "action_id": "reject", "style": "danger",
                 "text": {"type": "plain_text", "text": "Reject"}, "value": value},
            ]},
        ],
    })
}

/// The `chat.update` body once `wait` ended.
pub(super) fn resolved(channel: &str, ts: &str, body: &str, wait: &wait::Model) -> Value {
    let outcome = outcome(wait);
    json!({
        "channel": channel,
        "ts": ts,
        "text": format!("{body} ({outcome})"),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": body}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": context(wait)}]},
            {"type": "section", "text": {"type": "mrkdwn", "text": format!("*{outcome}*")}},
        ],
    })
}

fn context(wait: &wait::Model) -> String {
    let digest = wait
        .proposal_digest
        .get(..19)
        .unwrap_or(&wait.proposal_digest);
    format!(
        "Proposal `{}` (`{digest}…`) · run `{}` · wait `{}`",
        wait.proposal_id, wait.run_id, wait.wait_id
    )
}

/// How the wait ended, in words.
fn outcome(wait: &wait::Model) -> String {
    let actor = match wait.actor.as_deref() {
        Some(actor) if is_slack_user(actor) => format!("<@{actor}>"),
        Some(actor) => format!("`{actor}`"),
        None => "someone".into(),
    };
    match (wait.status, wait.decision.as_deref()) {
        (WaitStatus::Resumed, Some("approve")) => format!("Approved by {actor}"),
        (WaitStatus::Resumed, Some("reject")) => format!("Rejected by {actor}"),
        (WaitStatus::Resumed, decision) => {
            format!("Decided `{}` by {actor}", decision.unwrap_or("?"))
        }
        (WaitStatus::TimedOut, _) => "Timed out: resumed with `timeout`".into(),
        (WaitStatus::Expired, _) => "Expired: no decision before the deadline".into(),
        (WaitStatus::Cancelled, _) => "Cancelled: the run ended while it waited".into(),
        (WaitStatus::Open, _) => "Waiting".into(),
    }
}

fn is_slack_user(actor: &str) -> bool {
    actor.len() > 2
        && (actor.starts_with('U') || actor.starts_with('W'))
        && actor
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(status: WaitStatus, decision: Option<&str>, actor: Option<&str>) -> wait::Model {
        wait::Model {
            id: "w".into(),
            tenant_id: "acme".into(),
            run_id: "run-1".into(),
            workflow_id: "credit".into(),
            wait_id: "approve".into(),
            expects: "approval".into(),
            proposal_id: "P-17".into(),
            proposal_digest: format!("sha256:{}", "ab".repeat(32)),
            token_hash: "h".into(),
            status,
            on_timeout: "fail".into(),
            deadline: 0,
            decision: decision.map(str::to_owned),
            actor: actor.map(str::to_owned),
            resumed_by: None,
            dispatch_id: None,
            created_at: 0,
            ended_at: None,
        }
    }

    #[test]
    fn both_buttons_carry_the_waits_value_and_the_update_has_none() {
        let open = wait(WaitStatus::Open, None, None);
        let posted = approval("C1", "Credit 50 EUR?", &open, "{\"token\":\"t\"}");
        let buttons = posted["blocks"][2]["elements"].as_array().unwrap();
        assert_eq!(buttons.len(), 2);
        assert!(buttons.iter().all(|b| b["value"] == "{\"token\":\"t\"}"));
        assert_eq!(buttons[0]["action_id"], "approve");
        assert_eq!(buttons[1]["action_id"], "reject");
        let done = wait(WaitStatus::Resumed, Some("approve"), Some("U0MANAGER"));
        let updated = resolved("C1", "1.2", "Credit 50 EUR?", &done);
        assert!(!updated.to_string().contains("token"));
        assert!(
            updated["text"]
                .as_str()
                .unwrap()
                .contains("Approved by <@U0MANAGER>")
        );
        let expired = resolved("C1", "1.2", "x", &wait(WaitStatus::Expired, None, None));
        assert!(expired["text"].as_str().unwrap().contains("Expired"));
    }
}
