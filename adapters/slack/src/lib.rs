//! Slack Events API callbacks -> canonical [`Event`](switchyard_core::Event)s: signature
//! verification and normalisation, as pure functions the daemon's HTTP handler calls.
//!
//! # How the daemon uses it
//!
//! 1. [`verify`] the `X-Slack-Request-Timestamp` / `X-Slack-Signature` headers over the raw
//!    body with the secret named by [`SlackSourceConfig::signing_secret_env`] and its clock,
//!    for every request including `url_verification`. Any error is `unauthorized_source` (401)
//!    with [`SlackError::detail`]. [`sign`] produces valid headers for tests.
//! 2. [`normalize`] the body into a [`SlackIntake`]:
//!    - `UrlVerification { challenge }`: answer `200 text/plain` with the challenge.
//!    - `Event(SlackEvent)`: route or record `normalized` (`delivery_id` = Slack's `event_id`).
//!    - `AppRateLimited(..)`: log, record under its `delivery_id`, answer 200.
//!    - `Err(e)`: `e.outcome()` is `unauthorized_source` for a team no tenant claims
//!      ("no tenant claims team T..."), else `invalid_event` with a specific detail
//!      (`not_json`, `missing_field:event_id`, `wrong_type:event.ts`, ...). Slack retries every
//!      non-2xx, so `invalid_event` is recorded and answered 200.
//!
//! # Events (channel `slack`)
//!
//! | Slack | `event_type` | `target_entity_id` |
//! |---|---|---|
//! | `message` (no subtype, `thread_broadcast`, `file_share`, `me_message`) | `message`, or `urgent_message` when flagged | `<channel>:<thread_ts or ts>` |
//! | `app_mention` | `app_mention` | `<channel>:<thread_ts or ts>` |
//! | `message` / `message_changed` | `message_changed` | from `message.thread_ts` / `message.ts` |
//! | `message` / `message_deleted` | `message_deleted` | from `previous_message.thread_ts` / `deleted_ts` |
//!
//! Replies share their thread root's `target_entity_id`, so a thread is one entity lock.
//!
//! **Urgent**: a plain message is `urgent_message` when a configured keyword is in its text
//! (case-insensitive, whole word; `:emoji:` codes anywhere), it is in an `urgent_channels`
//! channel, or its `metadata.event_payload.urgent` is `true`. The payload says which rule fired
//! first, in that order: `urgent_rule` = `keyword:<keyword>` | `channel` | `metadata`. Mentions
//! and edits carry `urgent`/`urgent_rule` in their payload but keep their event type.
//!
//! **Payload** (every key always present, `null` when Slack sent nothing): `team_id`,
//! `event_id`, `channel_id`, `channel_type`, `user_id` and `bot_id` (the message's author),
//! `subtype`, `text`, `ts` (the message's own ts, also for edits and deletions), `thread_ts`,
//! `is_thread_reply`, `files`
//! (`id`, `name`, `title`, `filetype`, `mimetype`), `metadata` (as sent), `urgent`,
//! `urgent_rule`; plus `previous_text` and `edited_ts` for `message_changed` (whose `text` is
//! the new text) and `previous_text` for `message_deleted` (whose `text` is `null`). Content is
//! read from the raw JSON: slack-morphism drops a message's whole content when its metadata
//! holds non-string values.
//!
//! # Ineligible (authenticated, well-formed, excluded by rule; recorded, answered 200)
//!
//! The `detail` names the rule; the event is kept when one can be built.
//! - `bot_message`: posted by a bot or app (`bot_id`, subtype `bot_message`, or Slackbot),
//!   including edits of and deletions of bot posts, unless `ignore_bots = false`. With the
//!   default, a workflow that posts to Slack can never trigger itself.
//! - the subtype's own name (`channel_join`, `channel_leave`, `channel_topic`,
//!   `channel_purpose`, `channel_name`, `tombstone`, `pinned_item`, ...): housekeeping posts.
//! - `unsupported_subtype:<subtype>`: a subtype slack-morphism does not know yet; excluded until
//!   someone decides, rather than routed.
//! - `hidden_message`: a hidden message without subtype (Slack's `message_replied`).
//! - `message_changed_text_unchanged`: an edit whose text did not change (link previews,
//!   metadata updates) when Slack sent the previous message to compare with.
//! - `unsupported_event_type:<type>`: any other event type the app is subscribed to
//!   (reactions, channel events, ...); no event is built for these.
//!
//! # One message, two deliveries
//!
//! An app subscribed to `message.*` and `app_mention` receives a message that mentions it twice,
//! with different `event_id`s, in either order. [`SlackEvent::message_key`] is the same for
//! both (`slack:<channel>:<ts>`). The rule this crate is designed for: the daemon keeps the key
//! as a secondary dedup key per source, and **the first delivery of a message that is `routed`
//! claims it; a later delivery with a claimed key is a `duplicate` of that run**. A delivery
//! that did not route (no trigger for `message`, say) claims nothing, so a tenant whose only
//! workflow triggers on `app_mention` still gets its run whichever copy arrives first, and a
//! message never starts two runs. Edits and deletions have their own keys (`...:edited:<ts>`,
//! `...:deleted`) and are never duplicates of the original message.

mod callback;
mod config;
mod error;
mod fields;
mod grid;
mod interaction;
mod message;
mod signature;
mod urgent;

pub use callback::{AppRateLimited, SlackEvent, SlackIntake, normalize};
pub use config::{DEFAULT_API_BASE_URL, MAX_CONNECTIONS, SlackMode, SlackSourceConfig};
pub use error::SlackError;
pub use interaction::{BlockAction, form_encode, interaction_of, normalize_interaction};
pub use signature::{MAX_CLOCK_SKEW_SECS, sign, verify};
