//! The composition root: the whole HTTP surface, put together from the layers that serve it:
//! the `/v1` API (`http`), every channel's ingest endpoints (`edge`) and the operator console
//! (`console`), behind the server's limits.
//!
//! Invariant: the only module that names all three; each of them is built without the others
//! above it (`edge` and `console` use `http`, never the reverse).

use axum::Router;
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};

use crate::config::ServerConfig;
use crate::http::{self, ApiError, AppState};

/// Every route the daemon serves on its main listener. A path no route serves is a 404, and a
/// method a path does not take a 405, in the same JSON shape as every other refusal.
pub fn router(state: AppState, server: &ServerConfig) -> Router {
    let app = Router::new()
        .merge(http::api(&state))
        .merge(crate::edge::routes(server))
        .merge(crate::console::router())
        .route("/v1/openapi.json", axum::routing::get(openapi_json))
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method);
    http::with_limits(app, state, server, crate::edge::signed_only)
}

/// The OpenAPI 3.1 document of every endpoint but the console's pages: the API's and health
/// paths (`http::openapi`) and the channels' ingest paths (`edge::openapi_document`). Served
/// without a token: it describes the API, never a deployment.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut document = http::openapi::document();
    document.merge(crate::edge::openapi_document());
    document
}

/// `GET /v1/openapi.json`: built once, then served from memory.
async fn openapi_json() -> Response {
    static DOCUMENT: std::sync::OnceLock<bytes::Bytes> = std::sync::OnceLock::new();
    let body = DOCUMENT.get_or_init(|| match openapi().to_json() {
        Ok(json) => bytes::Bytes::from(json),
        Err(error) => {
            tracing::error!(%error, "the OpenAPI document does not serialise");
            bytes::Bytes::new()
        }
    });
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.clone(),
    )
        .into_response()
}

async fn no_route(uri: Uri) -> Response {
    ApiError::no_route(uri.path()).into_response()
}

async fn wrong_method(method: Method, uri: Uri) -> Response {
    ApiError::method_not_allowed(&method, uri.path()).into_response()
}
