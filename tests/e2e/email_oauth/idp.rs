//! The tests' identity provider on loopback: an OAuth2 token endpoint speaking the three
//! flows as Google and Microsoft do (refresh_token with rotation, client_credentials under
//! `/{tenant}/oauth2/v2.0/token`, the RFC 7523 JWT bearer grant whose RS256 assertion it
//! verifies with the key's public half), and the RFC 7662 introspection endpoint Dovecot's
//! `oauth2` passdb asks about each token. It records every grant and introspection.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Form, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use tokio::time::Instant;

pub const USER: &str = "support@example.com";
pub const CLIENT_ID: &str = "switchyard-app";
pub const CLIENT_SECRET: &str = "client-secret-9f2c";
pub const MS_TENANT: &str = "contoso";
pub const SA_EMAIL: &str = "switchyard@project.iam.gserviceaccount.com";

/// One token request as the endpoint saw it.
#[derive(Debug, Clone)]
pub struct Grant {
    pub grant_type: String,
    pub client_id: Option<String>,
    /// The access token issued, if any.
    pub issued: Option<String>,
}

#[derive(Debug, Default)]
pub struct IdpState {
    /// Refresh tokens that work, and the client each belongs to.
    pub refresh_tokens: HashMap<String, String>,
    /// Issue a new refresh token with every refresh (and revoke the old one).
    pub rotate: bool,
    /// Issued access tokens: the client and when each expires.
    pub access_tokens: HashMap<String, (String, Instant)>,
    /// Access tokens Dovecot must refuse (revoked after issue).
    pub revoked: HashSet<String>,
    /// Clients whose tokens Dovecot must refuse (the IMAP side does not accept them).
    pub refused_clients: HashSet<String>,
    /// Microsoft tenants that have not consented to the app.
    pub unconsented_tenants: HashSet<String>,
    /// `expires_in` of new access tokens.
    pub lifetime: Duration,
    /// The service account key's public half (PKCS#1 DER) and the subject it may act as.
    pub service_account_key: Option<Vec<u8>>,
    /// A Microsoft app's certificate credential: its public key (PKCS#1 DER) and the
    /// certificate's DER (its SHA-1 is the assertion's `x5t`).
    pub app_certificate: Option<(Vec<u8>, Vec<u8>)>,
    pub grants: Vec<Grant>,
    /// Every token Dovecot asked about, and the answer.
    pub introspections: Vec<(String, bool)>,
    /// Assertions and client secrets that failed verification, with why.
    pub rejections: Vec<String>,
    counter: u64,
    /// The token endpoint's own URL, for the assertions' `aud`.
    pub token_url: String,
}

