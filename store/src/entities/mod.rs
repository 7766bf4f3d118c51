//! sea-orm entities: one per table, the row types every named operation reads and writes.
//! The schema itself is `switchyard-migrations`; these mirror it.

pub mod alert;
pub mod alert_notification;
pub mod alert_observation;
pub mod config_revision;
pub mod dispatch;
pub mod dispatch_attempt;
pub mod entity_lock;
pub mod intake;
pub mod mailbox_cursor;
pub mod mailbox_oauth_token;
pub mod mailbox_start;
pub mod poller_lease;
pub mod raw_delivery;
pub mod replay;
pub mod replay_result;
pub mod run;
pub mod run_history;
pub mod slack_message;
pub mod wait;
pub mod workflow;
