//! The steps every signed ingest endpoint takes before it can check a signature, written once
//! for all of them (`ingest::serve` takes them for every channel's endpoint): find the named
//! source (an unknown name is 404 before a byte of the body is read), reserve the body's size
//! in the unverified-body budget, within the share one client address may hold, and read the
//! body within `server.body_limit` and its deadline (`body_deadline`).
//!
//! Invariant: an unauthenticated client holds budget only for a source that exists, never
//! more than its share of it, and only until its body's deadline; so it cannot make another
//! client's signed delivery wait or fail.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::config::{ResolvedSource, ServerConfig};
use crate::http::ApiError;
use crate::http::body_deadline::BodyDeadline;
use crate::live::Live;

/// A request to a source that exists, its body read but not yet verified.
#[derive(Debug)]
pub struct Unverified {
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The body's share of the budget, given back when the handler is done with it (`None`:
    /// a dry run's request, read from files).
    _reserved: Option<Reservation>,
}

impl Unverified {
    /// A request no client sent (`switchyard route --body`): it holds no budget.
    pub fn detached(headers: HeaderMap, body: Bytes) -> Self {
        Self {
            headers,
            body,
            _reserved: None,
        }
    }
}

/// The preamble: the source of `kind` named `name` that `pick` accepts (404 otherwise, the body
/// unread), then the body, reserved in `budget` and read within the limits. Any refusal is the
/// finished response.
pub async fn receive<'l, S>(
    budget: &UnverifiedBudget,
    live: &'l Live,
    kind: &'static str,
    name: &str,
    request: Request,
    pick: impl FnOnce(&'l ResolvedSource) -> Option<S>,
) -> Result<(S, Unverified), Response> {
    let Some(source) = live.source(kind, name).and_then(pick) else {
        return Err(ApiError::NotFound(format!("no {kind} source named `{name}`")).into_response());
    };
    let client = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| crate::server::client_of(peer.ip()));
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<usize>().ok());
    let reserved = budget
        .reserve(client, declared)
        .map_err(IntoResponse::into_response)?;
    let deadline = request.extensions().get::<BodyDeadline>().cloned();
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, budget.inner.body_limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) if error.is::<LengthLimitError>() => {
            return Err(ApiError::TooLarge {
                limit: budget.inner.body_limit,
            }
            .into_response());
        }
        Err(error) => {
            let refusal = match deadline.filter(BodyDeadline::missed) {
                Some(missed) => missed.refusal(),
                None => {
                    ApiError::BadRequest(format!("the request body could not be read: {error}"))
                }
            };
            return Err(refusal.into_response());
        }
    };
    Ok((
        source,
        Unverified {
            headers: parts.headers,
            body,
            _reserved: Some(reserved),
        },
    ))
}

/// A message key as the store holds it: one longer than its keys (a CloudEvent's `(source, id)`
/// can be any length) is replaced by its digest, which identifies it just as well, as
/// `Delivery::new` does for delivery ids.
pub fn stored_message_key(key: String) -> String {
    if key.len() <= crate::store::MAX_KEY_LEN && !key.contains('\0') {
        key
    } else {
        crate::intake::digest_id(key.as_bytes())
    }
}

/// Bytes of unverified bodies (signed endpoints read the whole body before they can check its
/// signature) buffered at once across all connections, and by each client address. Handlers
/// find it in their request's extensions (the ingest router's layer puts it there).
#[derive(Debug, Clone)]
pub struct UnverifiedBudget {
    inner: Arc<Budget>,
}

#[derive(Debug)]
struct Budget {
    total: usize,
    per_client: usize,
    body_limit: usize,
    held: Mutex<Held>,
}

/// What is reserved now: in all, and by each client (`None`: a request without a peer address).
#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_client: HashMap<Option<IpAddr>, usize>,
    /// When a refusal was last logged: at most one line per ten seconds.
    last_warned: Option<Instant>,
}

/// One body's share of the budget; given back when dropped.
#[derive(Debug)]
struct Reservation {
    budget: Arc<Budget>,
    client: Option<IpAddr>,
    bytes: usize,
}

