//! The CLI's commands: `serve`, `migrate`, `check`, `route`.

pub(crate) mod check;
mod route;
mod serve;

pub use check::check;
pub use route::route;
pub use serve::{migrate, serve};
