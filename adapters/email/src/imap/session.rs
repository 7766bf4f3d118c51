//! One connected IMAP session of the poller: select, search, fetch, deliver, after-intake, wait.

use std::collections::HashMap;
use std::time::Duration;

use async_imap::extensions::idle::IdleResponse;
use futures::TryStreamExt;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::transport::{self, ImapSession};
use super::{Poller, SessionEnd, guarded, shutdown_signalled, sleep_or_shutdown};
use crate::config::AfterIntake;
use crate::error::SessionError;
use crate::parse::normalize;
use crate::sink::{FetchedMessage, MailboxSink};

/// What SELECT told about the mailbox.
#[derive(Debug, Clone, Copy)]
pub(super) struct Selected {
    pub uidvalidity: u32,
    pub uid_next: Option<u32>,
    pub exists: u32,
}

/// What the server can do, read once per session.
#[derive(Debug, Clone, Copy)]
struct Features {
    idle: bool,
    moves: bool,
    uidplus: bool,
}

/// Wraps an async-imap error with the command that failed.
fn imap(command: &'static str) -> impl FnOnce(async_imap::error::Error) -> SessionError {
    move |source| SessionError::Imap { command, source }
}

impl<S: MailboxSink> Poller<S> {
    /// Connects and serves until the lease is lost (`Ok`) or something fails (`Err`, including
    /// [`SessionError::Shutdown`]).
    pub(super) async fn session(&mut self) -> Result<SessionEnd, SessionError> {
        let session = self.sign_in().await?;
        self.serve(session).await
    }

    async fn serve(&mut self, mut session: ImapSession) -> Result<SessionEnd, SessionError> {
        let timeout = self.options.io_timeout;
        let capabilities = guarded(
            &mut self.shutdown,
            timeout,
            "CAPABILITY",
            session.capabilities(),
        )
        .await?
        .map_err(imap("CAPABILITY"))?;
        let features = Features {
            idle: self.config.idle && capabilities.has_str("IDLE"),
            moves: self.options.use_move && capabilities.has_str("MOVE"),
            uidplus: capabilities.has_str("UIDPLUS"),
        };
        if let AfterIntake::Move(folder) = &self.config.after_intake {
            // Make sure the target exists; NO ("already exists") is the usual, fine answer.
            let created = guarded(
                &mut self.shutdown,
                timeout,
                "CREATE",
                session.create(folder),
            )
            .await?;
            if let Err(error) = created {
                debug!(source = %self.config.name, folder, %error, "CREATE of the move target");
            }
        }
        let mut next_poll = Instant::now();
        let mut last_renewal = Instant::now();
        let mut known_validity = None;
        loop {
            if Instant::now() >= last_renewal + self.options.lease_renew_interval {
                if !self.renew_lease().await? {
                    return Ok(self.leave(session, SessionEnd::LeaseLost).await);
                }
                last_renewal = Instant::now();
            }
            if self.token_renew_at.is_some_and(|at| Instant::now() >= at) {
                return Ok(self.leave(session, SessionEnd::TokenRenewal).await);
            }
            if features.idle || Instant::now() >= next_poll {
                // SELECT on every cycle, not once per session: a mailbox deleted and recreated
                // under a live session (new UIDVALIDITY) is otherwise never noticed, because
                // the server may keep the old one open without a word.
                let selected = self.select(&mut session).await?;
                let uidvalidity = selected.uidvalidity;
                match known_validity {
                    None => {
                        self.status.connected = true;
                        self.status.idle = features.idle;
                        info!(source = %self.config.name, mailbox = %self.config.mailbox,
                            uidvalidity, idle = features.idle, "connected to the mailbox");
                    }
                    Some(known) if known != uidvalidity => {
                        info!(source = %self.config.name, uidvalidity, "the mailbox was recreated");
                    }
                    Some(_) => {}
                }
                known_validity = Some(uidvalidity);
                let lease_held = self
                    .poll(&mut session, selected, features, &mut last_renewal)
                    .await?;
                if !lease_held {
                    return Ok(self.leave(session, SessionEnd::LeaseLost).await);
                }
                next_poll = Instant::now() + self.config.poll_interval;
                self.succeeded();
            }
            // Nobody reads unsolicited responses (EXISTS, EXPUNGE, FETCH flags): the next
            // search sees the mailbox as it is. Drain them so the channel stays small.
            while session.unsolicited_responses.try_recv().is_ok() {}

            let mut renew_at = last_renewal + self.options.lease_renew_interval;
            if let Some(token_renewal) = self.token_renew_at {
                renew_at = renew_at.min(token_renewal);
            }
            if features.idle {
                session = self.idle(session, renew_at).await?;
            } else {
                let wait = next_poll
                    .min(renew_at)
                    .saturating_duration_since(Instant::now());
                sleep_or_shutdown(&mut self.shutdown, wait).await?;
            }
        }
    }

