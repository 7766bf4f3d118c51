//! Flow control's part of a batch: the `flow_gates` rows it locks, the runs it counts, the
//! coalescing windows it reads, and the rows it writes. What these mean (ceilings, rates,
//! windows) is decided in the daemon; here they are keys and rows.
//!
//! Invariant: every ceiling is counted from rows read in the batch's transaction after its
//! `flow_gates` row is locked (names sorted), never from memory; a count reads at most the
//! ceiling's worth of index entries.

use std::collections::HashMap;

use crate::Millis;
use crate::entities::entity_lock;

/// What a batch must look up for flow control (empty when none is configured).
#[derive(Debug, Default)]
pub struct FlowKeys {
    /// `flow_gates` keys to lock (created if missing), sorted.
    pub gates: Vec<String>,
    /// Workflows whose queued and running runs to count, sorted.
    pub workflows: Vec<CountUpTo>,
    /// Whether the holders' dispatches must be read as windows (a chosen trigger coalesces).
    pub windows: bool,
}

impl FlowKeys {
    pub fn is_empty(&self) -> bool {
        self.gates.is_empty() && self.workflows.is_empty() && !self.windows
    }
}

/// A workflow whose runs a batch counts, and how far: a ceiling only needs to know whether it
/// is reached, so no count reads more index entries than the ceiling.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CountUpTo {
    pub workflow: String,
    /// Queued runs to count at most.
    pub queued: i64,
    /// Running runs to count at most (0: not needed).
    pub running: i64,
}

/// A workflow's runs as the batch found them (each at most its [`CountUpTo`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    /// Created, not yet dispatched.
    pub queued: i64,
    /// Dispatched, not finished.
    pub running: i64,
}

/// A run's pending dispatch, as a coalescing window.
#[derive(Debug, Clone)]
pub struct Window {
    pub dispatch_id: String,
    pub workflow_id: String,
    /// When the run was created: its first member's arrival.
    pub first_at: Millis,
    /// Pending and not claimed: the run has not been handed to anyone yet.
    pub open: bool,
}

impl Window {
    /// A holder's dispatch row as a window.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn of(
        dispatch_id: String,
        workflow_id: String,
        status: &str,
        claimed_by: Option<String>,
        attempts: i32,
        series: i32,
        due_at: Millis,
        created_at: Millis,
    ) -> Self {
        Self {
            dispatch_id,
            workflow_id,
            first_at: created_at,
            // Never handed to anyone (no attempt, no claim in flight, first series), and opened
            // as a window: only a coalescing trigger creates a dispatch due after its creation.
            open: status == "pending"
                && claimed_by.is_none()
                && attempts == 0
                && series == 1
                && due_at > created_at,
        }
    }
}

/// What the store held for a batch's [`FlowKeys`].
#[derive(Debug, Default)]
pub struct FlowFound {
    /// Each gate's stored GCRA time (0 for a row just created).
    pub tats: HashMap<String, i64>,
    pub counts: HashMap<String, Counts>,
    /// By run id: the windows of the runs holding the batch's entities.
    pub windows: HashMap<String, Window>,
}

/// A delivery that joined a pending run.
#[derive(Debug, Clone)]
pub struct Member {
    pub run_id: String,
    pub intake_id: String,
    pub version: Option<String>,
    pub joined_at: Millis,
}

/// What flow control adds to a batch's writes.
#[derive(Debug, Default)]
pub struct FlowWrites {
    /// `(gate key, new GCRA time)` of the rates that admitted deliveries.
    pub tats: Vec<(String, i64)>,
    /// Ledger rows (and their raw bytes) of earlier `rate_limited` copies that a retry of the
    /// same delivery replaces.
    pub replaced: Vec<String>,
    pub members: Vec<Member>,
    /// `(dispatch id, due_at)` of stored windows that members pushed out.
    pub due: Vec<(String, Millis)>,
}

impl FlowWrites {
    pub fn is_empty(&self) -> bool {
        self.tats.is_empty()
            && self.replaced.is_empty()
            && self.members.is_empty()
            && self.due.is_empty()
    }
}

/// The holders of the batch's leases (whose dispatch may be an open window), sorted.
pub(crate) fn holders(leases: &[entity_lock::Model], now: Millis) -> Vec<String> {
    let mut holders: Vec<String> = leases
        .iter()
        .filter_map(|l| l.held_at(now).map(str::to_owned))
        .collect();
    holders.sort();
    holders.dedup();
    holders
}

/// The statuses of runs that hold a `max_running` slot, as an SQL list of literals.
pub(crate) fn running_list() -> String {
    crate::ceilings::running_statuses()
        .iter()
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The columns of a holder's dispatch row the window lookups read, in [`Window::of`]'s order.
pub(crate) const WINDOW_COLUMNS: &str =
    "d.id, d.workflow_id, d.status, d.claimed_by, d.attempts, d.series, d.due_at, d.created_at";
