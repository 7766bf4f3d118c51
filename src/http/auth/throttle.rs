//! Failed attempts to present a secret, counted per client address: a bearer token on a route
//! that checks one (`/v1/*` except the signed Zendesk and Slack endpoints, `/metrics`,
//! `/readyz`) answered 401 because it is no configured token (a configured token refused for
//! another reason, such as a resume by someone who is not an approver, is no failure here), or
//! a console login answered 401. Past [`FAILURE_LIMIT`] failures within [`FAILURE_WINDOW`]
//! the address is answered 429 `too_many_auth_failures` with `Retry-After` for [`BLOCK`],
//! before any secret it presents is compared. Each failure is logged at WARN with the address
//! and the route, never with what was presented.
//!
//! Invariant: the table holds at most [`MAX_ADDRESSES`] entries whatever the clients do, and a
//! request without a secret, or from an address that has not failed, is never refused here.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::Principal;
use crate::http::ApiError;
use crate::live::LiveConfig;

/// Failures from one address that start a block.
pub const FAILURE_LIMIT: u32 = 10;
/// The window those failures are counted in, from the first of them.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// How long a blocked address is refused.
pub const BLOCK: Duration = Duration::from_secs(300);
/// Addresses tracked at once; past it, expired entries go first, then the oldest unblocked
/// one (so a flood of new addresses cannot free a blocked one), then the oldest.
pub const MAX_ADDRESSES: usize = 10_000;

/// One address's recent failures.
#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    window_start: Instant,
    blocked_until: Option<Instant>,
}

impl Failures {
    /// Whether the entry says nothing any more: its window and block are over.
    fn expired(&self, now: Instant) -> bool {
        self.blocked_until.is_none_or(|until| until <= now)
            && now.duration_since(self.window_start) >= FAILURE_WINDOW
    }
}

/// The failure table of one server (in memory: each replica counts its own clients).
#[derive(Debug, Default)]
struct FailureTable(Mutex<HashMap<IpAddr, Failures>>);

/// The middleware's state: the table, and the tokens in force (to tell a wrong token from a
/// right one refused for another reason).
#[derive(Debug, Clone)]
pub struct FailureThrottle {
    table: Arc<FailureTable>,
    live: LiveConfig,
    /// Whether a path is an ingest endpoint that authenticates by signature alone
    /// (`edge::signed_only`, given by the composition root).
    signed_only: fn(&str) -> bool,
}

impl FailureThrottle {
    pub fn new(live: LiveConfig, signed_only: fn(&str) -> bool) -> Self {
        Self {
            table: Arc::default(),
            live,
            signed_only,
        }
    }
}

impl FailureTable {
    /// How long `client` is still blocked, if it is.
    fn blocked_for(&self, client: IpAddr, now: Instant) -> Option<Duration> {
        let table = self.0.lock().unwrap_or_else(|p| p.into_inner());
        table
            .get(&client)
            .and_then(|f| f.blocked_until)
            .filter(|until| *until > now)
            .map(|until| until - now)
    }

    /// Counts a failure of `client`; returns the failures in its window and whether this one
    /// started a block.
    fn fail(&self, client: IpAddr, now: Instant) -> (u32, bool) {
        let mut table = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !table.contains_key(&client) && table.len() >= MAX_ADDRESSES {
            table.retain(|_, f| !f.expired(now));
            if table.len() >= MAX_ADDRESSES
                && let Some(oldest) = table
                    .iter()
                    .min_by_key(|(_, f)| (f.blocked_until.is_some(), f.window_start))
                    .map(|(ip, _)| *ip)
            {
                table.remove(&oldest);
            }
        }
        let entry = table.entry(client).or_insert(Failures {
            count: 0,
            window_start: now,
            blocked_until: None,
        });
        if entry.expired(now) {
            *entry = Failures {
                count: 0,
                window_start: now,
                blocked_until: None,
            };
        }
        entry.count += 1;
        let blocks = entry.count >= FAILURE_LIMIT && entry.blocked_until.is_none();
        if blocks {
            entry.blocked_until = Some(now + BLOCK);
        }
        (entry.count, blocks)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// The key an address is counted under: an IPv4 address, or an IPv6 address's /64 (one
/// host usually holds a whole /64, so counting single IPv6 addresses would count nothing).
fn client_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let mut octets = v6.octets();
            octets[8..].fill(0);
            IpAddr::V6(octets.into())
        }
        v4 => v4,
    }
}

