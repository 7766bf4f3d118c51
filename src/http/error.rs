//! The one error type at the HTTP edge. Client errors carry a stable machine-readable `error`
//! and a human `detail`; server errors are logged and answered without internals.

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::intake::StoreUnavailable;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(&'static str),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// A refusal with its own stable `error` code (`lease_lost`, `claim_lost`, ...).
    #[error("{detail}")]
    Refused {
        status: StatusCode,
        error: &'static str,
        detail: String,
    },
    #[error("request body is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error(transparent)]
    Unavailable(#[from] StoreUnavailable),
    #[error("database error: {0}")]
    Database(#[from] switchyard_store::DbErr),
}

impl ApiError {
    /// 410 `expired`: it existed, but retention has deleted it.
    pub fn expired(detail: String) -> Self {
        ApiError::Refused {
            status: StatusCode::GONE,
            error: "expired",
            detail,
        }
    }

    /// 503 `overloaded` + Retry-After: a bound on work in progress is reached (not the store);
    /// `detail` names which.
    pub fn overloaded(detail: String) -> Self {
        ApiError::Refused {
            status: StatusCode::SERVICE_UNAVAILABLE,
            error: "overloaded",
            detail,
        }
    }

    /// 408 `request_timeout`: the body did not arrive within `server.body_read_timeout`. The
    /// connection is closed after the answer.
    pub fn body_timeout(timeout: std::time::Duration) -> Self {
        ApiError::Refused {
            status: StatusCode::REQUEST_TIMEOUT,
            error: "request_timeout",
            detail: format!(
                "the request body did not arrive within {} (server.body_read_timeout)",
                humantime::format_duration(timeout)
            ),
        }
    }
}

/// What axum's extractors say about a body or query they refused, as a client should read it:
/// the problem itself, without the framework's preamble ("Failed to deserialize the JSON body
/// into the target type: ").
fn problem(text: &str) -> String {
    const PREAMBLES: [&str; 4] = [
        "Failed to deserialize the JSON body into the target type: ",
        "Failed to parse the request body as JSON: ",
        "Failed to deserialize query string: ",
        "Failed to buffer the request body: ",
    ];
    let plain = PREAMBLES
        .iter()
        .find_map(|preamble| text.strip_prefix(preamble))
        .unwrap_or(text);
    format!("invalid request: {plain}")
}

impl From<axum::extract::rejection::JsonRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::JsonRejection) -> Self {
        use axum::extract::rejection::JsonRejection;
        match rejection {
            JsonRejection::MissingJsonContentType(_) => ApiError::unsupported_media_type(),
            JsonRejection::BytesRejection(bytes)
                if bytes.status() == StatusCode::PAYLOAD_TOO_LARGE =>
            {
                ApiError::Refused {
                    status: StatusCode::PAYLOAD_TOO_LARGE,
                    error: "payload_too_large",
                    detail: "the request body is larger than the server's `body_limit`".into(),
                }
            }
            other => ApiError::BadRequest(problem(&other.body_text())),
        }
    }
}

impl From<axum::extract::rejection::BytesRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::BytesRejection) -> Self {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::Refused {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                error: "payload_too_large",
                detail: "the request body is larger than the server's `body_limit`".into(),
            }
        } else {
            ApiError::BadRequest(problem(&rejection.body_text()))
        }
    }
}

impl From<axum::extract::rejection::QueryRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::QueryRejection) -> Self {
        ApiError::BadRequest(problem(&rejection.body_text()))
    }
}

impl ApiError {
    /// 415 `unsupported_media_type`: a JSON endpoint was sent something else.
    pub fn unsupported_media_type() -> Self {
        ApiError::Refused {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            error: "unsupported_media_type",
            detail: "this endpoint takes JSON: send `Content-Type: application/json`".into(),
        }
    }

    /// 404 `not_found` for a path no route serves.
    pub fn no_route(path: &str) -> Self {
        ApiError::NotFound(format!("no endpoint at `{path}`"))
    }

    /// 405 `method_not_allowed`: the path exists, not with this method.
    pub fn method_not_allowed(method: &axum::http::Method, path: &str) -> Self {
        ApiError::Refused {
            status: StatusCode::METHOD_NOT_ALLOWED,
            error: "method_not_allowed",
            detail: format!("`{path}` does not take {method}"),
        }
    }
}

/// Whether `headers` declare a JSON body (`application/json`, with parameters, or a
/// `+json` type), as axum's `Json` extractor requires; the endpoints that read bytes check it
/// themselves.
pub fn declares_json(headers: &axum::http::HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json")
            || subtype.len() > 5 && subtype[subtype.len() - 5..].eq_ignore_ascii_case("+json"))
}

/// Seconds a sender should wait before retrying after a 503.
pub const RETRY_AFTER_SECS: &str = "1";

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, error) = match &self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            ApiError::Refused { status, error, .. } => (*status, *error),
            ApiError::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            ApiError::Unavailable(_) | ApiError::Database(_) => {
                tracing::error!(error = %self, "answering 503: the store is unavailable");
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(header::RETRY_AFTER, RETRY_AFTER_SECS)],
                    Json(json!({"error": "store_unavailable", "detail": "the store is unavailable; retry later"})),
                )
                    .into_response();
            }
        };
        let mut response = (
            status,
            Json(json!({"error": error, "detail": self.to_string()})),
        )
            .into_response();
        if status == StatusCode::PAYLOAD_TOO_LARGE || status == StatusCode::REQUEST_TIMEOUT {
            // The rest of the body may be unread (past the drain in `oversize`, a client
            // waiting for `100 Continue`, or one too slow), so this connection carries no
            // further request: say so, or a keep-alive client sends its next one into a
            // closing socket.
            response.headers_mut().insert(
                header::CONNECTION,
                header::HeaderValue::from_static("close"),
            );
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            // An `overloaded` refusal: the sender retries, not before a second.
            response.headers_mut().insert(
                header::RETRY_AFTER,
                header::HeaderValue::from_static(RETRY_AFTER_SECS),
            );
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer realm=\"switchyard\""),
            );
        }
        response
    }
}
