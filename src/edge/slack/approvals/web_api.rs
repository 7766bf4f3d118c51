//! Slack's Web API calls the approval poster makes (`chat.postMessage`, `chat.update`): JSON
//! bodies, the bot token as bearer, at the source's `api_base_url`. Slack answers most errors
//! with HTTP 200 and `{"ok": false, "error": ...}`, and rate limits with 429 and `Retry-After`.
//!
//! reqwest rather than slack-morphism's client: that client needs slack-morphism's `hyper`
//! feature (a second HTTP/TLS stack with native roots, HTTP/2 and signal handling) for two
//! calls whose bodies are the Block Kit JSON built here anyway.

use serde_json::Value;

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CallError {
    pub detail: String,
    /// Seconds Slack asked to wait (429).
    pub retry_after: Option<u64>,
}

/// Calls `method` with `body`; Slack's answer when `ok` is true.
pub(super) async fn call(
    http: &reqwest::Client,
    api_base_url: &str,
    bot_token: &str,
    method: &str,
    body: &Value,
) -> Result<Value, CallError> {
    let failed = |detail: String| CallError {
        detail,
        retry_after: None,
    };
    let response = http
        .post(format!("{api_base_url}{method}"))
        .bearer_auth(bot_token)
        .json(body)
        .send()
        .await
        .map_err(|error| failed(format!("{method}: {error}")))?;
    let status = response.status();
    if status.as_u16() == 429 {
        return Err(CallError {
            detail: format!("{method}: rate limited (429)"),
            retry_after: response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok()),
        });
    }
    let answer: Value = response
        .json()
        .await
        .map_err(|error| failed(format!("{method} ({status}): {error}")))?;
    if answer["ok"].as_bool() == Some(true) {
        Ok(answer)
    } else {
        Err(failed(format!(
            "{method} ({status}): {}",
            answer["error"].as_str().unwrap_or("no `ok` in the answer")
        )))
    }
}
