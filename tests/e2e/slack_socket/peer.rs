//! A local Slack for Socket Mode tests: `POST /api/apps.connections.open` (checks the app-level
//! token, hands out single-use `ws://` URLs), a WebSocket server speaking Slack's envelope
//! protocol (`hello`, `events_api`, `interactive`, `disconnect`, acks matched by
//! `envelope_id`), and `chat.postMessage` / `chat.update` (checks the bot token, records what
//! was posted).

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};

pub const APP_TOKEN: &str = "xapp-1-A0APP-test-app-token";
pub const BOT_TOKEN: &str = "xoxb-test-bot-token";

/// What happened to a connection, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Happening {
    Opened(u64),
    Closed(u64),
}

#[derive(Debug)]
struct Connection {
    out: mpsc::UnboundedSender<Message>,
    open: bool,
}

#[derive(Debug, Clone)]
struct Sent {
    kind: String,
    payload: Value,
    retries: u64,
}

#[derive(Debug, Default)]
struct PeerState {
    ws_addr: Mutex<String>,
    tickets: Mutex<HashSet<String>>,
    next: AtomicU64,
    connections: Mutex<BTreeMap<u64, Connection>>,
    happenings: Mutex<Vec<Happening>>,
    /// Envelopes sent and not acknowledged yet.
    unacked: Mutex<BTreeMap<String, Sent>>,
    /// Every ack received: (connection, envelope id).
    acks: Mutex<Vec<(u64, String)>>,
    /// While set, acks are read and thrown away (as if lost on the way to Slack).
    lose_acks: AtomicBool,
    /// Web API calls with a valid bot token: (method, body).
    posts: Mutex<Vec<(String, Value)>>,
    /// Web API calls refused (wrong token).
    refused_posts: AtomicU64,
    /// `chat.postMessage` calls to fail with `{"ok": false}` before succeeding.
    fail_posts: AtomicU64,
}

/// The local Slack.
#[derive(Debug, Clone)]
pub struct Peer {
    /// `api_base_url` for the daemon.
    pub api_base_url: String,
    state: Arc<PeerState>,
}

impl Peer {
    pub async fn start() -> Peer {
        let state = Arc::new(PeerState::default());
        let ws = TcpListener::bind("127.0.0.1:0").await.expect("bind ws");
        *state.ws_addr.lock().expect("peer state") = ws.local_addr().expect("addr").to_string();
        tokio::spawn(accept(ws, state.clone()));
        let app = axum::Router::new()
            .route("/api/apps.connections.open", post(connections_open))
            .route("/api/chat.postMessage", post(chat_post_message))
            .route("/api/chat.update", post(chat_update))
            .with_state(state.clone());
        let (addr, _server) = super::super::harness::serve_local(app).await;
        Peer {
            api_base_url: format!("http://{addr}/api/"),
            state,
        }
    }

    /// Connections open now.
    pub fn open(&self) -> Vec<u64> {
        let connections = self.state.connections.lock().expect("peer state");
        connections
            .iter()
            .filter(|(_, c)| c.open)
            .map(|(id, _)| *id)
            .collect()
    }

    pub fn happenings(&self) -> Vec<Happening> {
        self.state.happenings.lock().expect("peer state").clone()
    }

