//! Console sessions: a login form takes a token, and an HttpOnly, SameSite=Strict cookie
//! (`Path=/ui`) carries a random session id mapped in memory to that token; every request
//! re-authenticates the token against the revision in force, so a reload that revokes or
//! narrows a token takes effect in open sessions too. Each session has a CSRF token that every
//! state-changing form carries.
//!
//! Invariant: the cookie holds only a random id (244 bits); the token never leaves the server
//! after login, and a POST without the session's CSRF token changes nothing (403). A failed
//! login counts against the client's address like a failed bearer token (`auth::throttle`).

use axum::extract::rejection::FormRejection;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Form, Router, routing::get, routing::post};
use serde::Deserialize;
use subtle::ConstantTimeEq;

use super::{Chrome, ConsoleError, render};
use crate::config::Scope;
use crate::http::AppState;
use crate::http::auth::Principal;
use crate::http::auth::sessions::{TTL, random_id};

/// The session cookie.
pub const COOKIE: &str = "sy_session";
/// The login form's double-submit cookie (there is no session to hold its CSRF token yet).
const LOGIN_COOKIE: &str = "sy_login";
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_owned())
}

fn set_cookie(name: &str, value: &str, max_age: u64) -> HeaderValue {
    HeaderValue::from_str(&format!(
        "{name}={value}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={max_age}"
    ))
    .unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// A logged-in console user: the principal of the session's token, and its CSRF token.
#[derive(Debug, Clone)]
pub struct Viewer {
    pub principal: Principal,
    pub csrf: String,
    session: String,
}

impl Viewer {
    /// The page chrome for this viewer, with `active` marked in the navigation.
    pub fn chrome(&self, active: &'static str) -> Chrome {
        let p = &self.principal;
        Chrome {
            user: p.name.clone(),
            scopes: p.scopes().map(Scope::as_str).collect::<Vec<_>>().join(" "),
            tenants: p.tenants().map_or("all tenants".to_owned(), |t| {
                t.iter().cloned().collect::<Vec<_>>().join(", ")
            }),
            csrf: self.csrf.clone(),
            active,
        }
    }

    /// 403 unless the form carried this session's CSRF token.
    pub fn check_csrf(&self, presented: &str) -> Result<(), ConsoleError> {
        if bool::from(presented.as_bytes().ct_eq(self.csrf.as_bytes())) {
            Ok(())
        } else {
            Err(ConsoleError::new(
                StatusCode::FORBIDDEN,
                "This form is missing its CSRF token or it is stale; reload the page and try again.",
            ))
        }
    }

    /// 403 unless `form`, a form carrying only the CSRF token, carried this session's token (a
    /// form that does not parse carries none).
    pub fn check_csrf_form(
        &self,
        form: Result<Form<CsrfForm>, FormRejection>,
    ) -> Result<(), ConsoleError> {
        self.check_csrf(&form.map(|Form(f)| f.csrf).unwrap_or_default())
    }

    /// 403 naming the scope unless the token has it.
    pub fn require(&self, scope: Scope) -> Result<(), ConsoleError> {
        if self.principal.has(scope) {
            Ok(())
        } else {
            Err(ConsoleError::new(
                StatusCode::FORBIDDEN,
                &format!(
                    "Token `{}` lacks the `{scope}` scope this needs.",
                    self.principal.name
                ),
            ))
        }
    }
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let to_login = || Redirect::to("/ui/login").into_response();
        let session = cookie(&parts.headers, COOKIE).ok_or_else(to_login)?;
        let (secret, csrf) = state.console.get(&session).ok_or_else(to_login)?;
        let Some(principal) = Principal::authenticate(&state.live.current(), &secret) else {
            // The token was revoked or changed by a reload: the session ends with it.
            state.console.remove(&session);
            return Err(to_login());
        };
        Ok(Viewer {
            principal,
            csrf,
            session,
        })
    }
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui/login", get(login_form).post(login))
        .route("/ui/logout", post(logout))
}

#[derive(askama::Template)]
#[template(path = "login.html")]
struct LoginPage {
    csrf: String,
    message: String,
}

fn login_page(status: StatusCode, message: &str) -> Response {
    let csrf = random_id();
    let page = LoginPage {
        csrf: csrf.clone(),
        message: message.to_owned(),
    };
    let mut response = (status, render(&page)).into_response();
    response
        .headers_mut()
        .append(header::SET_COOKIE, set_cookie(LOGIN_COOKIE, &csrf, 600));
    response
}

async fn login_form() -> Response {
    login_page(StatusCode::OK, "")
}

#[derive(Debug, Deserialize)]
struct LoginForm {
    token: String,
    #[serde(default)]
    csrf: String,
}

async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(Form(form)) = form else {
        return login_page(StatusCode::BAD_REQUEST, "Enter a token.");
    };
    let expected = cookie(&headers, LOGIN_COOKIE).unwrap_or_default();
    if expected.is_empty() || !bool::from(form.csrf.as_bytes().ct_eq(expected.as_bytes())) {
        return login_page(
            StatusCode::FORBIDDEN,
            "The login form expired or came from elsewhere; try again.",
        );
    }
    let token = form.token.trim();
    let Some(principal) = Principal::authenticate(&state.live.current(), token) else {
        // The 401 is what `auth::throttle_failures` counts and logs, with the client's address.
        return login_page(StatusCode::UNAUTHORIZED, "Unknown token.");
    };
    if !principal.has(Scope::Read) {
        return login_page(
            StatusCode::FORBIDDEN,
            &format!(
                "Token `{}` lacks the `read` scope the console needs.",
                principal.name
            ),
        );
    }
    let session = state.console.create(token);
    tracing::info!(token = %principal.name, "console login");
    let mut response = Redirect::to("/ui/deliveries").into_response();
    let headers = response.headers_mut();
    headers.append(
        header::SET_COOKIE,
        set_cookie(COOKIE, &session, TTL.as_secs()),
    );
    headers.append(header::SET_COOKIE, set_cookie(LOGIN_COOKIE, "", 0));
    response
}

#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    pub csrf: String,
}

async fn logout(
    viewer: Viewer,
    State(state): State<AppState>,
    form: Result<Form<CsrfForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    if let Err(error) = viewer.check_csrf_form(form) {
        return error.into_response();
    }
    state.console.remove(&viewer.session);
    tracing::info!(token = %viewer.principal.name, "console logout");
    let mut response = Redirect::to("/ui/login").into_response();
    response
        .headers_mut()
        .append(header::SET_COOKIE, set_cookie(COOKIE, "", 0));
    response
}
