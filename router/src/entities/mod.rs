//! sea-orm entities for the tables the router owns: runs and entity locks.

pub mod entity_lock;
pub mod run;
