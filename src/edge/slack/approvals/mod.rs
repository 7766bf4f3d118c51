//! Approval messages Switchyard posts to Slack: a wait opened with
//! `notify = {"slack": {"source", "channel"}}` writes a `slack_messages` row in its own
//! transaction (`Store::open_wait`); this poster claims due rows (one replica at a time), posts
//! the proposal with Approve / Reject buttons (`chat.postMessage`, the source's bot token), and
//! once the wait ended (resumed by a click over HTTP or Socket Mode, by the API, timed out,
//! expired, cancelled) rewrites the message without buttons (`chat.update`). A failed call is
//! retried with backoff (1 s doubling to 5 min, or Slack's `Retry-After`); intake never waits
//! for any of it.
//!
//! Invariant: a message is posted only while its wait is open, by a source that serves the
//! wait's tenant (checked when the wait is opened, `config::check_approval_notify`), and each row is worked on
//! by one claim holder at a time.

mod message;
mod web_api;

use std::time::Duration;

use switchyard_store::entities::slack_message::status;
use switchyard_store::entities::wait::WaitStatus;
use switchyard_store::slack_messages::ClaimedMessage;
use switchyard_store::{Store, now_millis};

use crate::background::Background;
use crate::config::ResolvedSource;
use crate::live::{Live, LiveConfig};

const PASS_EVERY: Duration = Duration::from_millis(500);
const CLAIM_MS: i64 = 60_000;
const BATCH: u64 = 20;
const MAX_BACKOFF_MS: i64 = 5 * 60 * 1000;

/// The poster, running until shutdown.
#[derive(Debug)]
pub struct Approvals(Background);

impl Approvals {
    pub fn start(store: Store, live: LiveConfig) -> Self {
        Self(Background::spawn(move |mut stopped| async move {
            let http = reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default();
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(PASS_EVERY) => {}
                    _ = stopped.changed() => return,
                }
                let claimed = match store
                    .claim_slack_messages(now_millis(), CLAIM_MS, BATCH)
                    .await
                {
                    Ok(claimed) => claimed,
                    Err(error) => {
                        tracing::warn!(%error, "cannot claim Slack approval messages");
                        continue;
                    }
                };
                for claimed in claimed {
                    work(&store, &live.current(), &http, claimed).await;
                }
            }
        }))
    }

    pub async fn shutdown(&self) {
        self.0.stop(Duration::from_secs(5)).await;
    }
}

/// The delay before retry `attempts` + 1.
fn backoff_ms(attempts: i32, retry_after: Option<u64>) -> i64 {
    if let Some(seconds) = retry_after {
        return (seconds as i64 * 1000).clamp(1000, MAX_BACKOFF_MS);
    }
    (1000i64 << attempts.clamp(0, 20)).min(MAX_BACKOFF_MS)
}

async fn work(store: &Store, live: &Live, http: &reqwest::Client, claimed: ClaimedMessage) {
    let row = &claimed.message;
    let now = now_millis();
    let result = match (row.status.as_str(), &claimed.wait) {
        (status::PENDING, Some(wait)) if wait.status == WaitStatus::Open => {
            match post(live, http, &claimed).await {
                Ok(ts) => store.slack_message_posted(row, &ts, now).await.map(|_| ()),
                Err(error) => fail(store, &claimed, error, now).await,
            }
        }
        (status::PENDING, _) => store
            .slack_message_done(
                row,
                Some("the wait ended before the message was posted"),
                now,
            )
            .await
            .map(|_| ()),
        (_, Some(wait)) => {
            let Some(ts) = &row.ts else {
                return;
            };
            let body = message::resolved(&row.channel, ts, &row.body, wait);
            match call(live, http, &row.source, "chat.update", &body).await {
                Ok(_) => store.slack_message_done(row, None, now).await.map(|_| ()),
                Err(error) => fail(store, &claimed, error, now).await,
            }
        }
        (_, None) => store
            .slack_message_done(row, Some("the wait is gone"), now)
            .await
            .map(|_| ()),
    };
    if let Err(error) = result {
        tracing::warn!(%error, message = %row.id, "cannot record a Slack approval message's state");
    }
}

async fn post(
    live: &Live,
    http: &reqwest::Client,
    claimed: &ClaimedMessage,
) -> Result<String, web_api::CallError> {
    let row = &claimed.message;
    let (Some(wait), Some(value)) = (&claimed.wait, &row.button_value) else {
        return Err(web_api::CallError {
            detail: "nothing to post".into(),
            retry_after: None,
        });
    };
    let body = message::approval(&row.channel, &row.body, wait, value);
    let answer = call(live, http, &row.source, "chat.postMessage", &body).await?;
    tracing::info!(source = %row.source, channel = %row.channel, run_id = %row.run_id, wait_id = %wait.wait_id, "approval message posted to Slack");
    Ok(answer["ts"].as_str().unwrap_or_default().to_owned())
}

async fn call(
    live: &Live,
    http: &reqwest::Client,
    source: &str,
    method: &str,
    body: &serde_json::Value,
) -> Result<serde_json::Value, web_api::CallError> {
    let Some(ResolvedSource::Slack {
        config,
        bot_token: Some(bot_token),
        ..
    }) = live.source(super::KIND, source)
    else {
        return Err(web_api::CallError {
            detail: format!("slack source `{source}` with a bot token is not in force"),
            retry_after: None,
        });
    };
    web_api::call(http, &config.api_base_url, bot_token, method, body).await
}

async fn fail(
    store: &Store,
    claimed: &ClaimedMessage,
    error: web_api::CallError,
    now: i64,
) -> Result<(), switchyard_store::DbErr> {
    let row = &claimed.message;
    let retry_at = now + backoff_ms(row.attempts, error.retry_after);
    tracing::warn!(source = %row.source, run_id = %row.run_id, attempts = row.attempts + 1, error = %error.detail, "Slack approval message call failed; retrying");
    store
        .slack_message_failed(row, &error.detail, retry_at, now)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_five_minutes_and_honours_retry_after() {
        assert_eq!(backoff_ms(0, None), 1000);
        assert_eq!(backoff_ms(3, None), 8000);
        assert_eq!(backoff_ms(30, None), MAX_BACKOFF_MS);
        assert_eq!(backoff_ms(0, Some(30)), 30_000);
    }
}
