//! Resuming a wait: one authenticated delivery, one ledger row, one named outcome, decided in a
//! transaction of its own that writes the ledger row together with the resume's effects.
//!
//! Checks, in order: a copy of a recorded delivery (`source`, `scope`, `delivery_id`) gets the first
//! copy's answer (`duplicate`, nothing new recorded); the token must name a wait of this tenant
//! whose run is still active (`no_wait_match`); a wait already resumed makes this a copy of an
//! applied resume (`duplicate`); a wait past its deadline or timed out (`wait_expired`); the
//! proposal digest must be the wait's (`reapproval_required`); the actor must be the caller
//! where the channel does not attest it (`ResumeClaim::caller`), and among the workflow's
//! `approvers` (`unauthorized_source`); the run's principal must still be allowed to
//! act (`authority_unavailable`, detail `authority_revoked: ...`); only then `resumed`. Only `resumed` changes
//! anything beyond the ledger row, and it ends the wait with a conditional update. The store
//! reads the wait and its run under row locks and writes what [`judge`] decided, in one
//! transaction (`Store::resume_wait`).

use serde_json::Value;
use switchyard_core::{Event, Outcome};
use switchyard_store::entities::wait::{self, WaitStatus};
use switchyard_store::entities::{intake, raw_delivery, run};
use switchyard_store::waits::{Resolution, Resume, ResumeKey, ResumeWrite};
use switchyard_store::{DbErr, Millis, Store};

use crate::intake::{Answer, Delivery, DeliveryBody};
use crate::live::Live;

/// What a resume delivery claims: the token, the digest of the proposal it approves, the
/// decision and who made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeClaim {
    pub token: String,
    /// `None` only for a Slack button holding a bare token: the token's own proposal, the one
    /// shown with the button.
    pub proposal_digest: Option<String>,
    pub decision: String,
    pub actor: Option<String>,
    /// Who sent the resume, where the channel itself does not say who decided (a token's
    /// name on the API and canonical events; a token's or the source's name on CloudEvents):
    /// the actor must be the caller (DESIGN.md promise 9). `None` where the channel attests
    /// the actor (a Slack button: Slack signs the user who clicked).
    pub caller: Option<String>,
}

impl ResumeClaim {
    /// The `resume` object of a payload (`{token, proposal_digest, decision, actor}`), if the
    /// payload has one, sent by `caller`: `Some(Err(detail))` when it is malformed. `actor`
    /// may be left out: it is the caller.
    pub fn in_payload(resume: Option<&Value>, caller: &str) -> Option<Result<Self, String>> {
        let resume = resume?;
        Some(Self::from_object(resume, "resume.", caller))
    }

    /// Reads the fields of `value`, naming a missing or mistyped one as `{prefix}{field}`.
    fn from_object(value: &Value, prefix: &str, caller: &str) -> Result<Self, String> {
        let Some(object) = value.as_object() else {
            return Err(format!(
                "`{}` must be an object",
                prefix.trim_end_matches('.')
            ));
        };
        let text = |field: &str| -> Result<String, String> {
            match object.get(field) {
                Some(Value::String(text)) if !text.trim().is_empty() => Ok(text.clone()),
                Some(Value::String(_)) => Err(format!("`{prefix}{field}` must not be empty")),
                Some(_) => Err(format!("`{prefix}{field}` must be a string")),
                None => Err(format!("missing `{prefix}{field}`")),
            }
        };
        let claim = Self {
            token: text("token")?,
            proposal_digest: Some(text("proposal_digest")?),
            decision: text("decision")?,
            actor: Some(match object.get("actor") {
                None => caller.to_owned(),
                Some(_) => text("actor")?,
            }),
            caller: Some(caller.to_owned()),
        };
        super::open::check_id(&format!("{prefix}decision"), &claim.decision)?;
        if let Some(actor) = &claim.actor {
            super::open::check_id(&format!("{prefix}actor"), actor)?;
        }
        Ok(claim)
    }
}

/// Replaces the token under `resume.token` (at `path`) in a payload with a marker: the ledger
/// keeps what was decided, never a live capability.
pub fn redact_token(payload: &mut Value, path: &[&str]) {
    let mut at = payload;
    for key in path {
        match at.get_mut(*key) {
            Some(next) => at = next,
            None => return,
        }
    }
    if let Some(token) = at.get_mut("resume").and_then(|r| r.get_mut("token"))
        && let Some(text) = token.as_str()
    {
        *token = Value::String(format!(
            "redacted:sha256:{}",
            &super::token_hash(text)[..16]
        ));
    }
}

