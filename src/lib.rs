//! The Switchyard daemon: config, the intake pipeline, the HTTP server and the mailbox pollers,
//! wired together. `main.rs` is only the command line; everything it runs lives here.

pub mod alerts;
pub mod app;
pub mod audit;
pub mod authority;
mod background;
pub mod bounds;
pub mod commands;
pub mod config;
mod console;
mod daemon;
pub mod dispatcher;
pub mod edge;
pub mod event_version;
pub mod explain;
pub mod http;
pub mod intake;
pub mod live;
pub mod metrics;
mod notify;
pub mod replay;
mod retention;
mod schedule_status;
mod server;
pub mod shadow;
pub mod socket_status;
pub mod source_status;
/// The store, under the name the daemon's modules have used for it.
pub use switchyard_store as store;
pub mod telemetry;
pub mod waits;

pub use daemon::{Daemon, run};
