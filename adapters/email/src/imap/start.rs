//! The first connection to a mailbox without a cursor: decide where reading starts
//! (`start_from`), record it with the cursor through the sink, and for a dated start take
//! exactly the messages received since the date.
//!
//! Invariant: mail that a start leaves behind is never delivered (while this process runs the
//! dated pass; a crash in the middle of that pass may take the older messages between the
//! named ones, each once); a mailbox that already has a cursor is never started again.

use std::collections::HashSet;

use chrono::{DateTime, Duration as Days, FixedOffset, Utc};
use futures::TryStreamExt;
use tracing::info;

use super::session::Selected;
use super::transport::ImapSession;
use super::{Poller, guarded};
use crate::error::SessionError;
use crate::sink::MailboxSink;
use crate::start::StartFrom;
use crate::start::StartPoint;

/// A dated start in progress: only `named` UIDs below `uid_next` are taken.
pub(super) struct StartFilter {
    uidvalidity: u32,
    named: HashSet<u32>,
    uid_next: u32,
}

impl StartFilter {
    /// Whether the dated start takes `uid`.
    pub(super) fn takes(&self, uidvalidity: u32, uid: u32) -> bool {
        uidvalidity != self.uidvalidity || uid >= self.uid_next || self.named.contains(&uid)
    }
}

fn imap(command: &'static str) -> impl FnOnce(async_imap::error::Error) -> SessionError {
    move |source| SessionError::Imap { command, source }
}

impl<S: MailboxSink> Poller<S> {
    /// Starts a mailbox seen for the first time: the first UID to read, or `None` when another
    /// replica started it first.
    pub(super) async fn start(
        &mut self,
        session: &mut ImapSession,
        selected: Selected,
    ) -> Result<Option<u32>, SessionError> {
        let timeout = self.options.io_timeout;
        let uid_next = match selected.uid_next {
            Some(next) => next,
            None => next_uid(session, &mut self.shutdown, timeout).await?,
        };
        let (first_uid, left_behind, named) = match self.config.start_from {
            StartFrom::Beginning => (1, 0, None),
            StartFrom::Now => (uid_next, selected.exists, None),
            StartFrom::Since(date) => {
                let named = received_since(session, &mut self.shutdown, timeout, date).await?;
                let first = named.iter().min().copied().unwrap_or(uid_next);
                let left = selected
                    .exists
                    .saturating_sub(u32::try_from(named.len()).unwrap_or(u32::MAX));
                (first, left, Some(named))
            }
        };
        let point = StartPoint {
            start_from: self.config.start_from.to_string(),
            uidvalidity: selected.uidvalidity,
            first_uid,
            left_behind,
            // Milliseconds, as the store keeps it: the status reads the same after a restart.
            started_at: DateTime::from_timestamp_millis(Utc::now().timestamp_millis())
                .unwrap_or_default(),
        };
        let (source, mailbox) = (self.config.name.clone(), self.config.mailbox.clone());
        let started = guarded(
            &mut self.shutdown,
            timeout,
            "start_mailbox",
            self.sink.start_mailbox(&source, &mailbox, &point),
        )
        .await??;
        if !started {
            return Ok(None);
        }
        info!(source, mailbox, start_from = %point.start_from, first_uid, left_behind,
            "first connection to the mailbox: reading starts here");
        self.status.started = Some(point);
        self.start_known = true;
        self.start_filter = named.map(|named| StartFilter {
            uidvalidity: selected.uidvalidity,
            named,
            uid_next,
        });
        Ok(Some(first_uid))
    }

    /// After a complete pass of a dated start: the cursor moves past what it left behind.
    pub(super) async fn finish_start(&mut self, uidvalidity: u32) -> Result<(), SessionError> {
        let Some(filter) = self.start_filter.take() else {
            return Ok(());
        };
        if filter.uidvalidity != uidvalidity || filter.uid_next <= 1 {
            return Ok(());
        }
        let (source, mailbox) = (self.config.name.clone(), self.config.mailbox.clone());
        let skipped = guarded(
            &mut self.shutdown,
            self.options.io_timeout,
            "skip_to",
            self.sink
                .skip_to(&source, &mailbox, uidvalidity, filter.uid_next - 1),
        )
        .await?;
        if let Err(error) = skipped {
            self.start_filter = Some(filter);
            return Err(error.into());
        }
        Ok(())
    }
}

/// `UIDNEXT` for a server whose SELECT did not say: one past the highest UID.
async fn next_uid(
    session: &mut ImapSession,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
    timeout: std::time::Duration,
) -> Result<u32, SessionError> {
    let found = guarded(shutdown, timeout, "UID SEARCH", session.uid_search("ALL"))
        .await?
        .map_err(imap("UID SEARCH"))?;
    Ok(found
        .into_iter()
        .max()
        .map_or(1, |max| max.saturating_add(1)))
}

/// The UIDs of the messages whose internal date is at or after `date`: `SINCE` the day
/// before (IMAP compares whole days in the server's zone), then the exact instant.
async fn received_since(
    session: &mut ImapSession,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
    timeout: std::time::Duration,
    date: DateTime<FixedOffset>,
) -> Result<HashSet<u32>, SessionError> {
    let day = (date - Days::days(1)).format("%d-%b-%Y").to_string();
    let candidates = guarded(
        shutdown,
        timeout,
        "UID SEARCH",
        session.uid_search(format!("SINCE {day}")),
    )
    .await?
    .map_err(imap("UID SEARCH"))?;
    if candidates.is_empty() {
        return Ok(HashSet::new());
    }
    let mut sorted: Vec<u32> = candidates.into_iter().collect();
    sorted.sort_unstable();
    let set = sorted
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let fetched: Vec<_> = guarded(shutdown, timeout, "UID FETCH", async {
        session
            .uid_fetch(set, "(UID INTERNALDATE)")
            .await?
            .try_collect::<Vec<_>>()
            .await
    })
    .await?
    .map_err(imap("UID FETCH"))?;
    Ok(fetched
        .iter()
        .filter(|f| f.internal_date().is_some_and(|at| at >= date))
        .filter_map(|f| f.uid)
        .collect())
}
