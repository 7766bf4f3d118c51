//! Flow control at intake, decided with the rest of a batch (no I/O): the `rate` of tenants
//! and sources, a workflow's `max_queued` (refuse) and `max_running` (defer), and coalescing
//! windows (join a pending run instead of `entity_locked`).
//!
//! Invariants:
//! - Every check counts rows the writer read inside the batch's transaction after locking the
//!   ceiling's `flow_gates` row (`Needs::gates`, sorted, so replicas take turns per key and
//!   never deadlock on them); no count lives in memory between batches, so none can leak.
//! - A rate's row holds its GCRA time ([`switchyard_core::Rate`]); only admitted deliveries
//!   move it. A refused delivery is recorded `rate_limited` with the ceiling and the instant a
//!   retry is admitted; a later copy of it is decided anew (its row replaced), not answered as
//!   a duplicate of the refusal.
//! - A delivery joins a coalescing window only while the run's dispatch is pending and
//!   unclaimed (its row is locked by the lookup, so no dispatcher claims it meanwhile); the
//!   dispatch's due time only moves later, never past the window's `max_wait`.
//! - Nothing here runs, allocates or queries when no flow control is configured
//!   ([`FlowConfig::is_empty`]).

use std::collections::{BTreeSet, HashMap, HashSet};

use switchyard_core::Event;
use switchyard_router::{Choice, LockBatch};
use switchyard_store::Millis;

use super::Delivery;

pub use crate::config::FlowConfig;

/// The `flow_gates` key of a source's rate.
fn source_key(source: &str) -> String {
    format!("rate:source:{source}")
}

fn tenant_key(tenant: &str) -> String {
    format!("rate:tenant:{tenant}")
}

/// The `flow_gates` key intake locks before counting a workflow's runs.
fn queue_key(workflow: &str) -> String {
    format!("queue:{workflow}")
}

/// What a batch must look up, what it found, and what it writes, for flow control: the
/// store's vocabulary.
pub use switchyard_store::intake::flow::{
    CountUpTo, Counts, FlowFound as Found, FlowKeys as Needs, FlowWrites as Writes, Member, Window,
};

/// What a batch must look up for flow control (empty when none is configured).
pub fn needs(deliveries: &[&Delivery], choices: &[Choice], flow: &FlowConfig) -> Needs {
    if flow.is_empty() {
        return Needs::default();
    }
    let mut gates = BTreeSet::new();
    let mut workflows: BTreeSet<CountUpTo> = BTreeSet::new();
    let mut windows = false;
    for (delivery, choice) in deliveries.iter().zip(choices) {
        let super::DeliveryBody::Route(event) = &delivery.body else {
            continue;
        };
        if flow.source_rates.contains_key(&delivery.source) {
            gates.insert(source_key(&delivery.source));
        }
        if flow.tenant_rates.contains_key(&event.tenant_id) {
            gates.insert(tenant_key(&event.tenant_id));
        }
        if let Some(candidate) = choice.candidate() {
            if let Some(ceiling) = flow.ceilings.get(&*candidate.workflow_id) {
                gates.insert(queue_key(&candidate.workflow_id));
                let running = ceiling.max_running.map_or(0, i64::from);
                workflows.insert(CountUpTo {
                    workflow: candidate.workflow_id.to_string(),
                    queued: ceiling.max_queued.map_or(0, i64::from).max(running),
                    running,
                });
            }
            windows |= flow.window(&candidate.workflow_id, event).is_some();
        }
    }
    Needs {
        gates: gates.into_iter().collect(),
        workflows: workflows.into_iter().collect(),
        windows,
    }
}

/// How flow control decided one delivery.
pub enum Admit {
    /// Route as usual; `deferred` names why its dispatch will wait for a slot.
    Route { deferred: Option<String> },
    /// `rate_limited`: the ceiling's words and when a retry is admitted.
    Refuse { detail: String, retry_at: Millis },
    /// `coalesced` into `run_id`, now due at `due_at`.
    Join { run_id: String, due_at: Millis },
}

/// The flow-control state of one batch being decided.
pub struct Gate<'a> {
    flow: &'a FlowConfig,
    now: Millis,
    tats: HashMap<String, i64>,
    moved: HashSet<String>,
    counts: HashMap<String, Counts>,
    windows: HashMap<String, Window>,
    /// New runs of this batch that coalesce: run id -> due time.
    new_due: HashMap<String, Millis>,
    stored_due: HashMap<String, Millis>,
    members: Vec<Member>,
    pub replaced: Vec<String>,
}

impl<'a> Gate<'a> {
    pub fn new(flow: &'a FlowConfig, found: Found, now: Millis) -> Self {
        Gate {
            flow,
            now,
            tats: found.tats,
            moved: HashSet::new(),
            counts: found.counts,
            windows: found.windows,
            new_due: HashMap::new(),
            stored_due: HashMap::new(),
            members: Vec::new(),
            replaced: Vec::new(),
        }
    }

