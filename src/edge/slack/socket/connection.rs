//! One Slack Socket Mode connection: a single-use URL from `apps.connections.open` (app-level
//! token, at the source's `api_base_url`), the WebSocket (tokio-tungstenite, rustls with the
//! webpki roots), Slack's `hello`, then every envelope handed to `envelope::deliver` on a task
//! of its own and acknowledged on this connection once decided.
//!
//! Invariant: an `{"envelope_id"}` ack is written only after `deliver` says the envelope was
//! decided; a connection that ends first leaves the envelope unacknowledged, for Slack to send
//! again.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};

use super::SourceContext;
use super::envelope::{self, Ack, Frame};
use crate::socket_status::{ConnectionState, ConnectionStatus};

/// How long Slack's `hello` may take after the WebSocket opens.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long opening the URL and the WebSocket may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(15);

type Socket = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

/// What a connection tells its slot.
#[derive(Debug)]
pub(super) enum Event {
    /// Slack sent `disconnect` with this reason; the connection stays until Slack closes it.
    Disconnect(String),
    /// The connection ended (`Some`: with this error).
    Closed(Option<String>),
}

/// Why a connection could not be opened.
#[derive(Debug)]
pub(super) struct OpenFailure {
    pub detail: String,
    /// Slack's `Retry-After` on a 429, in seconds.
    pub retry_after: Option<u64>,
}

impl OpenFailure {
    fn new(detail: impl Into<String>) -> Self {
        Self {
            detail: detail.into(),
            retry_after: None,
        }
    }
}

/// A running connection.
#[derive(Debug)]
pub(super) struct Connection {
    pub events: mpsc::UnboundedReceiver<Event>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Connection {
    /// Closes it and waits for its task.
    pub async fn close(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }

    /// Lets it run until Slack closes it (acks of envelopes still in flight go out on it), at
    /// most `grace`, then closes it.
    pub async fn drain(mut self, grace: Duration) {
        let _ = tokio::time::timeout(grace, async {
            while let Some(event) = self.events.recv().await {
                if matches!(event, Event::Closed(_)) {
                    return;
                }
            }
        })
        .await;
        self.close().await;
    }
}

/// A single-use WebSocket URL from `apps.connections.open`.
async fn open_url(ctx: &SourceContext) -> Result<String, OpenFailure> {
    let url = format!("{}apps.connections.open", ctx.api_base_url);
    let response = ctx
        .http
        .post(&url)
        .bearer_auth(&ctx.app_token)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("")
        .send()
        .await
        .map_err(|error| OpenFailure::new(format!("apps.connections.open: {error}")))?;
    let status = response.status();
    if status.as_u16() == 429 {
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        return Err(OpenFailure {
            detail: "apps.connections.open: rate limited (429)".into(),
            retry_after,
        });
    }
    let body: Value = response
        .json()
        .await
        .map_err(|error| OpenFailure::new(format!("apps.connections.open ({status}): {error}")))?;
    match (body["ok"].as_bool(), body["url"].as_str()) {
        (Some(true), Some(url)) => Ok(url.to_owned()),
        _ => Err(OpenFailure::new(format!(
            "apps.connections.open ({status}): {}",
            body["error"].as_str().unwrap_or("no url in the answer")
        ))),
    }
}

/// The TLS client for `wss://` URLs: rustls with ring and the webpki roots, as the rest of
/// the daemon.
pub(super) fn tls_connector() -> Option<Connector> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .ok()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Some(Connector::Rustls(Arc::new(config)))
}

