//! Delivering alert notifications: the loop that claims owed notifications from the store's
//! outbox, hands each to its notifier (`webhook`, `slack`, `email`) and records the outcome,
//! retrying a failure on a capped backoff; and what a notification says (`message`).
//!
//! Invariants: a notification is marked delivered only after its notifier accepted it, and a
//! failure is recorded both on its row (retried) and in the notifier's health (`/readyz`).
//! One alert's notifications to one notifier are delivered in order (`fired` before
//! `resolved`, episode by episode): the store's claim holds a later one back while an earlier
//! one is still pending, retried or in flight.

mod email;
pub mod message;
mod slack;
mod webhook;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use switchyard_store::alerts::notifications::{ClaimedNotification, NotificationOutcome};
use switchyard_store::now_millis;
use tokio::sync::watch;

use super::Inputs;
use crate::config::ResolvedNotifier;
use message::Message;

/// How long a claim lasts: longer than any notifier's own timeout.
const CLAIM: Duration = Duration::from_secs(120);
/// Notifications claimed at once.
const BATCH: u64 = 16;
/// How often due notifications are looked for when nothing wakes the loop.
const TICK: Duration = Duration::from_secs(1);
/// Delays before each retry; the last repeats.
const BACKOFF: [Duration; 7] = [
    Duration::from_secs(2),
    Duration::from_secs(5),
    Duration::from_secs(15),
    Duration::from_secs(60),
    Duration::from_secs(5 * 60),
    Duration::from_secs(15 * 60),
    Duration::from_secs(30 * 60),
];

/// The delay after the `attempts`-th failed attempt.
pub fn backoff(attempts: i32) -> Duration {
    let step = usize::try_from(attempts.max(1) - 1).unwrap_or(0);
    BACKOFF[step.min(BACKOFF.len() - 1)]
}

/// One configured notifier, ready to send.
enum Sender {
    Webhook(Box<webhook::WebhookSender>),
    Slack(slack::SlackSender),
    Email(email::EmailSender),
}

impl Sender {
    fn build(notifier: &ResolvedNotifier) -> Result<Self, String> {
        Ok(match notifier {
            ResolvedNotifier::Webhook { config, secret } => {
                Sender::Webhook(Box::new(webhook::WebhookSender::new(config, secret)?))
            }
            ResolvedNotifier::Slack { config, token } => {
                Sender::Slack(slack::SlackSender::new(config, token)?)
            }
            ResolvedNotifier::Email {
                config,
                credentials,
                ca_cert,
            } => Sender::Email(email::EmailSender::new(
                config,
                credentials.clone(),
                ca_cert.as_deref(),
            )?),
        })
    }

    /// Sends one notification; what finds the message again, or why it failed.
    async fn send(
        &self,
        message: &Message<'_>,
        previous: Option<&str>,
    ) -> Result<Option<String>, String> {
        match self {
            Sender::Webhook(sender) => sender.send(message).await.map(|()| None),
            Sender::Slack(sender) => sender.send(message, previous).await.map(Some),
            Sender::Email(sender) => sender.send(message).await.map(|()| None),
        }
    }
}

/// Senders per notifier name, rebuilt when the revision in force changes.
#[derive(Default)]
struct Senders {
    revision: String,
    built: HashMap<String, Arc<Result<Sender, String>>>,
}

impl Senders {
    fn get(
        &mut self,
        inputs: &Inputs,
        name: &str,
    ) -> Option<(Arc<Result<Sender, String>>, &'static str)> {
        let live = inputs.live.current();
        if live.revision() != self.revision {
            self.revision = live.revision().to_owned();
            self.built.clear();
        }
        let notifier = live.settings.notifiers.iter().find(|n| n.name() == name)?;
        let sender = self
            .built
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(Sender::build(notifier)))
            .clone();
        Some((sender, notifier.kind()))
    }
}

pub(super) async fn deliver_loop(
    inputs: Inputs,
    wake: Arc<tokio::sync::Notify>,
    mut stop: watch::Receiver<bool>,
) {
    let mut senders = Senders::default();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = wake.notified() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let claimed = match inputs
            .store
            .claim_alert_notifications(now_millis(), CLAIM.as_millis() as i64, BATCH)
            .await
        {
            Ok(claimed) => claimed,
            Err(error) => {
                tracing::warn!(%error, "cannot claim alert notifications; trying again");
                continue;
            }
        };
        for claim in claimed {
            deliver(&inputs, &mut senders, claim).await;
        }
    }
}

async fn deliver(inputs: &Inputs, senders: &mut Senders, claim: ClaimedNotification) {
    let notification = &claim.notification;
    let name = notification.notifier.as_str();
    let outcome = match senders.get(inputs, name) {
        None => NotificationOutcome::Dropped {
            error: format!("notifier `{name}` is no longer configured"),
        },
        Some((sender, kind)) => {
            let console = message::console_url(&inputs.live.current().settings);
            let message = Message::new(
                &notification.id,
                &claim.alert,
                &notification.event,
                &console,
            );
            let previous = if notification.event == switchyard_store::alerts::FIRED {
                None
            } else {
                inputs
                    .store
                    .fired_notification_ref(&claim.alert.id, notification.episode, name)
                    .await
                    .ok()
                    .flatten()
            };
            let sent = match sender.as_ref() {
                Ok(sender) => sender.send(&message, previous.as_deref()).await,
                Err(error) => Err(error.clone()),
            };
            inputs
                .status
                .record_notifier(name, kind, sent.as_ref().err().cloned());
            match sent {
                Ok(external_ref) => {
                    tracing::info!(notifier = name, alert_id = %claim.alert.id, event = %notification.event, "alert notification delivered");
                    NotificationOutcome::Delivered { external_ref }
                }
                Err(error) => {
                    let delay = backoff(notification.attempts);
                    tracing::warn!(notifier = name, alert_id = %claim.alert.id, attempts = notification.attempts, retry_in = %humantime::format_duration(delay), %error, "alert notification failed; retrying");
                    NotificationOutcome::Retry {
                        due_at: now_millis() + delay.as_millis() as i64,
                        error,
                    }
                }
            }
        }
    };
    if let Err(error) = inputs
        .store
        .finish_alert_notification(&notification.id, &claim.claim_token, &outcome, now_millis())
        .await
    {
        tracing::warn!(%error, notifier = name, "cannot record an alert notification; it is sent again when its claim lapses");
    }
}