impl UnverifiedBudget {
    pub fn new(server: &ServerConfig) -> Self {
        Self {
            inner: Arc::new(Budget {
                total: server.unverified_body_budget,
                per_client: server.unverified_body_per_client(),
                body_limit: server.body_limit,
                held: Mutex::default(),
            }),
        }
    }

    /// Reserves the declared length (or the body limit when the request declares none) for
    /// `client`; with its share or the whole budget in use, 503 `overloaded` at once.
    fn reserve(
        &self,
        client: Option<IpAddr>,
        declared: Option<usize>,
    ) -> Result<Reservation, ApiError> {
        let budget = &self.inner;
        let bytes = declared.unwrap_or(budget.body_limit).min(budget.body_limit);
        let mut held = budget
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mine = held.by_client.get(&client).copied().unwrap_or(0);
        let refusal = if mine + bytes > budget.per_client {
            Some(format!(
                "this client address already holds its share of the unverified-body budget \
                 ({mine} of {} bytes, server.client_share of server.unverified_body_budget) in \
                 request bodies still arriving; retry when they are done",
                budget.per_client
            ))
        } else if held.total + bytes > budget.total {
            Some(format!(
                "the unverified-body budget (server.unverified_body_budget, {} bytes) is in use \
                 by request bodies still arriving; retry later",
                budget.total
            ))
        } else {
            None
        };
        if let Some(detail) = refusal {
            let now = Instant::now();
            if held
                .last_warned
                .is_none_or(|at| now - at > Duration::from_secs(10))
            {
                held.last_warned = Some(now);
                tracing::warn!(
                    client = client.map(|ip| ip.to_string()),
                    declared = bytes,
                    client_holds = mine,
                    held = held.total,
                    "an unverified request body does not fit in the budget; answering 503 \
                     overloaded until bodies finish"
                );
            }
            return Err(ApiError::overloaded(detail));
        }
        held.total += bytes;
        *held.by_client.entry(client).or_default() += bytes;
        Ok(Reservation {
            budget: budget.clone(),
            client,
            bytes,
        })
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut held = self
            .budget
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        held.total = held.total.saturating_sub(self.bytes);
        if let Some(mine) = held.by_client.get_mut(&self.client) {
            *mine = mine.saturating_sub(self.bytes);
            if *mine == 0 {
                held.by_client.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(total: usize, share: f64, body_limit: usize) -> UnverifiedBudget {
        UnverifiedBudget::new(&ServerConfig {
            unverified_body_budget: total,
            client_share: share,
            body_limit,
            ..ServerConfig::default()
        })
    }

    fn ip(text: &str) -> Option<IpAddr> {
        Some(text.parse().expect("an address"))
    }

    #[test]
    fn one_client_takes_at_most_its_share_and_others_still_fit() {
        let budget = budget(4096, 0.5, 1024);
        let attacker = ip("192.0.2.1");
        let held: Vec<_> = (0..2)
            .map(|_| {
                budget
                    .reserve(attacker, Some(1024))
                    .expect("within its share")
            })
            .collect();
        let refused = budget
            .reserve(attacker, Some(1024))
            .expect_err("past its share");
        assert!(refused.to_string().contains("share"), "{refused}");
        // Another client still gets the other half.
        let victim = budget
            .reserve(ip("192.0.2.2"), Some(1024))
            .expect("room left");
        drop(held);
        budget
            .reserve(attacker, Some(1024))
            .expect("its share is back");
        drop(victim);
    }

    #[test]
    fn a_full_budget_names_itself_and_empties_when_bodies_finish() {
        let budget = budget(2048, 1.0, 1024);
        let first = budget.reserve(ip("192.0.2.1"), None).expect("a body limit");
        let _second = budget
            .reserve(ip("192.0.2.2"), Some(5000))
            .expect("capped at the limit");
        let refused = budget.reserve(ip("192.0.2.3"), Some(1)).expect_err("full");
        assert!(
            refused
                .to_string()
                .contains("server.unverified_body_budget"),
            "{refused}"
        );
        drop(first);
        budget
            .reserve(ip("192.0.2.3"), Some(1))
            .expect("room again");
    }
}
