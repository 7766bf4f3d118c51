//! The composition root: the whole HTTP surface, put together from the layers that serve it:
//! the `/v1` API (`http`), every channel's ingest endpoints (`edge`) and the operator console
//! (`console`), behind the server's limits.
//!
//! Invariant: the only module that names all three; each of them is built without the others
//! above it (`edge` and `console` use `http`, never the reverse).

use axum::Router;

use crate::config::ServerConfig;
use crate::http::{self, AppState};

/// Every route the daemon serves on its main listener.
pub fn router(state: AppState, server: &ServerConfig) -> Router {
    let app = Router::new()
        .merge(http::api(&state))
        .merge(crate::edge::routes(server))
        .merge(crate::console::router());
    http::with_limits(app, state, server, crate::edge::signed_only)
}
