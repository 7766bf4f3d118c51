//! Opening a wait: a dispatched run (the holder of its current fencing token) pauses for input.
//! What a worker may ask for is checked here; the store writes the wait row, the run's
//! `needs_input` status, its history entry and the expiry timer (the wait's `deadline`) in one
//! transaction. The resume token is made here and only its hash is stored.

use std::time::Duration;

use switchyard_store::entities::{run, wait};
use switchyard_store::slack_messages::NewSlackMessage;
use switchyard_store::waits::NewWait;
pub use switchyard_store::waits::OpenError;
use switchyard_store::{Millis, Store};

/// Longest deadline a wait may have.
pub const MAX_DEADLINE: Duration = Duration::from_secs(366 * 24 * 3600);

/// What the worker asks for, checked ([`OpenRequest::check`]).
#[derive(Debug, Clone)]
pub struct OpenRequest {
    pub fencing_token: i64,
    pub wait_id: String,
    pub expects: String,
    pub proposal_id: String,
    pub proposal_digest: String,
    pub deadline: Duration,
    /// `fail` or `resume`.
    pub on_timeout: OnTimeout,
    /// An approval message to post for the wait (checked by the caller against the sources in
    /// force), written with it.
    pub notify: Option<Notify>,
}

/// An approval message to post through a Slack source for a wait: `body` is what it says; its
/// Approve / Reject buttons carry the wait's resume token, bound to the run, the wait and the
/// proposal digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notify {
    pub source: String,
    pub channel: String,
    pub body: String,
}

/// What happens when a wait's deadline passes without a resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnTimeout {
    /// The run fails (`wait_expired`) and releases its entity.
    Fail,
    /// The run resumes with decision `timeout`.
    Resume,
}

impl OnTimeout {
    pub fn as_str(self) -> &'static str {
        match self {
            OnTimeout::Fail => "fail",
            OnTimeout::Resume => "resume",
        }
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "fail" => Ok(OnTimeout::Fail),
            "resume" => Ok(OnTimeout::Resume),
            other => Err(format!(
                "`on_timeout` must be \"fail\" or \"resume\", not {other:?}"
            )),
        }
    }
}

/// Whether `digest` is a proposal digest this daemon accepts: `sha256:` and 64 lowercase hex
/// digits.
pub fn valid_digest(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// A field holding an id: 1 to 255 bytes, no control characters.
pub fn check_id(field: &str, value: &str) -> Result<(), String> {
    if value.trim().is_empty() || value.len() > crate::store::MAX_KEY_LEN {
        return Err(format!(
            "`{field}` must be 1 to {} bytes",
            crate::store::MAX_KEY_LEN
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(format!("`{field}` must not contain control characters"));
    }
    Ok(())
}

/// An opened wait and its token (shown once; only its hash is stored).
#[derive(Debug, Clone)]
pub struct Opened {
    pub wait: wait::Model,
    pub resume_token: String,
    pub run: run::Model,
}

/// Opens a wait on `run_id` (which the caller may see: tenancy is checked by the handler) as
/// the holder of `request.fencing_token`, with a new resume token.
pub async fn open(
    store: &Store,
    run_id: &str,
    request: &OpenRequest,
    now: Millis,
) -> Result<Opened, OpenError> {
    let resume_token = super::new_token();
    let new = NewWait {
        fencing_token: request.fencing_token,
        wait_id: request.wait_id.clone(),
        expects: request.expects.clone(),
        proposal_id: request.proposal_id.clone(),
        proposal_digest: request.proposal_digest.clone(),
        token_hash: super::token_hash(&resume_token),
        deadline: now.saturating_add(request.deadline.as_millis() as i64),
        on_timeout: request.on_timeout.as_str().to_owned(),
        notify: request.notify.as_ref().map(|notify| NewSlackMessage {
            source: notify.source.clone(),
            channel: notify.channel.clone(),
            body: notify.body.clone(),
            button_value: serde_json::json!({
                "token": resume_token,
                "proposal_digest": request.proposal_digest,
                "run_id": run_id,
                "wait_id": request.wait_id,
            })
            .to_string(),
        }),
    };
    let (wait, run) = store.open_wait(run_id, &new, now).await?;
    Ok(Opened {
        wait,
        resume_token,
        run,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256_hex() {
        let good = format!("sha256:{}", "ab".repeat(32));
        assert!(valid_digest(&good));
        assert!(!valid_digest("sha256:abc"));
        assert!(!valid_digest(&good.to_uppercase()));
        assert!(!valid_digest(&format!("md5:{}", "ab".repeat(32))));
        assert!(!valid_digest(&format!("sha256:{}", "zz".repeat(32))));
    }
}
