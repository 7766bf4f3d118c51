//! The CLI's commands: `serve`, `migrate`, `check`, `route`.

mod check;
mod route;
mod serve;

pub use check::check;
pub use route::route;
pub use serve::{migrate, serve};