    /// Waits until `count` connections are open.
    pub async fn wait_open(&self, count: usize) -> Vec<u64> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let open = self.open();
            if open.len() >= count {
                return open;
            }
            assert!(
                Instant::now() < deadline,
                "{count} connections not open in 30 s: {:?}",
                self.happenings()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn send_on(&self, connection: u64, frame: Value) -> bool {
        let connections = self.state.connections.lock().expect("peer state");
        connections
            .get(&connection)
            .filter(|c| c.open)
            .is_some_and(|c| c.out.send(Message::Text(frame.to_string().into())).is_ok())
    }

    /// Sends an envelope of `kind` on `connection`; its envelope id.
    pub fn envelope_on(&self, connection: u64, kind: &str, payload: Value) -> String {
        let id = format!("env-{}", uuid::Uuid::now_v7().simple());
        self.state.unacked.lock().expect("peer state").insert(
            id.clone(),
            Sent {
                kind: kind.into(),
                payload: payload.clone(),
                retries: 0,
            },
        );
        let frame = json!({"envelope_id": id, "type": kind, "payload": payload,
            "accepts_response_payload": false, "retry_attempt": 0, "retry_reason": ""});
        assert!(
            self.send_on(connection, frame),
            "connection {connection} is not open"
        );
        id
    }

    /// Sends an envelope on the first open connection.
    pub async fn envelope(&self, kind: &str, payload: Value) -> String {
        let connection = self.wait_open(1).await[0];
        self.envelope_on(connection, kind, payload)
    }

    /// Sends every unacknowledged envelope again, `retry_attempt` counted up, on an open
    /// connection (as Slack does); how many.
    pub async fn redeliver_unacked(&self) -> usize {
        let connection = self.wait_open(1).await[0];
        let again: Vec<(String, Sent)> = {
            let mut unacked = self.state.unacked.lock().expect("peer state");
            unacked
                .iter_mut()
                .map(|(id, sent)| {
                    sent.retries += 1;
                    (id.clone(), sent.clone())
                })
                .collect()
        };
        for (id, sent) in &again {
            let frame = json!({"envelope_id": id, "type": sent.kind, "payload": sent.payload,
                "accepts_response_payload": false, "retry_attempt": sent.retries,
                "retry_reason": "timeout"});
            assert!(self.send_on(connection, frame));
        }
        again.len()
    }

    pub fn acked(&self, envelope_id: &str) -> bool {
        self.state
            .acks
            .lock()
            .expect("peer state")
            .iter()
            .any(|(_, id)| id == envelope_id)
    }

    /// Waits for the ack of `envelope_id`; whether it came within `timeout`.
    pub async fn wait_acked(&self, envelope_id: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.acked(envelope_id) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    pub fn lose_acks(&self, lose: bool) {
        self.state.lose_acks.store(lose, Ordering::SeqCst);
    }

    /// Sends `disconnect` with `reason` on `connection`, and closes it `after` later.
    pub fn disconnect(&self, connection: u64, reason: &str, after: Duration) {
        self.send_on(
            connection,
            json!({"type": "disconnect", "reason": reason, "debug_info": {"host": "local"}}),
        );
        let state = self.state.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let connections = state.connections.lock().expect("peer state");
            if let Some(c) = connections.get(&connection) {
                let _ = c.out.send(Message::Close(None));
            }
        });
    }

    /// Web API calls made with the bot token: (method, body).
    pub fn posts(&self) -> Vec<(String, Value)> {
        self.state.posts.lock().expect("peer state").clone()
    }

    pub fn refused_posts(&self) -> u64 {
        self.state.refused_posts.load(Ordering::SeqCst)
    }

    /// Fails the next `count` `chat.postMessage` calls (`{"ok": false, "error": "internal_error"}`).
    pub fn fail_posts(&self, count: u64) {
        self.state.fail_posts.store(count, Ordering::SeqCst);
    }
}

async fn connections_open(State(state): State<Arc<PeerState>>, headers: HeaderMap) -> Json<Value> {
    if headers.get("authorization").and_then(|v| v.to_str().ok())
        != Some(&format!("Bearer {APP_TOKEN}"))
    {
        return Json(json!({"ok": false, "error": "invalid_auth"}));
    }
    let ticket = uuid::Uuid::new_v4().simple().to_string();
    state
        .tickets
        .lock()
        .expect("peer state")
        .insert(ticket.clone());
    let addr = state.ws_addr.lock().expect("peer state").clone();
    Json(json!({"ok": true, "url": format!("ws://{addr}/link/?ticket={ticket}")}))
}

