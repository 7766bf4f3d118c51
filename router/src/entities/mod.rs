//! sea-orm entities for the tables the router owns: runs, entity locks, and the run lifecycle
//! after routing (the dispatch outbox, its attempts, the run history, durable waits).

pub mod dispatch;
pub mod dispatch_attempt;
pub mod entity_lock;
pub mod run;
pub mod run_history;
pub mod wait;
