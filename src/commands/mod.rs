//! The CLI's commands: `serve`, `migrate`, `check`, `route`, `replay`.

pub(crate) mod check;
mod replay;
mod route;
mod serve;

pub use check::check;
pub use replay::{ReplayArgs, parse_when, replay, what_if};
pub use route::route;
pub use serve::{migrate, serve};
