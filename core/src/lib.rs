//! Switchyard's domain types: the canonical [`Event`], workflows and their triggers, and the
//! closed set of intake [`Outcome`]s. This crate does no I/O and knows no payload shape.

mod adapter;
mod event;
mod outcome;
mod workflow;

pub use adapter::{Disposition, Normalized};
pub use event::{Channel, Event, EventError, UnknownChannel};
pub use outcome::Outcome;
pub use workflow::{Trigger, Workflow, WorkflowStatus};
