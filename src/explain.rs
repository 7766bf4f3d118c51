//! Why a revision routes an event the way it does: the candidates of `(tenant, channel,
//! event_type)` with their priorities, the drafts and disabled workflows that were not
//! considered, and the winner. Shared by `switchyard route` and the console, so both explain
//! a decision in the same words; pure, no I/O.
//!
//! Invariant: the winner is exactly what [`TriggerIndex::choose`] picks for the same
//! workflows, so an explanation never disagrees with the decision it explains.

use switchyard_core::{Channel, Workflow, WorkflowStatus};
use switchyard_router::TriggerIndex;

/// One workflow that triggers on the event's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub workflow_id: String,
    pub priority: i32,
    pub status: WorkflowStatus,
    /// Rank among the live candidates (1 wins); `None` for drafts and disabled ones.
    pub rank: Option<usize>,
}

impl Candidate {
    pub fn wins(&self) -> bool {
        self.rank == Some(1)
    }
}

/// The explanation of one key under one revision's workflows.
#[derive(Debug, Clone)]
pub struct Explanation {
    /// Live candidates first, in the order the router tries them, then the ignored ones.
    pub candidates: Vec<Candidate>,
    /// Whether the top two live candidates share a priority (the tie broken by id).
    pub tie: bool,
}

impl Explanation {
    pub fn winner(&self) -> Option<&Candidate> {
        self.candidates.iter().find(|c| c.wins())
    }
}

pub fn explain(
    revision: &str,
    workflows: &[Workflow],
    tenant_id: &str,
    channel: Channel,
    event_type: &str,
) -> Explanation {
    let index = TriggerIndex::build(revision.to_owned(), workflows);
    let live = index
        .candidates(tenant_id, channel, event_type)
        .unwrap_or_default();
    let mut candidates: Vec<Candidate> = live
        .iter()
        .enumerate()
        .map(|(rank, c)| Candidate {
            workflow_id: c.workflow_id.to_string(),
            priority: c.priority,
            status: WorkflowStatus::Live,
            rank: Some(rank + 1),
        })
        .collect();
    for workflow in workflows
        .iter()
        .filter(|w| w.status != WorkflowStatus::Live && w.tenant_id == tenant_id)
    {
        if let Some(priority) = workflow
            .triggers
            .iter()
            .filter(|t| t.channel == channel && t.event_type == event_type)
            .map(|t| t.priority)
            .max()
        {
            candidates.push(Candidate {
                workflow_id: workflow.id.clone(),
                priority,
                status: workflow.status,
                rank: None,
            });
        }
    }
    let tie = live.len() > 1 && live[0].priority == live[1].priority;
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
        let explained = explain("r", &workflows, "acme", Channel::Webhook, "ticket.created");
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
        );
        assert!(other.candidates.is_empty() && other.winner().is_none());
    }
}
