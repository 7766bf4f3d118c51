//! The label sets of the daemon's metric families: each a typed set of bounded values
//! (outcomes, kinds, configured names), never tenant, entity or delivery ids.

use prometheus_client::encoding::EncodeLabelSet;

/// `source_kind` and `outcome` of a delivery.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeliveryLabels {
    pub source_kind: &'static str,
    pub outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceKindLabel {
    pub source_kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    pub status: &'static str,
}

/// Who claimed a dispatch that is being sent: `intake` (the intake writer, in the run's own
/// transaction), `intake_backlog` (the intake writer, from the backlog, when the dispatcher
/// asked) or `dispatcher` (its own claim transaction).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClaimLabels {
    pub target: String,
    pub by: &'static str,
}

/// What started a claim transaction of the dispatcher: `start` (its first pass), `new_runs`
/// (intake created runs it did not claim), `slot_freed` (a delivery ended while rows waited
/// for a slot), `more` (the last claim filled every free slot) or `poll` (the periodic look).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClaimPassLabels {
    pub target: String,
    pub wake: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    pub target: String,
    pub result: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetLabel {
    pub target: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    pub source: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriterLabel {
    pub writer: String,
}

/// A configured token's name (`api_token` for `server.api_token_env`), and what started a
/// pull claim transaction: `request` (a claim request's first look), `woken` (new work of
/// one of its workflows) or `recheck` (the periodic look found work due).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PullClaimLabels {
    pub token: String,
    pub cause: &'static str,
}

/// A schedule's fire, by what its ledger row says (`duplicate`: another replica recorded it).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScheduleFireLabels {
    pub schedule: String,
    pub outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabel {
    pub token: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: &'static str,
    pub commit: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuthFailureLabels {
    pub source: String,
    pub reason: String,
}

/// A configured source's name and a delivery's outcome.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceOutcomeLabels {
    pub source: String,
    pub outcome: &'static str,
}

/// A configured workflow's id.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkflowLabel {
    pub workflow: String,
}

/// A configured workflow's id and a run's final status.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkflowStatusLabels {
    pub workflow: String,
    pub status: &'static str,
}

/// How a config reload ended: `applied` or `refused`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabel {
    pub result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RevisionLabel {
    pub revision: String,
}