#[derive(Clone)]
pub struct Idp {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<IdpState>>,
    _server: Arc<AbortOnDrop>,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Idp {
    pub async fn start() -> Idp {
        let state = Arc::new(Mutex::new(IdpState {
            lifetime: Duration::from_secs(3600),
            ..IdpState::default()
        }));
        let app = Router::new()
            .route("/token", post(token))
            .route("/{tenant}/oauth2/v2.0/token", post(microsoft_token))
            .route("/slow/token", post(slow_token))
            .route("/introspect", post(introspect))
            .with_state(state.clone());
        let (addr, server) = super::super::harness::serve_local(app).await;
        state.lock().expect("idp state").token_url = format!("http://{addr}/token");
        Idp {
            addr,
            state,
            _server: Arc::new(AbortOnDrop(server)),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn introspection_url(&self) -> String {
        self.url("/introspect")
    }

    /// Registers a working refresh token of `client`.
    pub fn add_refresh_token(&self, token: &str, client: &str) {
        let mut state = self.state.lock().expect("idp state");
        state
            .refresh_tokens
            .insert(token.to_owned(), client.to_owned());
    }

    pub fn grants(&self) -> Vec<Grant> {
        self.state.lock().expect("idp state").grants.clone()
    }

    pub fn grants_of(&self, client: &str) -> usize {
        self.grants()
            .iter()
            .filter(|g| g.client_id.as_deref() == Some(client) && g.issued.is_some())
            .count()
    }

    /// Whether Dovecot asked about `token` and was told it is active.
    pub fn accepted_at_imap(&self, token: &str) -> bool {
        self.state
            .lock()
            .expect("idp state")
            .introspections
            .iter()
            .any(|(t, ok)| t == token && *ok)
    }

    /// Every secret the provider handed out or holds: none may appear in a log.
    pub fn secrets(&self) -> Vec<String> {
        let state = self.state.lock().expect("idp state");
        let mut all: Vec<String> = state.access_tokens.keys().cloned().collect();
        all.extend(state.refresh_tokens.keys().cloned());
        all.extend(state.grants.iter().filter_map(|g| g.issued.clone()));
        all.push(CLIENT_SECRET.to_owned());
        all
    }
}

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    (
        status,
        Json(json!({"error": error, "error_description": description})),
    )
        .into_response()
}

fn issue(state: &mut IdpState, client: &str, refresh: Option<String>) -> Response {
    state.counter += 1;
    let access = format!("at-{}-{}", state.counter, uuid::Uuid::new_v4().simple());
    let expires = Instant::now() + state.lifetime;
    state
        .access_tokens
        .insert(access.clone(), (client.to_owned(), expires));
    let mut body = json!({
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": state.lifetime.as_secs(),
    });
    if let Some(refresh) = refresh {
        body["refresh_token"] = refresh.into();
    }
    if let Some(last) = state.grants.last_mut() {
        last.issued = Some(access);
    }
    Json(body).into_response()
}

async fn token(
    State(state): State<Arc<Mutex<IdpState>>>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let mut state = state.lock().expect("idp state");
    let grant_type = form.get("grant_type").cloned().unwrap_or_default();
    state.grants.push(Grant {
        grant_type: grant_type.clone(),
        client_id: form.get("client_id").cloned(),
        issued: None,
    });
    match grant_type.as_str() {
        "refresh_token" => {
            let client = form.get("client_id").cloned().unwrap_or_default();
            if form.get("client_secret").map(String::as_str) != Some(CLIENT_SECRET) {
                state
                    .rejections
                    .push(format!("bad client secret for {client}"));
                return oauth_error(
                    StatusCode::UNAUTHORIZED,
                    "invalid_client",
                    "The OAuth client was not found.",
                );
            }
            let presented = form.get("refresh_token").cloned().unwrap_or_default();
            if state.refresh_tokens.get(&presented) != Some(&client) {
                return oauth_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_grant",
                    "Token has been expired or revoked.",
                );
            }
            let rotated = state.rotate.then(|| {
                state.refresh_tokens.remove(&presented);
                let next = format!("rt-rotated-{}", uuid::Uuid::new_v4().simple());
                state.refresh_tokens.insert(next.clone(), client.clone());
                next
            });
            issue(&mut state, &client, rotated)
        }
        "urn:ietf:params:oauth:grant-type:jwt-bearer" => {
            let assertion = form.get("assertion").cloned().unwrap_or_default();
            match verify_service_account(&state, &assertion) {
                Ok(()) => {
                    if let Some(last) = state.grants.last_mut() {
                        last.client_id = Some(SA_EMAIL.to_owned());
                    }
                    issue(&mut state, SA_EMAIL, None)
                }
                Err(why) => {
                    state.rejections.push(why.clone());
                    oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", &why)
                }
            }
        }
        other => oauth_error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            &format!("not here: {other}"),
        ),
    }
}

/// Google's checks of a service-account assertion: RS256 by the account's key, `iss` the
/// account, `sub` the mailbox, `aud` this endpoint, the mail scope, not expired.
fn verify_service_account(state: &IdpState, assertion: &str) -> Result<(), String> {
    let key = state
        .service_account_key
        .as_ref()
        .ok_or("no service account is registered")?;
    let parts: Vec<&str> = assertion.split('.').collect();
    let [header, claims, signature] = parts[..] else {
        return Err("not a JWT".into());
    };
    let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).map_err(|e| e.to_string());
    let signature = decode(signature)?;
    ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PKCS1_2048_8192_SHA256, key)
        .verify(format!("{header}.{claims}").as_bytes(), &signature)
        .map_err(|_| "the assertion's signature does not verify".to_owned())?;
    let header: Value = serde_json::from_slice(&decode(header)?).map_err(|e| e.to_string())?;
    let claims: Value = serde_json::from_slice(&decode(claims)?).map_err(|e| e.to_string())?;
    let now = chrono::Utc::now().timestamp();
    let checks = [
        (header["alg"] == "RS256", "alg"),
        (claims["iss"] == SA_EMAIL, "iss"),
        (claims["sub"] == USER, "sub"),
        (claims["aud"] == state.token_url.as_str(), "aud"),
        (claims["scope"] == "https://mail.google.com/", "scope"),
        (claims["exp"].as_i64().is_some_and(|exp| exp > now), "exp"),
    ];
    for (ok, claim) in checks {
        if !ok {
            return Err(format!("bad `{claim}` in {claims}"));
        }
    }
    Ok(())
}