fn bot_authorised(state: &PeerState, headers: &HeaderMap) -> bool {
    let ok = headers.get("authorization").and_then(|v| v.to_str().ok())
        == Some(&format!("Bearer {BOT_TOKEN}"));
    if !ok {
        state.refused_posts.fetch_add(1, Ordering::SeqCst);
    }
    ok
}

async fn chat_post_message(
    State(state): State<Arc<PeerState>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Json<Value> {
    if !bot_authorised(&state, &headers) {
        return Json(json!({"ok": false, "error": "invalid_auth"}));
    }
    let failing = state.fail_posts.load(Ordering::SeqCst);
    if failing > 0 {
        state.fail_posts.store(failing - 1, Ordering::SeqCst);
        return Json(json!({"ok": false, "error": "internal_error"}));
    }
    let mut posts = state.posts.lock().expect("peer state");
    posts.push(("chat.postMessage".into(), body.clone()));
    let ts = format!("1764633600.{:06}", posts.len());
    Json(json!({"ok": true, "channel": body["channel"], "ts": ts, "message": {"ts": ts}}))
}

async fn chat_update(
    State(state): State<Arc<PeerState>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Json<Value> {
    if !bot_authorised(&state, &headers) {
        return Json(json!({"ok": false, "error": "invalid_auth"}));
    }
    state
        .posts
        .lock()
        .expect("peer state")
        .push(("chat.update".into(), body.clone()));
    Json(json!({"ok": true, "channel": body["channel"], "ts": body["ts"]}))
}

async fn accept(listener: TcpListener, state: Arc<PeerState>) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(serve_connection(stream, state.clone()));
    }
}

async fn serve_connection(stream: tokio::net::TcpStream, state: Arc<PeerState>) {
    let mut ticket_ok = false;
    // tungstenite's callback type: its error is an HTTP response, as large as it is.
    #[allow(clippy::result_large_err)]
    let check = |request: &Request, response: Response| {
        let query = request.uri().query().unwrap_or_default();
        let ticket = query.strip_prefix("ticket=").unwrap_or_default();
        // Single use: a URL opens one connection.
        ticket_ok = state.tickets.lock().expect("peer state").remove(ticket);
        Ok(response)
    };
    let Ok(socket) = tokio_tungstenite::accept_hdr_async(stream, check).await else {
        return;
    };
    let (mut sink, mut stream) = socket.split();
    if !ticket_ok {
        let _ = sink.send(Message::Close(None)).await;
        return;
    }
    let id = state.next.fetch_add(1, Ordering::SeqCst);
    let (out, mut outgoing) = mpsc::unbounded_channel();
    state
        .connections
        .lock()
        .expect("peer state")
        .insert(id, Connection { out, open: true });
    state
        .happenings
        .lock()
        .expect("peer state")
        .push(Happening::Opened(id));
    let hello = json!({"type": "hello", "num_connections": 1,
        "debug_info": {"host": "local", "approximate_connection_time": 18060},
        "connection_info": {"app_id": "A0APP"}});
    let _ = sink.send(Message::Text(hello.to_string().into())).await;
    loop {
        tokio::select! {
            Some(message) = outgoing.recv() => {
                let closing = matches!(message, Message::Close(_));
                if sink.send(message).await.is_err() || closing {
                    break;
                }
            }
            frame = stream.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                    if let Some(envelope_id) = value["envelope_id"].as_str()
                        && !state.lose_acks.load(Ordering::SeqCst)
                    {
                        state.unacked.lock().expect("peer state").remove(envelope_id);
                        state.acks.lock().expect("peer state").push((id, envelope_id.to_owned()));
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            }
        }
    }
    if let Some(c) = state.connections.lock().expect("peer state").get_mut(&id) {
        c.open = false;
    }
    state
        .happenings
        .lock()
        .expect("peer state")
        .push(Happening::Closed(id));
}