/// How a resume was decided, and whether it resumed a run (the dispatcher then has work).
#[derive(Debug, Clone)]
pub struct Resolved {
    pub answer: Answer,
    pub resumed: bool,
}

/// Decides and records one resume delivery. `delivery.body` is the event that carried it
/// (`Route`); an empty `target_entity_id` is filled with the waiting run's entity.
pub async fn resume(
    store: &Store,
    live: &Live,
    delivery: &Delivery,
    claim: &ResumeClaim,
    now: Millis,
) -> Result<Resolved, DbErr> {
    let DeliveryBody::Route(event) = &delivery.body else {
        return Err(DbErr::Custom("a resume delivery carries its event".into()));
    };
    let token_hash = super::token_hash(&claim.token);
    let key = ResumeKey {
        source: &delivery.source,
        scope: &delivery.scope,
        delivery_id: &delivery.delivery_id,
        token_hash: &token_hash,
        tenant_id: &event.tenant_id,
    };
    let intake_id = delivery.intake_id.to_string();
    let resolution = store
        .resume_wait(&key, now, |wait, run| {
            let verdict = judge(live, wait, run, claim, now);
            let resume = match (verdict.outcome, wait, run) {
                (Outcome::Resumed, Some(wait), Some(run)) => Some(Resume {
                    decision: claim.decision.clone(),
                    actor: claim.actor.clone(),
                    target: live.target_of(&run.workflow_id).to_owned(),
                    history_detail: format!(
                        "wait {} resumed by delivery {intake_id}: decision {}{}",
                        wait.wait_id,
                        claim.decision,
                        claim
                            .actor
                            .as_ref()
                            .map(|a| format!(" by {a}"))
                            .unwrap_or_default()
                    ),
                }),
                _ => None,
            };
            let write = ResumeWrite {
                resume,
                row: ledger_row(delivery, event, &verdict, run, live, now),
                raw: delivery.raw.as_ref().map(|raw| raw_delivery::Model {
                    id: intake_id.clone(),
                    source: delivery.source.clone(),
                    content_type: raw.content_type.clone(),
                    body: raw.bytes.to_vec(),
                    received_at: delivery.received_at,
                }),
            };
            (write, verdict.first_outcome)
        })
        .await?;
    Ok(match resolution {
        Resolution::Duplicate(first) => Resolved {
            answer: crate::intake::duplicate_of_row(&first),
            resumed: false,
        },
        Resolution::Decided {
            row,
            resumed,
            with: first_outcome,
        } => {
            let mut answer = crate::intake::answer_of_row(&row);
            answer.first_outcome = first_outcome;
            Resolved { answer, resumed }
        }
    })
}

/// The verdict on a resume, before anything is written.
struct Verdict {
    outcome: Outcome,
    detail: String,
    first_outcome: Option<Outcome>,
}

