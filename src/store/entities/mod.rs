//! sea-orm entities for the daemon's tables.

pub mod config_revision;
pub mod intake;
pub mod mailbox_cursor;
pub mod poller_lease;
pub mod raw_delivery;
pub mod replay;
pub mod replay_result;
pub mod workflow;
