//! What each Slack Socket Mode source's connections are doing, as its supervisor
//! (`edge/slack/socket`) reports it: every open or draining connection, reconnects, the last
//! envelope and the last error. Below the edge and the HTTP surface alike: the edge writes it,
//! `/readyz`, `/metrics` and the console read it.
//!
//! Invariant: a source is ready only while at least one of its connections is `open` (has said
//! `hello` and has not been asked to disconnect).

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;

/// One connection's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionState {
    /// Slack said `hello`; envelopes arrive on it.
    Open,
    /// Slack asked it to disconnect (`refresh_requested`, `warning`): its replacement is being
    /// opened, and it stays until Slack closes it so in-flight acks still reach Slack.
    Draining,
}

/// One open or draining connection.
#[derive(Debug, Clone, Serialize)]
pub struct ConnectionStatus {
    /// Which of the source's `connections` slots holds it (0-based).
    pub slot: u8,
    pub state: ConnectionState,
    /// Unix milliseconds of its `hello`.
    pub opened_at: i64,
    /// Envelopes received on it.
    pub envelopes: u64,
    /// Unix milliseconds of the last envelope received on it.
    pub last_envelope_at: Option<i64>,
}

/// One Socket Mode source.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SocketSourceStatus {
    /// How many connections it keeps (`connections`).
    pub wanted: u8,
    /// Its open and draining connections, by connection number.
    pub connections: BTreeMap<u64, ConnectionStatus>,
    /// Connections opened after the first `wanted` (refreshes, drops, failures).
    pub reconnects: u64,
    /// Unix milliseconds of the last envelope on any connection.
    pub last_envelope_at: Option<i64>,
    /// The last failure to open or keep a connection.
    pub last_error: Option<String>,
    /// Slack answered `link_disabled`: Socket Mode is off for the app; nothing reconnects
    /// until the config is reloaded or the daemon restarts.
    pub link_disabled: bool,
}

impl SocketSourceStatus {
    /// Connections that are `open`.
    pub fn open(&self) -> usize {
        self.connections
            .values()
            .filter(|c| c.state == ConnectionState::Open)
            .count()
    }
}

/// Every Socket Mode source's status, by source name.
#[derive(Debug, Default)]
pub struct SocketStatuses(Mutex<BTreeMap<String, SocketSourceStatus>>);

impl SocketStatuses {
    /// Changes `source`'s status (created empty if new).
    pub fn update(&self, source: &str, change: impl FnOnce(&mut SocketSourceStatus)) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        change(map.entry(source.to_owned()).or_default());
    }

    pub fn remove(&self, source: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(source);
    }

    pub fn snapshot(&self) -> BTreeMap<String, SocketSourceStatus> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Sources none of whose connections is open.
    pub fn down(&self) -> Vec<String> {
        self.snapshot()
            .into_iter()
            .filter(|(_, status)| status.open() == 0)
            .map(|(name, _)| name)
            .collect()
    }
}
