//! The console's sessions: a random session id (the cookie's value) mapped in memory to the
//! token that logged in and the session's CSRF token. Kept here, beside the bearer tokens,
//! because a session is one more way a caller presents a token; the console's login, logout
//! and cookie handling are in `console::session`.
//!
//! Invariant: an expired session is never answered; at most `MAX_SESSIONS` are kept, the one
//! closest to expiry going first.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a session lasts from login.
pub const TTL: Duration = Duration::from_secs(8 * 60 * 60);
/// Most sessions kept at once; the oldest goes first past it.
const MAX_SESSIONS: usize = 10_000;

#[derive(Debug)]
struct Session {
    secret: String,
    csrf: String,
    expires_at: Instant,
}

/// Open console sessions of this daemon (in memory: a restart logs everyone out, and behind a
/// load balancer a session sticks to the replica that made it).
#[derive(Debug, Default)]
pub struct Sessions(Mutex<HashMap<String, Session>>);

impl Sessions {
    pub fn create(&self, secret: &str) -> String {
        let id = random_id();
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        map.retain(|_, s| s.expires_at > now);
        if map.len() >= MAX_SESSIONS
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.expires_at)
                .map(|(id, _)| id.clone())
        {
            map.remove(&oldest);
        }
        map.insert(
            id.clone(),
            Session {
                secret: secret.to_owned(),
                csrf: random_id(),
                expires_at: now + TTL,
            },
        );
        id
    }

    /// The token and CSRF token of a live session.
    pub fn get(&self, id: &str) -> Option<(String, String)> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(id) {
            Some(session) if session.expires_at > Instant::now() => {
                Some((session.secret.clone(), session.csrf.clone()))
            }
            Some(_) => {
                map.remove(id);
                None
            }
            None => None,
        }
    }

    pub fn remove(&self, id: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    }
}

/// Two random UUIDv4s: 244 random bits, hex.
pub fn random_id() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}