/// A secret a request presents to a route behind this layer that compares it with the
/// configured tokens.
#[derive(Debug)]
enum Presented {
    /// The console's login form (its token is in the body, read by the handler).
    Login,
    /// An `Authorization: Bearer` header, kept to tell a wrong token from a right one.
    Bearer(HeaderValue),
}

impl Presented {
    /// What `request` presents, if anything. The signed Zendesk and Slack endpoints check
    /// signatures, not tokens, and their senders' shared egress addresses must never be blocked
    /// by someone else's failures.
    fn of(request: &Request, signed_only: fn(&str) -> bool) -> Option<Self> {
        let path = request.uri().path();
        if path == "/ui/login" {
            return (request.method() == Method::POST).then_some(Presented::Login);
        }
        let signed_ingest = signed_only(path);
        let checks_tokens =
            (path.starts_with("/v1/") && !signed_ingest) || path == "/metrics" || path == "/readyz";
        let value = request.headers().get(header::AUTHORIZATION)?;
        (checks_tokens && value.to_str().ok().and_then(super::bearer_token).is_some())
            .then(|| Presented::Bearer(value.clone()))
    }

    /// Whether a 401 answer to this request refused its secret: a login's 401 always does; a
    /// bearer token's only when it is no configured token (compared only after a 401, so the
    /// requests that pass pay nothing for it).
    fn refused(&self, live: &LiveConfig) -> bool {
        match self {
            Presented::Login => true,
            Presented::Bearer(value) => value
                .to_str()
                .ok()
                .and_then(super::bearer_token)
                .is_none_or(|token| Principal::authenticate(&live.current(), token).is_none()),
        }
    }
}

/// The first step of `http::limits`: refuses a blocked address's secrets unread, and counts
/// every refused one. The client address comes from the connection (`ConnectInfo`); without one
/// (a router called in process) every request counts as one client.
pub async fn guard<Fut: Future<Output = Response>>(
    throttle: &FailureThrottle,
    request: Request,
    next: impl FnOnce(Request) -> Fut,
) -> Response {
    let Some(presented) = Presented::of(&request, throttle.signed_only) else {
        return next(request).await;
    };
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip());
    let client = client_key(peer.unwrap_or(IpAddr::from([0, 0, 0, 0])));
    if let Some(left) = throttle.table.blocked_for(client, Instant::now()) {
        return too_many(request.uri().path(), left);
    }
    // Both share the request's buffers: nothing is copied unless a failure is logged.
    let method = request.method().clone();
    let uri = request.uri().clone();
    let response = next(request).await;
    if response.status() == StatusCode::UNAUTHORIZED && presented.refused(&throttle.live) {
        let (failures, blocked) = throttle.table.fail(client, Instant::now());
        let client = peer.map_or_else(|| "unknown".to_owned(), |ip| ip.to_string());
        tracing::warn!(
            %client,
            %method,
            route = uri.path(),
            failures,
            "a presented token was refused"
        );
        if blocked {
            tracing::warn!(
                %client,
                failures,
                block_secs = BLOCK.as_secs(),
                "too many refused tokens from one address: refusing its tokens unread for a while"
            );
        }
    }
    response
}