    /// Selects the mailbox: its UIDVALIDITY, UIDNEXT and message count.
    async fn select(&mut self, session: &mut ImapSession) -> Result<Selected, SessionError> {
        let mailbox = guarded(
            &mut self.shutdown,
            self.options.io_timeout,
            "SELECT",
            session.select(&self.config.mailbox),
        )
        .await?
        .map_err(imap("SELECT"))?;
        let uidvalidity = mailbox
            .uid_validity
            .ok_or_else(|| SessionError::NoUidValidity(self.config.mailbox.clone()))?;
        Ok(Selected {
            uidvalidity,
            uid_next: mailbox.uid_next,
            exists: mailbox.exists,
        })
    }

    /// Logs out (after losing the lease, so that the new holder is the only reader; or to
    /// sign in with a new token).
    async fn leave(&mut self, mut session: ImapSession, end: SessionEnd) -> SessionEnd {
        let _ = transport::bounded(Duration::from_secs(5), "LOGOUT", session.logout()).await;
        end
    }

    /// Renews the lease; false when another replica has taken it.
    async fn renew_lease(&mut self) -> Result<bool, SessionError> {
        let held = guarded(
            &mut self.shutdown,
            self.options.io_timeout,
            "acquire_lease",
            self.sink.acquire_lease(&self.config.name),
        )
        .await??;
        self.status.holds_lease = held;
        Ok(held)
    }

    /// Delivers everything after the cursor; false when the lease was lost on the way.
    async fn poll(
        &mut self,
        session: &mut ImapSession,
        selected: Selected,
        features: Features,
        last_renewal: &mut Instant,
    ) -> Result<bool, SessionError> {
        let uidvalidity = selected.uidvalidity;
        let timeout = self.options.io_timeout;
        let (source, mailbox) = (self.config.name.clone(), self.config.mailbox.clone());
        let cursor = guarded(
            &mut self.shutdown,
            timeout,
            "cursor",
            self.sink.cursor(&source, &mailbox),
        )
        .await??;
        let first = match cursor {
            Some(c) if c.uidvalidity == uidvalidity => match c.last_uid.checked_add(1) {
                Some(next) => next,
                None => return Ok(true),
            },
            Some(c) => {
                // The old UIDs mean nothing now. Rescan; Message-ID dedup in the sink keeps
                // already recorded messages from becoming new work.
                warn!(
                    source,
                    mailbox,
                    old = c.uidvalidity,
                    new = uidvalidity,
                    "UIDVALIDITY changed; rescanning the whole mailbox"
                );
                1
            }
            None => match self.start(session, selected).await? {
                Some(first) => first,
                // Another replica started it just now: read its cursor next time.
                None => return Ok(true),
            },
        };
        if !self.start_known {
            self.status.started = guarded(
                &mut self.shutdown,
                timeout,
                "mailbox_start",
                self.sink.mailbox_start(&source, &mailbox),
            )
            .await??;
            self.start_known = true;
        }
        let found = guarded(
            &mut self.shutdown,
            timeout,
            "UID SEARCH",
            session.uid_search(format!("UID {first}:*")),
        )
        .await?
        .map_err(imap("UID SEARCH"))?;
        // `n:*` always matches the highest UID, even below n; the answer is a set.
        let mut uids: Vec<u32> = found.into_iter().filter(|uid| *uid >= first).collect();
        if let Some(filter) = &self.start_filter {
            uids.retain(|uid| filter.takes(uidvalidity, *uid));
        }
        uids.sort_unstable();
        if !uids.is_empty() {
            debug!(
                source,
                mailbox,
                count = uids.len(),
                first = uids[0],
                "new messages"
            );
        }

        for batch in uids.chunks(self.options.fetch_batch.max(1)) {
            if Instant::now() >= *last_renewal + self.options.lease_renew_interval {
                if !self.renew_lease().await? {
                    return Ok(false);
                }
                *last_renewal = Instant::now();
            }
            let mut bodies = guarded(
                &mut self.shutdown,
                timeout,
                "UID FETCH",
                fetch(session, batch),
            )
            .await??;
            let mut delivered = Vec::with_capacity(batch.len());
            let mut outcome = Ok(());
            for &uid in batch {
                if super::is_shut_down(&self.shutdown) {
                    outcome = Err(SessionError::Shutdown);
                    break;
                }
                let Some(raw) = bodies.remove(&uid) else {
                    // Expunged between SEARCH and FETCH: nothing to deliver.
                    debug!(
                        source,
                        mailbox, uid, "message vanished before it was fetched"
                    );
                    continue;
                };
                let raw_ref = self.sink.new_raw_ref();
                let normalized = normalize(&raw, &self.config, uidvalidity, uid, &raw_ref);
                match &normalized {
                    Ok(n) => debug!(source, uid, delivery_id = %n.delivery_id, "delivering"),
                    Err(error) => {
                        warn!(source, mailbox, uid, %error, "unparseable message; recording it as invalid")
                    }
                }
                let message = FetchedMessage {
                    uidvalidity,
                    uid,
                    raw,
                    raw_ref,
                    normalized,
                };
                if let Err(error) = self.sink.deliver(&source, &mailbox, message).await {
                    outcome = Err(error.into());
                    break;
                }
                delivered.push(uid);
            }
            // Only what the daemon has recorded is marked or moved.
            self.after_intake(session, &delivered, features).await?;
            outcome?;
        }
        self.finish_start(uidvalidity).await?;
        Ok(true)
    }

