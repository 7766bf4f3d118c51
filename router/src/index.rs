//! The trigger index: live workflows keyed by (tenant, channel, event_type), best first.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use switchyard_core::{Channel, Workflow, WorkflowStatus};

/// A workflow that triggers on a key, with the priority it claims it at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub workflow_id: Arc<str>,
    pub priority: i32,
    pub lock_ttl: Duration,
}

/// Live workflows by trigger, rebuilt whole for every config revision.
///
/// Each key's candidates are sorted once at build time (priority descending, then workflow id
/// ascending), so choosing is one map lookup.
#[derive(Debug)]
pub struct TriggerIndex {
    revision: String,
    by_trigger: DashMap<String, Arc<[Candidate]>>,
}

/// Two or more live workflows claiming one trigger key at the same priority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityTie {
    pub tenant_id: String,
    pub channel: Channel,
    pub event_type: String,
    pub priority: i32,
    pub workflow_ids: Vec<String>,
}

fn key(tenant_id: &str, channel: Channel, event_type: &str) -> String {
    // The unit separator cannot appear in a configured tenant or event type.
    let mut key = String::with_capacity(tenant_id.len() + event_type.len() + 12);
    key.push_str(tenant_id);
    key.push('\u{1f}');
    key.push_str(channel.as_str());
    key.push('\u{1f}');
    key.push_str(event_type);
    key
}

impl TriggerIndex {
    /// Indexes the live workflows among `workflows`; drafts and disabled ones never match.
    pub fn build(revision: impl Into<String>, workflows: &[Workflow]) -> Self {
        let mut grouped: std::collections::HashMap<String, Vec<Candidate>> =
            std::collections::HashMap::new();
        for workflow in workflows
            .iter()
            .filter(|w| w.status == WorkflowStatus::Live)
        {
            let workflow_id: Arc<str> = Arc::from(workflow.id.as_str());
            for trigger in &workflow.triggers {
                let candidates = grouped
                    .entry(key(
                        &workflow.tenant_id,
                        trigger.channel,
                        &trigger.event_type,
                    ))
                    .or_default();
                // One workflow listing the same trigger twice keeps its highest priority.
                match candidates.iter_mut().find(|c| c.workflow_id == workflow_id) {
                    Some(existing) => existing.priority = existing.priority.max(trigger.priority),
                    None => candidates.push(Candidate {
                        workflow_id: workflow_id.clone(),
                        priority: trigger.priority,
                        lock_ttl: workflow.lock_ttl,
                    }),
                }
            }
        }
        let by_trigger = DashMap::with_capacity(grouped.len());
        for (key, mut candidates) in grouped {
            candidates.sort_by(|a, b| {
                b.priority
                    .cmp(&a.priority)
                    .then_with(|| a.workflow_id.cmp(&b.workflow_id))
            });
            by_trigger.insert(key, Arc::from(candidates));
        }
        Self {
            revision: revision.into(),
            by_trigger,
        }
    }

    /// The config revision this index was built from.
    pub fn revision(&self) -> &str {
        &self.revision
    }

    /// How many distinct trigger keys are indexed.
    pub fn len(&self) -> usize {
        self.by_trigger.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_trigger.is_empty()
    }

    /// Every live candidate for the key, best first; empty when nothing triggers on it.
    pub fn candidates(
        &self,
        tenant_id: &str,
        channel: Channel,
        event_type: &str,
    ) -> Option<Arc<[Candidate]>> {
        self.by_trigger
            .get(&key(tenant_id, channel, event_type))
            .map(|entry| entry.value().clone())
    }

    /// The workflow that wins the key: highest priority, ties broken by the smaller id.
    pub fn choose(&self, tenant_id: &str, channel: Channel, event_type: &str) -> Option<Candidate> {
        self.by_trigger
            .get(&key(tenant_id, channel, event_type))
            .and_then(|entry| entry.value().first().cloned())
    }