fn judge(
    live: &Live,
    wait: Option<&wait::Model>,
    run: Option<&run::Model>,
    claim: &ResumeClaim,
    now: Millis,
) -> Verdict {
    let verdict = |outcome, detail: String| Verdict {
        outcome,
        detail,
        first_outcome: None,
    };
    let (Some(wait), Some(run)) = (wait, run) else {
        return verdict(
            Outcome::NoWaitMatch,
            "the resume token names no wait of this tenant".into(),
        );
    };
    match wait.status {
        WaitStatus::Resumed => {
            return Verdict {
                outcome: Outcome::Duplicate,
                detail: format!(
                    "wait {} of run {} was already resumed by delivery {} (decision {})",
                    wait.wait_id,
                    run.id,
                    wait.resumed_by.as_deref().unwrap_or("?"),
                    wait.decision.as_deref().unwrap_or("?")
                ),
                first_outcome: Some(Outcome::Resumed),
            };
        }
        WaitStatus::TimedOut | WaitStatus::Expired => {
            return verdict(
                Outcome::WaitExpired,
                format!(
                    "wait {} of run {} timed out at {} (on_timeout {})",
                    wait.wait_id,
                    run.id,
                    switchyard_store::millis_rfc3339(wait.deadline),
                    wait.on_timeout
                ),
            );
        }
        WaitStatus::Cancelled => {
            return verdict(
                Outcome::NoWaitMatch,
                format!("wait {} of run {} ended with its run", wait.wait_id, run.id),
            );
        }
        WaitStatus::Open => {}
    }
    if !run.status.is_active() {
        return verdict(
            Outcome::NoWaitMatch,
            format!(
                "run {} is {}: its wait {} is no longer open",
                run.id,
                run.status.as_str(),
                wait.wait_id
            ),
        );
    }
    if now >= wait.deadline {
        return verdict(
            Outcome::WaitExpired,
            format!(
                "wait {} of run {} expired at {}",
                wait.wait_id,
                run.id,
                switchyard_store::millis_rfc3339(wait.deadline)
            ),
        );
    }
    if let Some(digest) = &claim.proposal_digest
        && digest != &wait.proposal_digest
    {
        // The detail never names the expected digest: a caller holding a token could
        // otherwise learn it and approve a proposal it was never shown.
        return verdict(
            Outcome::ReapprovalRequired,
            format!(
                "wait {} of run {} is for another version of proposal {} than digest {digest}: \
                 the proposal changed after it was shown",
                wait.wait_id, run.id, wait.proposal_id
            ),
        );
    }
    if let Some(caller) = &claim.caller
        && claim.actor.as_ref() != Some(caller)
    {
        return verdict(
            Outcome::UnauthorizedSource,
            format!(
                "actor {} is not the caller `{caller}`: a resume sent with a token (or by a \
                 CloudEvents source) decides as that token (or source), never for someone else",
                claim.actor.as_deref().unwrap_or("(none)"),
            ),
        );
    }
    if let Some(approvers) = live.approvers_of(&run.workflow_id) {
        let allowed = claim
            .actor
            .as_ref()
            .is_some_and(|actor| approvers.iter().any(|a| a == actor));
        if !allowed {
            return verdict(
                Outcome::UnauthorizedSource,
                format!(
                    "actor {} is not among the approvers of workflow {}",
                    claim.actor.as_deref().unwrap_or("(none)"),
                    run.workflow_id
                ),
            );
        }
    }
    // The run acts under its principal: one that may no longer act (suspended, expired,
    // removed, lacking a capability the workflow requires) resumes nothing. The wait stays
    // open: a reload may reinstate the principal before the deadline.
    if let Some(principal) = run.principal_id.as_deref()
        && let Err(refusal) = live.authority.check_run(&run.workflow_id, principal, now)
    {
        return verdict(
            Outcome::AuthorityUnavailable,
            format!(
                "{}: {refusal} ({}); wait {} of run {} stays open",
                crate::authority::REVOKED,
                refusal.reason_word(),
                wait.wait_id,
                run.id
            ),
        );
    }
    verdict(
        Outcome::Resumed,
        format!(
            "resumed wait {} of run {} (proposal {}): decision {}",
            wait.wait_id, run.id, wait.proposal_id, claim.decision
        ),
    )
}

fn ledger_row(
    delivery: &Delivery,
    event: &Event,
    verdict: &Verdict,
    run: Option<&run::Model>,
    live: &Live,
    now: Millis,
) -> intake::Model {
    // A run is named on the row only when the token named one of this tenant's waits.
    let target_entity_id = match (event.target_entity_id.is_empty(), run) {
        (false, _) => event.target_entity_id.clone(),
        (true, Some(run)) => run.target_entity_id.clone(),
        (true, None) => "-".to_owned(),
    };
    intake::Model {
        id: delivery.intake_id.to_string(),
        source: delivery.source.clone(),
        delivery_id: delivery.delivery_id.clone(),
        scope: delivery.scope.clone(),
        outcome: verdict.outcome.as_str().to_owned(),
        detail: Some(verdict.detail.clone()),
        channel: Some(event.channel.as_str().to_owned()),
        event_type: Some(event.event_type.clone()),
        tenant_id: Some(event.tenant_id.clone()),
        target_entity_id: Some(target_entity_id),
        payload: delivery.payload_text.clone(),
        raw_ref: Some(event.raw_ref.clone()),
        run_id: run.map(|r| r.id.clone()),
        workflow_id: run.map(|r| r.workflow_id.clone()),
        held_by_run_id: None,
        message_key: None,
        config_revision: live.revision().to_owned(),
        received_at: delivery.received_at,
        decided_at: now,
        traceparent: delivery.trace.as_ref().map(|t| t.traceparent.clone()),
        tracestate: delivery.trace.as_ref().and_then(|t| t.tracestate.clone()),
        shadow: None,
        replay_id: delivery.replay.as_ref().map(|r| r.replay_id.clone()),
        replay_of: delivery.replay.as_ref().map(|r| r.original.clone()),
    }
}
