//! Switchyard's domain types: the canonical [`Event`], workflows and their triggers, and the
//! closed set of intake [`Outcome`]s, trigger conditions ([`Condition`]) and the Standard
//! Webhooks signature ([`standard_webhooks`]). This crate does no I/O and knows no payload
//! shape (conditions read payload fields by name from config: data, not code).

mod adapter;
mod condition;
mod event;
mod flow;
mod outcome;
pub mod standard_webhooks;
mod workflow;

pub use adapter::{Disposition, Normalized};
pub use condition::{Condition, ConditionError, ConditionSpec, FieldPath};
pub use event::{Channel, Event, EventError, UnknownChannel};
pub use flow::{Coalesce, CoalesceSpec, FlowError, Rate, RateSpec};
pub use outcome::Outcome;
pub use workflow::{Trigger, Workflow, WorkflowStatus};