    /// Every key where live workflows share a priority, for `switchyard check` to warn about.
    pub fn priority_ties(&self) -> Vec<PriorityTie> {
        let mut ties = Vec::new();
        for entry in self.by_trigger.iter() {
            let mut parts = entry.key().split('\u{1f}');
            let (Some(tenant_id), Some(channel), Some(event_type)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let Ok(channel) = channel.parse::<Channel>() else {
                continue;
            };
            for group in entry.value().chunk_by(|a, b| a.priority == b.priority) {
                if group.len() > 1 {
                    ties.push(PriorityTie {
                        tenant_id: tenant_id.to_owned(),
                        channel,
                        event_type: event_type.to_owned(),
                        priority: group[0].priority,
                        workflow_ids: group.iter().map(|c| c.workflow_id.to_string()).collect(),
                    });
                }
            }
        }
        ties.sort_by(|a, b| {
            (&a.tenant_id, a.channel, &a.event_type).cmp(&(&b.tenant_id, b.channel, &b.event_type))
        });
        ties
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_core::Trigger;

    fn workflow(
        id: &str,
        tenant: &str,
        status: WorkflowStatus,
        triggers: &[(&str, i32)],
    ) -> Workflow {
        Workflow {
            id: id.into(),
            tenant_id: tenant.into(),
            status,
            lock_ttl: Workflow::DEFAULT_LOCK_TTL,
            triggers: triggers
                .iter()
                .map(|(event_type, priority)| Trigger {
                    channel: Channel::Webhook,
                    event_type: (*event_type).into(),
                    priority: *priority,
                })
                .collect(),
        }
    }

    /// One routing rule per row: the event (tenant, event_type) and the workflow that must win.
    #[test]
    fn choose_follows_status_tenant_and_priority() {
        use WorkflowStatus::*;
        let workflows = [
            workflow("triage", "acme", Live, &[("ticket.created", 100)]),
            workflow(
                "tagging",
                "acme",
                Live,
                &[("ticket.created", 50), ("ticket.updated", 10)],
            ),
            workflow("experimental", "acme", Draft, &[("ticket.created", 1000)]),
            workflow(
                "retired",
                "acme",
                Disabled,
                &[("ticket.created", 2000), ("ticket.solved", 5)],
            ),
            workflow("other-tenant", "globex", Live, &[("ticket.created", 500)]),
            workflow("b-tied", "acme", Live, &[("ticket.merged", 7)]),
            workflow("a-tied", "acme", Live, &[("ticket.merged", 7)]),
        ];
        let index = TriggerIndex::build("rev1", &workflows);
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("acme", "ticket.created", Some("triage")),
            ("acme", "ticket.updated", Some("tagging")),
            ("acme", "ticket.solved", None),
            ("acme", "ticket.deleted", None),
            ("globex", "ticket.created", Some("other-tenant")),
            ("globex", "ticket.updated", None),
            ("initech", "ticket.created", None),
            ("acme", "ticket.merged", Some("a-tied")),
        ];
        for (tenant, event_type, expected) in cases {
            let chosen = index.choose(tenant, Channel::Webhook, event_type);
            assert_eq!(
                chosen.as_ref().map(|c| &*c.workflow_id),
                *expected,
                "{tenant} {event_type}"
            );
        }
        assert_eq!(index.choose("acme", Channel::Slack, "ticket.created"), None);
        assert_eq!(index.revision(), "rev1");
    }

    #[test]
    fn ties_are_reported_once_per_key() {
        use WorkflowStatus::*;
        let workflows = [
            workflow("b", "acme", Live, &[("x", 7), ("y", 1)]),
            workflow("a", "acme", Live, &[("x", 7), ("y", 2)]),
            workflow("c", "acme", Draft, &[("x", 7)]),
        ];
        let ties = TriggerIndex::build("r", &workflows).priority_ties();
        assert_eq!(ties.len(), 1);
        assert_eq!(ties[0].event_type, "x");
        assert_eq!(ties[0].workflow_ids, ["a", "b"]);
    }
}