    /// Decides one routable delivery before the entity lease is tried.
    pub fn admit(
        &mut self,
        delivery: &Delivery,
        event: &Event,
        choice: &Choice,
        locks: &LockBatch,
    ) -> Admit {
        if self.flow.is_empty() {
            return Admit::Route { deferred: None };
        }
        let mut deferred = None;
        let mut join = None;
        if let Some(candidate) = choice.candidate() {
            let workflow = &*candidate.workflow_id;
            match locks.holder(&event.tenant_id, &event.target_entity_id) {
                Some(holder) => {
                    if let Some(window) = self.flow.window(workflow, event)
                        && let Some(open) = self.windows.get(holder)
                        && open.open
                        && open.workflow_id == workflow
                    {
                        join = Some((holder.to_owned(), window, open.first_at));
                    }
                }
                None => {
                    let ceiling = self
                        .flow
                        .ceilings
                        .get(workflow)
                        .copied()
                        .unwrap_or_default();
                    let counts = self.counts.get(workflow).copied().unwrap_or_default();
                    if let Some(max) = ceiling.max_queued
                        && counts.queued >= i64::from(max)
                    {
                        // A queue drains as the dispatcher hands runs out; a second is the
                        // soonest a retry could find room.
                        let retry_at = self.now + 1_000;
                        return Admit::Refuse {
                            detail: format!(
                                "ceiling `max_queued` of workflow `{workflow}` reached: {} runs \
                                 wait for dispatch (max_queued = {max}); a retry is admitted \
                                 once one is dispatched, at the soonest from {}",
                                counts.queued,
                                switchyard_store::millis_rfc3339(retry_at)
                            ),
                            retry_at,
                        };
                    }
                    if let Some(max) = ceiling.max_running
                        && counts.queued + counts.running >= i64::from(max)
                    {
                        deferred = Some(format!(
                            "deferred: workflow `{workflow}` is at max_running = {max} ({} \
                             running, {} queued ahead); the dispatch waits for a free slot",
                            counts.running, counts.queued
                        ));
                    }
                }
            }
        }
        if let Err(refusal) = self.take_rates(delivery, event) {
            return refusal;
        }
        if let Some((run_id, window, first_at)) = join {
            let due_at = window.due_at(first_at, self.now);
            match self.new_due.get_mut(&run_id) {
                Some(due) => *due = due_at,
                None => {
                    if let Some(stored) = self.windows.get(&run_id) {
                        self.stored_due.insert(stored.dispatch_id.clone(), due_at);
                    }
                }
            }
            self.members.push(Member {
                run_id: run_id.clone(),
                intake_id: delivery.intake_id.to_string(),
                version: crate::event_version::version_of(&event.payload),
                joined_at: self.now,
            });
            return Admit::Join { run_id, due_at };
        }
        Admit::Route { deferred }
    }

    /// Takes one admission from each rate the delivery falls under, or none if one refuses.
    fn take_rates(&mut self, delivery: &Delivery, event: &Event) -> Result<(), Admit> {
        let now_us = self.now.saturating_mul(1_000);
        let mut taken: [Option<(String, i64)>; 2] = [None, None];
        let rates = [
            (
                "source",
                &delivery.source,
                self.flow.source_rates.get(&delivery.source),
            ),
            (
                "tenant",
                &event.tenant_id,
                self.flow.tenant_rates.get(&event.tenant_id),
            ),
        ];
        for (slot, (kind, name, rate)) in rates.into_iter().enumerate() {
            let Some(rate) = rate else { continue };
            let key = match kind {
                "source" => source_key(name),
                _ => tenant_key(name),
            };
            let tat = self.tats.get(&key).copied().unwrap_or(0);
            match rate.admit(tat, now_us) {
                Ok(next) => taken[slot] = Some((key, next)),
                Err(retry_us) => {
                    let retry_at = (retry_us + 999) / 1_000;
                    return Err(Admit::Refuse {
                        detail: format!(
                            "ceiling `rate` of {kind} `{name}` reached ({rate}); a retry is \
                             admitted from {}",
                            switchyard_store::millis_rfc3339(retry_at)
                        ),
                        retry_at,
                    });
                }
            }
        }
        for (key, next) in taken.into_iter().flatten() {
            self.moved.insert(key.clone());
            self.tats.insert(key, next);
        }
        Ok(())
    }

    /// Counts a run the batch created, and opens its window if its trigger coalesces (its
    /// dispatch is then due after the creation: what marks a dispatch as a window).
    pub fn routed(&mut self, run_id: &str, workflow: &str, event: &Event) {
        if self.flow.is_empty() {
            return;
        }
        if let Some(counts) = self.counts.get_mut(workflow) {
            counts.queued += 1;
        }
        if let Some(window) = self.flow.window(workflow, event) {
            self.new_due
                .insert(run_id.to_owned(), window.due_at(self.now, self.now));
            self.windows.insert(
                run_id.to_owned(),
                Window {
                    dispatch_id: String::new(),
                    workflow_id: workflow.to_owned(),
                    first_at: self.now,
                    open: true,
                },
            );
        }
    }

    /// When a new run's dispatch is due, if its trigger coalesces.
    pub fn due_of(&self, run_id: &str) -> Option<Millis> {
        self.new_due.get(run_id).copied()
    }

    pub fn has_new_windows(&self) -> bool {
        !self.new_due.is_empty()
    }

    pub fn into_writes(self) -> Writes {
        let mut tats: Vec<(String, i64)> = self
            .moved
            .into_iter()
            .filter_map(|key| {
                let tat = *self.tats.get(&key)?;
                Some((key, tat))
            })
            .collect();
        tats.sort();
        Writes {
            tats,
            replaced: self.replaced,
            members: self.members,
            due: self.stored_due.into_iter().collect(),
        }
    }
}

/// Seconds a sender should wait before retrying at `retry_at` (at least 1).
pub fn retry_after(retry_at: Millis, now: Millis) -> u64 {
    u64::try_from((retry_at - now).max(1))
        .unwrap_or(1)
        .div_ceil(1_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds_and_is_at_least_one() {
        assert_eq!(retry_after(10_000, 10_000), 1);
        assert_eq!(retry_after(10_001, 10_000), 1);
        assert_eq!(retry_after(11_001, 10_000), 2);
        assert_eq!(retry_after(1_810_000, 10_000), 1_800);
    }

    #[test]
    fn nothing_configured_needs_nothing() {
        let flow = FlowConfig::default();
        assert!(flow.is_empty());
        assert!(needs(&[], &[], &flow).is_empty());
    }
}