/// Opens connection `id` in `slot`: URL, WebSocket, `hello`.
pub(super) async fn open(
    ctx: &Arc<SourceContext>,
    slot: u8,
    id: u64,
) -> Result<Connection, OpenFailure> {
    let url = tokio::time::timeout(OPEN_TIMEOUT, open_url(ctx))
        .await
        .map_err(|_| OpenFailure::new("apps.connections.open timed out"))??;
    let (mut socket, _) = tokio::time::timeout(
        OPEN_TIMEOUT,
        tokio_tungstenite::connect_async_tls_with_config(
            url.as_str(),
            None,
            false,
            tls_connector(),
        ),
    )
    .await
    .map_err(|_| OpenFailure::new("the WebSocket did not open in time"))?
    .map_err(|error| OpenFailure::new(format!("WebSocket: {error}")))?;
    let hello = tokio::time::timeout(HELLO_TIMEOUT, async {
        while let Some(frame) = socket.next().await {
            match frame {
                Ok(Message::Text(text)) if matches!(envelope::parse(&text), Frame::Hello) => {
                    return Ok(());
                }
                Ok(Message::Close(_)) => break,
                Ok(_) => {}
                Err(error) => return Err(OpenFailure::new(format!("WebSocket: {error}"))),
            }
        }
        Err(OpenFailure::new("closed before hello"))
    })
    .await
    .map_err(|_| OpenFailure::new("no hello in time"))?;
    hello?;
    let now = switchyard_store::now_millis();
    ctx.statuses.update(&ctx.name, |status| {
        status.connections.insert(
            id,
            ConnectionStatus {
                slot,
                state: ConnectionState::Open,
                opened_at: now,
                envelopes: 0,
                last_envelope_at: None,
            },
        );
        status.link_disabled = false;
    });
    tracing::info!(source = %ctx.name, slot, connection = id, "Slack Socket Mode connection open");
    let (events_tx, events) = mpsc::unbounded_channel();
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(run(ctx.clone(), id, socket, events_tx, stopped));
    Ok(Connection { events, stop, task })
}

/// Reads frames and writes acks until the connection ends or is stopped.
async fn run(
    ctx: Arc<SourceContext>,
    id: u64,
    socket: Socket,
    events: mpsc::UnboundedSender<Event>,
    mut stopped: watch::Receiver<bool>,
) {
    let (mut sink, mut stream) = socket.split();
    let (acks, mut acks_due) = mpsc::unbounded_channel::<String>();
    let ended = loop {
        tokio::select! {
            _ = stopped.changed() => {
                let _ = sink.send(Message::Close(None)).await;
                break None;
            }
            Some(envelope_id) = acks_due.recv() => {
                let ack = json!({ "envelope_id": envelope_id }).to_string();
                if let Err(error) = sink.send(Message::Text(ack.into())).await {
                    break Some(format!("cannot send an ack: {error}"));
                }
            }
            frame = stream.next() => match frame {
                None | Some(Ok(Message::Close(_))) => break None,
                Some(Err(error)) => break Some(format!("WebSocket: {error}")),
                Some(Ok(Message::Ping(data))) => {
                    let _ = sink.send(Message::Pong(data)).await;
                }
                Some(Ok(Message::Text(text))) => match envelope::parse(&text) {
                    Frame::Envelope(envelope) => {
                        let now = switchyard_store::now_millis();
                        ctx.statuses.update(&ctx.name, |status| {
                            status.last_envelope_at = Some(now);
                            if let Some(connection) = status.connections.get_mut(&id) {
                                connection.envelopes += 1;
                                connection.last_envelope_at = Some(now);
                            }
                        });
                        crate::metrics::metrics()
                            .socket_envelopes
                            .get_or_create(&crate::metrics::SourceLabel {
                                source: ctx.name.clone(),
                            })
                            .inc();
                        let (ctx, acks) = (ctx.clone(), acks.clone());
                        tokio::spawn(async move {
                            let ack = envelope::deliver(&ctx.state, &ctx.name, &envelope).await;
                            if ack != Ack::Withheld {
                                let _ = acks.send(envelope.envelope_id);
                            }
                        });
                    }
                    Frame::Disconnect { reason } => {
                        tracing::info!(source = %ctx.name, connection = id, reason, "Slack asked a Socket Mode connection to disconnect");
                        ctx.statuses.update(&ctx.name, |status| {
                            if let Some(connection) = status.connections.get_mut(&id) {
                                connection.state = ConnectionState::Draining;
                            }
                        });
                        let _ = events.send(Event::Disconnect(reason));
                    }
                    Frame::Hello => {}
                    Frame::Other(what) => {
                        tracing::debug!(source = %ctx.name, connection = id, what, "Socket Mode frame ignored");
                    }
                },
                Some(Ok(_)) => {}
            }
        }
    };
    ctx.statuses.update(&ctx.name, |status| {
        status.connections.remove(&id);
        if let Some(error) = &ended {
            status.last_error = Some(error.clone());
        }
    });
    tracing::info!(source = %ctx.name, connection = id, error = ended.as_deref(), "Slack Socket Mode connection closed");
    let _ = events.send(Event::Closed(ended));
}