/// 429 with `Retry-After`: plain text for the console's login form (a person reads it), JSON
/// elsewhere.
fn too_many(path: &str, left: Duration) -> Response {
    let secs = left.as_secs().max(1);
    let detail =
        format!("too many failed authentication attempts from this address; retry after {secs} s");
    let mut response = if path == "/ui/login" {
        (
            StatusCode::TOO_MANY_REQUESTS,
            format!("Too many failed logins from your address; try again in {secs} seconds.\n"),
        )
            .into_response()
    } else {
        ApiError::Refused {
            status: StatusCode::TOO_MANY_REQUESTS,
            error: "too_many_auth_failures",
            detail,
        }
        .into_response()
    };
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_blocked_at_the_limit_and_others_are_not() {
        let throttle = FailureTable::default();
        let now = Instant::now();
        let attacker = IpAddr::from([10, 0, 0, 1]);
        for n in 1..FAILURE_LIMIT {
            assert_eq!(throttle.fail(attacker, now), (n, false));
            assert_eq!(throttle.blocked_for(attacker, now), None);
        }
        assert_eq!(throttle.fail(attacker, now), (FAILURE_LIMIT, true));
        assert_eq!(throttle.blocked_for(attacker, now), Some(BLOCK));
        assert_eq!(throttle.blocked_for(IpAddr::from([10, 0, 0, 2]), now), None);
        // The block ends, and the count starts again.
        let later = now + BLOCK;
        assert_eq!(throttle.blocked_for(attacker, later), None);
        assert_eq!(throttle.fail(attacker, later), (1, false));
    }

    #[test]
    fn failures_outside_the_window_do_not_add_up() {
        let throttle = FailureTable::default();
        let now = Instant::now();
        let client = IpAddr::from([10, 0, 0, 1]);
        for _ in 1..FAILURE_LIMIT {
            throttle.fail(client, now);
        }
        assert_eq!(throttle.fail(client, now + FAILURE_WINDOW), (1, false));
    }

    #[test]
    fn a_flood_of_addresses_keeps_the_table_bounded() {
        let throttle = FailureTable::default();
        let now = Instant::now();
        let blocked = IpAddr::from([192, 0, 2, 1]);
        for _ in 0..FAILURE_LIMIT {
            throttle.fail(blocked, now);
        }
        for n in 0..(MAX_ADDRESSES as u32 + 500) {
            throttle.fail(
                IpAddr::from(n.to_be_bytes()),
                now + Duration::from_millis(1),
            );
        }
        assert_eq!(throttle.len(), MAX_ADDRESSES);
        assert!(
            throttle.blocked_for(blocked, now).is_some(),
            "still blocked"
        );
    }

    #[test]
    fn ipv6_addresses_count_by_their_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().expect("v6");
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().expect("v6");
        let other: IpAddr = "2001:db8:1:3::1".parse().expect("v6");
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(other));
        let mapped: IpAddr = "::ffff:127.0.0.2".parse().expect("mapped");
        assert_eq!(client_key(mapped), IpAddr::from([127, 0, 0, 2]));
    }

    #[test]
    fn only_token_checking_routes_with_a_bearer_token_count() {
        let request = |method: Method, path: &str, bearer: bool| {
            let mut builder = Request::builder().method(method).uri(path);
            if bearer {
                builder = builder.header(header::AUTHORIZATION, "Bearer guess");
            }
            builder.body(axum::body::Body::empty()).expect("request")
        };
        for (method, path, bearer, expected) in [
            (Method::GET, "/v1/runs", true, true),
            (Method::GET, "/v1/runs", false, false),
            (Method::POST, "/v1/ingest/cloudevents/billing", true, true),
            (Method::POST, "/v1/ingest/webhook/zendesk", true, false),
            (
                Method::POST,
                "/v1/ingest/slack/acme/interactivity",
                true,
                false,
            ),
            (Method::GET, "/metrics", true, true),
            (Method::GET, "/readyz", true, true),
            (Method::GET, "/readyz", false, false),
            (Method::GET, "/healthz", true, false),
            (Method::POST, "/ui/login", false, true),
            (Method::GET, "/ui/login", false, false),
        ] {
            assert_eq!(
                Presented::of(
                    &request(method.clone(), path, bearer),
                    crate::edge::signed_only
                )
                .is_some(),
                expected,
                "{method} {path} bearer={bearer}"
            );
        }
    }

    #[test]
    fn a_401_counts_only_for_a_token_that_is_not_configured() {
        let loaded = crate::config::LoadedConfig::parse(
            "",
            std::path::Path::new("/etc/switchyard/switchyard.toml"),
            std::path::PathBuf::from("/etc/switchyard"),
        )
        .expect("an empty config parses");
        let env = |name: &str| {
            (name == "SWITCHYARD_API_TOKEN").then(|| "the-right-admin-token".to_owned())
        };
        let settings = crate::config::Settings::resolve(loaded, &env).expect("resolves");
        let live = LiveConfig::new(crate::live::Live::new(settings));
        let bearer = |token: &str| {
            Presented::Bearer(HeaderValue::from_str(&format!("Bearer {token}")).expect("header"))
        };
        assert!(bearer("a-wrong-token-guess").refused(&live));
        // A right token answered 401 for another reason (a resume by a non-approver) is no
        // failure of the token.
        assert!(!bearer("the-right-admin-token").refused(&live));
        assert!(Presented::Login.refused(&live));
    }
}
