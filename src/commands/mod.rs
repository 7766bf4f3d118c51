//! The CLI's commands: `serve`, `migrate`, `check`, `route` (of an event or of a source's raw
//! body), `replay`, `mailbox test`, `schedule`.

pub(crate) mod check;
mod mailbox;
mod replay;
mod route;
mod route_raw;
mod schedule;
mod serve;

pub use check::check;
pub use mailbox::mailbox_test;
pub use replay::{ReplayArgs, parse_when, replay, what_if};
pub use route::route;
pub use route_raw::{RawArgs, route_raw};
pub use schedule::schedule;
pub use serve::{migrate, serve};
