//! The CLI's commands: `serve`, `migrate`, `check`, `route`, `replay`, `mailbox test`.

pub(crate) mod check;
mod mailbox;
mod replay;
mod route;
mod serve;

pub use check::check;
pub use mailbox::mailbox_test;
pub use replay::{ReplayArgs, parse_when, replay, what_if};
pub use route::route;
pub use serve::{migrate, serve};