/// The Microsoft identity platform's checks of a certificate credential: RS256 by the
/// certificate's key, `x5t` its SHA-1 thumbprint, `iss` = `sub` = the client, `aud` this
/// endpoint, not expired.
fn verify_client_assertion(
    state: &IdpState,
    assertion: &str,
    client: &str,
    audience: &str,
) -> Result<(), String> {
    let (key, certificate) = state
        .app_certificate
        .as_ref()
        .ok_or("no certificate is registered")?;
    let (header, claims) = verify_rs256(key, assertion)?;
    let thumbprint = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, certificate);
    let now = chrono::Utc::now().timestamp();
    let checks = [
        (
            header["x5t"] == URL_SAFE_NO_PAD.encode(thumbprint.as_ref()).as_str(),
            "x5t",
        ),
        (
            claims["iss"] == client && claims["sub"] == client,
            "iss/sub",
        ),
        (claims["aud"] == audience, "aud"),
        (claims["exp"].as_i64().is_some_and(|exp| exp > now), "exp"),
    ];
    for (ok, claim) in checks {
        if !ok {
            return Err(format!("bad `{claim}` in {header} {claims}"));
        }
    }
    Ok(())
}

/// Verifies an RS256 JWT with `key` (PKCS#1 DER); its header and claims.
fn verify_rs256(key: &[u8], jwt: &str) -> Result<(Value, Value), String> {
    let parts: Vec<&str> = jwt.split('.').collect();
    let [header, claims, signature] = parts[..] else {
        return Err("not a JWT".into());
    };
    let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).map_err(|e| e.to_string());
    ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PKCS1_2048_8192_SHA256, key)
        .verify(format!("{header}.{claims}").as_bytes(), &decode(signature)?)
        .map_err(|_| "the assertion's signature does not verify".to_owned())?;
    let header: Value = serde_json::from_slice(&decode(header)?).map_err(|e| e.to_string())?;
    let claims: Value = serde_json::from_slice(&decode(claims)?).map_err(|e| e.to_string())?;
    if header["alg"] != "RS256" {
        return Err(format!("alg is not RS256: {header}"));
    }
    Ok((header, claims))
}

async fn microsoft_token(
    State(state): State<Arc<Mutex<IdpState>>>,
    Path(tenant): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let mut state = state.lock().expect("idp state");
    let client = form.get("client_id").cloned().unwrap_or_default();
    state.grants.push(Grant {
        grant_type: form.get("grant_type").cloned().unwrap_or_default(),
        client_id: Some(client.clone()),
        issued: None,
    });
    if form.get("grant_type").map(String::as_str) != Some("client_credentials") {
        return oauth_error(StatusCode::BAD_REQUEST, "unsupported_grant_type", "");
    }
    let assertion_type = form.get("client_assertion_type").map(String::as_str);
    if assertion_type == Some("urn:ietf:params:oauth:client-assertion-type:jwt-bearer") {
        let audience = format!(
            "{}/{tenant}/oauth2/v2.0/token",
            state.token_url.trim_end_matches("/token")
        );
        let assertion = form.get("client_assertion").cloned().unwrap_or_default();
        if let Err(why) = verify_client_assertion(&state, &assertion, &client, &audience) {
            state.rejections.push(why.clone());
            return oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", &why);
        }
    } else if form.get("client_secret").map(String::as_str) != Some(CLIENT_SECRET) {
        return oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "AADSTS7000215: Invalid client secret provided.",
        );
    }
    if form.get("scope").map(String::as_str) != Some("https://outlook.office365.com/.default") {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_scope", "AADSTS70011");
    }
    if state.unconsented_tenants.contains(&tenant) {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_grant",
            "AADSTS65001: The user or administrator has not consented to use the application.",
        );
    }
    if tenant != MS_TENANT {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "AADSTS90002: Tenant not found.",
        );
    }
    issue(&mut state, &client, None)
}

/// A token endpoint that answers after 30 s.
async fn slow_token() -> Response {
    tokio::time::sleep(Duration::from_secs(30)).await;
    oauth_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "temporarily_unavailable",
        "",
    )
}

/// RFC 7662 as Dovecot's `introspection_mode = post` asks: `token=...`.
async fn introspect(
    State(state): State<Arc<Mutex<IdpState>>>,
    Form(form): Form<HashMap<String, String>>,
) -> Json<Value> {
    let mut state = state.lock().expect("idp state");
    let token = form.get("token").cloned().unwrap_or_default();
    let active = match state.access_tokens.get(&token) {
        Some((client, expires)) => {
            Instant::now() < *expires
                && !state.revoked.contains(&token)
                && !state.refused_clients.contains(client)
        }
        None => false,
    };
    state.introspections.push((token, active));
    if active {
        Json(json!({"active": true, "username": USER, "scope": "mail"}))
    } else {
        Json(json!({"active": false}))
    }
}
