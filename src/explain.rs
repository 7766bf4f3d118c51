//! Why a revision routes an event the way it does: the candidates of `(tenant, channel,
//! event_type)` with their priorities and each one's condition verdict for the event's payload,
//! the drafts and disabled workflows that were not considered, and the winner. Shared by
//! `switchyard route` and the console, so both explain a decision in the same words; pure, no
//! I/O.
//!
//! Invariant: the winner is exactly what [`TriggerIndex::choose_for`] picks for the same
//! workflows and payload, so an explanation never disagrees with the decision it explains.

use switchyard_core::{Channel, Workflow, WorkflowStatus};
use switchyard_router::TriggerIndex;

/// One workflow that triggers on the event's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub workflow_id: String,
    pub priority: i32,
    pub status: WorkflowStatus,
    /// Place among the live candidates in the order the router tries them (from 1); `None` for
    /// drafts and disabled ones.
    pub rank: Option<usize>,
    /// The trigger's condition as written; `None` claims every event on the key.
    pub when: Option<String>,
    /// What of its condition does not hold for this payload; `None` when it holds (or there
    /// is none).
    pub failed: Option<String>,
    /// The router chooses it: the first live candidate whose condition holds.
    pub wins: bool,
}

/// The explanation of one key under one revision's workflows.
#[derive(Debug, Clone)]
pub struct Explanation {
    /// Live candidates first, in the order the router tries them, then the ignored ones.
    pub candidates: Vec<Candidate>,
    /// Whether the winner shares its priority with the next live candidate whose condition
    /// holds (the tie broken by id).
    pub tie: bool,
}

impl Explanation {
    pub fn winner(&self) -> Option<&Candidate> {
        self.candidates.iter().find(|c| c.wins)
    }

    /// The live candidates, in the order the router tries them.
    pub fn live(&self) -> impl Iterator<Item = &Candidate> {
        self.candidates.iter().filter(|c| c.rank.is_some())
    }
}

pub fn explain(
    revision: &str,
    workflows: &[Workflow],
    tenant_id: &str,
    channel: Channel,
    event_type: &str,
    payload: &serde_json::Value,
) -> Explanation {
    let index = TriggerIndex::build(revision.to_owned(), workflows);
    let verdicts = index.verdicts(tenant_id, channel, event_type, payload);
    let winner = verdicts.iter().position(|v| v.failed.is_none());
    let mut candidates: Vec<Candidate> = verdicts
        .iter()
        .enumerate()
        .map(|(place, verdict)| Candidate {
            workflow_id: verdict.candidate.workflow_id.to_string(),
            priority: verdict.candidate.priority,
            status: WorkflowStatus::Live,
            rank: Some(place + 1),
            when: verdict.candidate.when.as_ref().map(|when| when.to_string()),
            failed: verdict.failed.clone(),
            wins: winner == Some(place),
        })
        .collect();
    let tie = winner.is_some_and(|at| {
        verdicts[at + 1..]
            .iter()
            .find(|v| v.failed.is_none())
            .is_some_and(|next| next.candidate.priority == verdicts[at].candidate.priority)
    });
    for workflow in workflows
        .iter()
        .filter(|w| w.status != WorkflowStatus::Live && w.tenant_id == tenant_id)
    {
        if let Some(trigger) = workflow
            .triggers
            .iter()
            .filter(|t| t.channel == channel && t.event_type == event_type)
            .max_by_key(|t| t.priority)
        {
            candidates.push(Candidate {
                workflow_id: workflow.id.clone(),
                priority: trigger.priority,
                status: workflow.status,
                rank: None,
                when: trigger.when.as_ref().map(|when| when.to_string()),
                failed: None,
                wins: false,
            });
        }
    }
    Explanation { candidates, tie }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use switchyard_core::Trigger;

    use super::*;

    fn workflow(id: &str, status: WorkflowStatus, priority: i32) -> Workflow {
        Workflow {
            id: id.into(),
            tenant_id: "acme".into(),
            status,
            lock_ttl: Duration::from_secs(60),
            triggers: vec![Trigger {
                channel: Channel::Webhook,
                event_type: "ticket.created".into(),
                priority,
                when: None,
            }],
        }
    }

    #[test]
    fn live_candidates_rank_by_priority_and_drafts_are_listed_as_ignored() {
        let workflows = [
            workflow("tagging", WorkflowStatus::Live, 50),
            workflow("triage", WorkflowStatus::Live, 100),
            workflow("experimental", WorkflowStatus::Draft, 1000),
            workflow("retired", WorkflowStatus::Disabled, 10),
        ];
        let explained = explain(
            "r",
            &workflows,
            "acme",
            Channel::Webhook,
            "ticket.created",
            &serde_json::json!({}),
        );
        let order: Vec<(&str, Option<usize>)> = explained
            .candidates
            .iter()
            .map(|c| (c.workflow_id.as_str(), c.rank))
            .collect();
        assert_eq!(
            order,
            [
                ("triage", Some(1)),
                ("tagging", Some(2)),
                ("experimental", None),
                ("retired", None)
            ]
        );
        assert_eq!(
            explained.winner().map(|c| c.workflow_id.as_str()),
            Some("triage")
        );
        assert!(!explained.tie);
        let other = explain(
            "r",
            &workflows,
            "globex",
            Channel::Webhook,
            "ticket.created",
            &serde_json::json!({}),
        );
        assert!(other.candidates.is_empty() && other.winner().is_none());
    }
}
