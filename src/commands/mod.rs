//! The CLI's commands: `serve`, `migrate`, `check`, `route`, `replay`, `schedule`.

pub(crate) mod check;
mod replay;
mod route;
mod schedule;
mod serve;

pub use check::check;
pub use replay::{ReplayArgs, parse_when, replay, what_if};
pub use route::route;
pub use schedule::schedule;
pub use serve::{migrate, serve};