    /// Applies `after_intake` to delivered messages. A failure here leaves them where they
    /// are (their cursor has moved on, so they are not delivered again).
    async fn after_intake(
        &mut self,
        session: &mut ImapSession,
        uids: &[u32],
        features: Features,
    ) -> Result<(), SessionError> {
        if uids.is_empty() || self.config.after_intake == AfterIntake::None {
            return Ok(());
        }
        let set = uid_set(uids);
        let action = after_intake(session, &self.config.after_intake, &set, features);
        // Not abandoned on shutdown: these messages are recorded and behind the cursor, so this
        // is the only chance to mark or move them.
        transport::bounded(self.options.io_timeout, "after_intake", action).await?
    }

    /// IDLE until the server reports a change, `renew_at` or `idle_timeout` comes, then DONE.
    async fn idle(
        &mut self,
        session: ImapSession,
        renew_at: Instant,
    ) -> Result<ImapSession, SessionError> {
        let timeout = self.options.io_timeout;
        let mut handle = session.idle();
        guarded(&mut self.shutdown, timeout, "IDLE", handle.init())
            .await?
            .map_err(imap("IDLE"))?;
        let wait = self
            .options
            .idle_timeout
            .min(renew_at.saturating_duration_since(Instant::now()));
        {
            let (idle, _interrupt) = handle.wait_with_timeout(wait);
            // async-imap restarts its timeout on every keepalive (`* OK Still here`), so bound
            // the whole wait here.
            let woke = tokio::select! {
                biased;
                _ = shutdown_signalled(&mut self.shutdown) => return Err(SessionError::Shutdown),
                woke = tokio::time::timeout(wait, idle) => woke,
            };
            match woke {
                Ok(Ok(IdleResponse::NewData(data))) => {
                    debug!(source = %self.config.name, response = ?data.parsed(), "IDLE woke up")
                }
                Ok(Ok(IdleResponse::Timeout | IdleResponse::ManualInterrupt)) | Err(_) => {}
                Ok(Err(error)) => return Err(imap("IDLE")(error)),
            }
        }
        guarded(&mut self.shutdown, timeout, "DONE", handle.done())
            .await?
            .map_err(imap("DONE"))
    }
}

/// `UID FETCH` of one batch, collected by UID.
async fn fetch(
    session: &mut ImapSession,
    batch: &[u32],
) -> Result<HashMap<u32, Vec<u8>>, SessionError> {
    let fetches: Vec<_> = session
        .uid_fetch(uid_set(batch), "(UID BODY.PEEK[])")
        .await
        .map_err(imap("UID FETCH"))?
        .try_collect()
        .await
        .map_err(imap("UID FETCH"))?;
    Ok(fetches
        .iter()
        .filter_map(|f| Some((f.uid?, f.body()?.to_vec())))
        .collect())
}

async fn after_intake(
    session: &mut ImapSession,
    action: &AfterIntake,
    set: &str,
    features: Features,
) -> Result<(), SessionError> {
    match action {
        AfterIntake::None => {}
        AfterIntake::Seen => store(session, set, "+FLAGS.SILENT (\\Seen)").await?,
        AfterIntake::Move(folder) if features.moves => {
            session
                .uid_mv(set, folder)
                .await
                .map_err(imap("UID MOVE"))?;
        }
        AfterIntake::Move(folder) => {
            session
                .uid_copy(set, folder)
                .await
                .map_err(imap("UID COPY"))?;
            store(session, set, "+FLAGS.SILENT (\\Deleted)").await?;
            // UID EXPUNGE removes only ours; plain EXPUNGE also removes messages someone
            // else marked \Deleted, which is what they asked for anyway.
            if features.uidplus {
                let _: Vec<_> = session
                    .uid_expunge(set)
                    .await
                    .map_err(imap("UID EXPUNGE"))?
                    .try_collect()
                    .await
                    .map_err(imap("UID EXPUNGE"))?;
            } else {
                let _: Vec<_> = session
                    .expunge()
                    .await
                    .map_err(imap("EXPUNGE"))?
                    .try_collect()
                    .await
                    .map_err(imap("EXPUNGE"))?;
            }
        }
    }
    Ok(())
}

async fn store(session: &mut ImapSession, set: &str, flags: &str) -> Result<(), SessionError> {
    let _: Vec<_> = session
        .uid_store(set, flags)
        .await
        .map_err(imap("UID STORE"))?
        .try_collect()
        .await
        .map_err(imap("UID STORE"))?;
    Ok(())
}

/// `1,2,5` for a sorted batch (batches are small, ranges would save little).
fn uid_set(uids: &[u32]) -> String {
    uids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
