//! The inner `event` of an `event_callback` -> a disposition: which Slack events become
//! canonical events, which are ineligible and why, and what each payload holds.
//!
//! Every field is read from the raw JSON, never from slack-morphism's typed events: when a
//! message's `metadata.event_payload` holds a non-string value, slack-morphism still parses the
//! event as a message but drops its whole content (text, files, metadata), and its
//! `SlackAppMentionEvent` then fails to parse at all (falling back to `Unknown`). The tests pin
//! that behaviour with a fixture.

use serde_json::{Map, Value, json};
use slack_morphism::events::SlackMessageEventType;
use switchyard_core::{Channel, Disposition, Event};

use crate::fields::Obj;
use crate::urgent::urgent_rule;
use crate::{SlackError, SlackSourceConfig};

/// Slackbot's user id: its reminders and auto-responses are bot posts too.
const SLACKBOT: &str = "USLACKBOT";

/// What the callback envelope tells about the delivery being normalised.
#[derive(Debug)]
pub(crate) struct Context<'a> {
    pub config: &'a SlackSourceConfig,
    pub tenant_id: &'a str,
    pub team_id: &'a str,
    pub event_id: &'a str,
    pub raw_ref: &'a str,
}

/// How one Slack event is disposed of, and the identity of the message it is about.
#[derive(Debug)]
pub(crate) struct Reading {
    pub disposition: Disposition,
    pub message_key: Option<String>,
}

/// Dispatches on the inner event's `type`.
pub(crate) fn read_event(ctx: &Context<'_>, event: Obj<'_>) -> Result<Reading, SlackError> {
    match event.req_str("type")? {
        "message" => message(ctx, event),
        "app_mention" => app_mention(ctx, event),
        // Subscriptions beyond messages (reactions, channel changes, ...) are not work items
        // yet: record them as ineligible instead of failing the delivery.
        other => Ok(Reading {
            disposition: Disposition::Ineligible {
                detail: format!("unsupported_event_type:{other}"),
                event: None,
            },
            message_key: None,
        }),
    }
}

/// What a `message` subtype means here.
enum Kind {
    /// A person (or, with `ignore_bots = false`, a bot) said something.
    Posted,
    Changed,
    Deleted,
    /// Housekeeping or unknown; the detail names the subtype.
    Excluded(String),
}

/// Classifies with slack-morphism's subtype enum. The match has no wildcard on purpose: when
/// an upgrade teaches slack-morphism a new subtype, this stops compiling until someone decides.
fn classify(subtype: Option<&str>) -> Kind {
    use SlackMessageEventType as T;
    let Some(name) = subtype else {
        return Kind::Posted;
    };
    match serde_json::from_value::<T>(Value::String(name.to_owned())) {
        // Real messages: a file with a comment, a reply also sent to the channel, `/me`. Bot
        // posts are posts; the bot rule decides about them.
        Ok(T::FileShare | T::ThreadBroadcast | T::MeMessage | T::BotMessage) => Kind::Posted,
        Ok(T::MessageChanged) => Kind::Changed,
        Ok(T::MessageDeleted) => Kind::Deleted,
        Ok(
            T::ChannelJoin
            | T::ChannelLeave
            | T::BotAdd
            | T::BotRemove
            | T::ChannelTopic
            | T::ChannelPurpose
            | T::ChannelName
            | T::Tombstone
            | T::JoinerNotification
            | T::SlackbotResponse
            | T::EmojiChanged
            | T::SlackHuddleRoomCreated
            | T::ChannelArchive
            | T::ChannelUnarchive
            | T::AppConversationLeave
            | T::BotEnable
            | T::BotDisable
            | T::PinnedItem
            | T::ReminderAdd
            | T::FileComment
            | T::FileCreated
            | T::FileChanged
            | T::FileDeleted
            | T::FileShared
            | T::FileUnshared
            | T::FilePublic
            | T::HuddleThread
            | T::ShareShortcut
            | T::ChannelCanvasUpdated
            | T::TabbedCanvasUpdated
            | T::ChannelPostingPermissions,
        ) => Kind::Excluded(name.to_owned()),
        // Unknown subtypes are excluded rather than routed: a new kind of system post must not
        // start workflows before someone looks at it.
        Ok(T::Other(_)) | Err(_) => Kind::Excluded(format!("unsupported_subtype:{name}")),
    }
}

/// The fields of one Slack message object (the event itself, or `message` /
/// `previous_message` inside an edit or deletion). Empty strings read as absent.
#[derive(Debug, Default, Clone, Copy)]
struct MessageView<'a> {
    ts: Option<&'a str>,
    thread_ts: Option<&'a str>,
    user: Option<&'a str>,
    bot_id: Option<&'a str>,
    subtype: Option<&'a str>,
    text: Option<&'a str>,
    files: Option<&'a Vec<Value>>,
    metadata: Option<&'a Value>,
    edited_ts: Option<&'a str>,
}

impl<'a> MessageView<'a> {
    fn read(obj: Obj<'a>) -> Result<Self, SlackError> {
        let id = |key| -> Result<Option<&'a str>, SlackError> {
            Ok(obj.opt_str(key)?.filter(|s| !s.is_empty()))
        };
        Ok(MessageView {
            ts: id("ts")?,
            thread_ts: id("thread_ts")?,
            user: id("user")?,
            bot_id: id("bot_id")?,
            subtype: id("subtype")?,
            text: obj.opt_str("text")?,
            files: obj.opt_array("files")?,
            metadata: obj.get("metadata"),
            // Informational only, so read leniently.
            edited_ts: obj
                .get("edited")
                .and_then(|edited| edited.get("ts"))
                .and_then(Value::as_str),
        })
    }

    /// Apps usually post with `bot_id` and no `bot_message` subtype, so `bot_id` is the check
    /// that matters; Slackbot posts as a user.
    fn is_bot(&self) -> bool {
        self.bot_id.is_some() || self.subtype == Some("bot_message") || self.user == Some(SLACKBOT)
    }
}

/// Where the event happened (only the outer event carries it).
#[derive(Debug, Clone, Copy)]
struct Place<'a> {
    channel: Option<&'a str>,
    channel_type: Option<&'a str>,
}

impl<'a> Place<'a> {
    fn read(event: Obj<'a>) -> Result<Self, SlackError> {
        Ok(Place {
            channel: event.opt_str("channel")?.filter(|s| !s.is_empty()),
            channel_type: event.opt_str("channel_type")?,
        })
    }
}

/// Everything needed to build the canonical event for one Slack event.
#[derive(Debug)]
struct Draft<'a> {
    event_type: &'static str,
    place: Place<'a>,
    /// The outer event's subtype, shown in the payload.
    subtype: Option<&'a str>,
    /// The message the event is about.
    view: MessageView<'a>,
    /// The message's own ts, and where it was read, for the error detail when it is missing.
    ts: Option<&'a str>,
    ts_path: &'static str,
    urgent_rule: Option<String>,
    extra: Vec<(&'static str, Value)>,
    /// Appended to `slack:<channel>:<ts>` to name this version of the message.
    key_suffix: String,
}

fn message(ctx: &Context<'_>, event: Obj<'_>) -> Result<Reading, SlackError> {
    let place = Place::read(event)?;
    let top = MessageView::read(event)?;
    match classify(top.subtype) {
        Kind::Excluded(detail) => Ok(ineligible(ctx, detail, &plain_draft("message", place, top))),
        // Hidden messages without a subtype are Slack bookkeeping (e.g. `message_replied`,
        // which the Events API sends without its subtype).
        Kind::Posted if event.flag("hidden") => Ok(ineligible(
            ctx,
            "hidden_message".into(),
            &plain_draft("message", place, top),
        )),
        Kind::Posted => posted(ctx, "message", place, top),
        Kind::Changed => changed(ctx, event, place, top),
        Kind::Deleted => deleted(ctx, event, place),
    }
}

fn app_mention(ctx: &Context<'_>, event: Obj<'_>) -> Result<Reading, SlackError> {
    let place = Place::read(event)?;
    let view = MessageView::read(event)?;
    match classify(view.subtype) {
        Kind::Excluded(detail) => Ok(ineligible(
            ctx,
            detail,
            &plain_draft("app_mention", place, view),
        )),
        _ => posted(ctx, "app_mention", place, view),
    }
}

/// A new message or mention. A plain message that an urgency rule flags is `urgent_message`.
fn posted(
    ctx: &Context<'_>,
    event_type: &'static str,
    place: Place<'_>,
    view: MessageView<'_>,
) -> Result<Reading, SlackError> {
    let rule = urgent_rule(
        ctx.config,
        place.channel.unwrap_or_default(),
        view.text,
        view.metadata,
    );
    let event_type = match (event_type, &rule) {
        ("message", Some(_)) => "urgent_message",
        _ => event_type,
    };
    let draft = Draft {
        urgent_rule: rule,
        key_suffix: edited_suffix(view.edited_ts),
        ..plain_draft(event_type, place, view)
    };
    if view.is_bot() && ctx.config.ignore_bots {
        return Ok(ineligible(ctx, "bot_message".into(), &draft));
    }
    route(ctx, &draft)
}

/// `message_changed`: about the original message (`message.ts`, `message.thread_ts`).
fn changed(
    ctx: &Context<'_>,
    event: Obj<'_>,
    place: Place<'_>,
    top: MessageView<'_>,
) -> Result<Reading, SlackError> {
    let current = MessageView::read(event.req_obj("message", "event.message")?)?;
    let previous = event
        .opt_obj("previous_message", "event.previous_message")?
        .map(MessageView::read)
        .transpose()?;
    let draft = Draft {
        event_type: "message_changed",
        place,
        subtype: top.subtype,
        view: current,
        ts: current.ts,
        ts_path: "event.message.ts",
        urgent_rule: urgent_rule(
            ctx.config,
            place.channel.unwrap_or_default(),
            current.text,
            current.metadata,
        ),
        extra: vec![
            ("previous_text", json!(previous.and_then(|p| p.text))),
            ("edited_ts", json!(current.edited_ts)),
        ],
        // An edit without `edited` (an unfurl, a metadata update) is named by the change's ts.
        key_suffix: edited_suffix(current.edited_ts.or(top.ts)),
    };
    // The edited message's own subtype: a thread root deleted under its replies becomes a
    // `tombstone` through a `message_changed`.
    if let Kind::Excluded(detail) = classify(current.subtype) {
        return Ok(ineligible(ctx, detail, &draft));
    }
    if current.is_bot() && ctx.config.ignore_bots {
        return Ok(ineligible(ctx, "bot_message".into(), &draft));
    }
    // Slack also sends `message_changed` when it adds link previews or metadata: the words
    // did not change, so there is nothing new to act on.
    if previous.is_some_and(|p| p.text == current.text) {
        return Ok(ineligible(
            ctx,
            "message_changed_text_unchanged".into(),
            &draft,
        ));
    }
    route(ctx, &draft)
}

/// `message_deleted`: about the message at `deleted_ts`; `previous_message` (when Slack sends
/// it) gives its thread, author and last text. Deletions are never urgent.
fn deleted(ctx: &Context<'_>, event: Obj<'_>, place: Place<'_>) -> Result<Reading, SlackError> {
    let deleted_ts = event.opt_str("deleted_ts")?.filter(|s| !s.is_empty());
    let previous = event
        .opt_obj("previous_message", "event.previous_message")?
        .map(MessageView::read)
        .transpose()?;
    let old = previous.unwrap_or_default();
    let draft = Draft {
        event_type: "message_deleted",
        place,
        subtype: Some("message_deleted"),
        view: MessageView { text: None, ..old },
        ts: deleted_ts,
        ts_path: "event.deleted_ts",
        urgent_rule: None,
        extra: vec![("previous_text", json!(old.text))],
        key_suffix: ":deleted".into(),
    };
    if previous.is_some_and(|p| p.is_bot()) && ctx.config.ignore_bots {
        return Ok(ineligible(ctx, "bot_message".into(), &draft));
    }
    route(ctx, &draft)
}

fn plain_draft<'a>(event_type: &'static str, place: Place<'a>, view: MessageView<'a>) -> Draft<'a> {
    Draft {
        event_type,
        place,
        subtype: view.subtype,
        view,
        ts: view.ts,
        ts_path: "event.ts",
        urgent_rule: None,
        extra: Vec::new(),
        key_suffix: String::new(),
    }
}

fn edited_suffix(edited_ts: Option<&str>) -> String {
    edited_ts
        .map(|ts| format!(":edited:{ts}"))
        .unwrap_or_default()
}

fn route(ctx: &Context<'_>, draft: &Draft<'_>) -> Result<Reading, SlackError> {
    let (event, key) = build(ctx, draft)?;
    Ok(Reading {
        disposition: Disposition::Route(event),
        message_key: Some(key),
    })
}

/// Ineligible keeps the event when one can be built: Slack's own examples of housekeeping
/// posts often lack a channel, and that must not turn an exclusion into `invalid_event`.
fn ineligible(ctx: &Context<'_>, detail: String, draft: &Draft<'_>) -> Reading {
    let built = build(ctx, draft).ok();
    let (event, message_key) = built.map_or((None, None), |(e, k)| (Some(e), Some(k)));
    Reading {
        disposition: Disposition::Ineligible { detail, event },
        message_key,
    }
}

/// The canonical event and the message key (`slack:<channel>:<ts>[suffix]`).
fn build(ctx: &Context<'_>, draft: &Draft<'_>) -> Result<(Event, String), SlackError> {
    let channel = draft
        .place
        .channel
        .ok_or_else(|| SlackError::invalid("missing_field:event.channel"))?;
    let ts = draft
        .ts
        .ok_or_else(|| SlackError::invalid(format!("missing_field:{}", draft.ts_path)))?;
    let view = &draft.view;
    let mut payload = Map::new();
    for (key, value) in [
        ("team_id", json!(ctx.team_id)),
        ("event_id", json!(ctx.event_id)),
        ("channel_id", json!(channel)),
        ("channel_type", json!(draft.place.channel_type)),
        ("user_id", json!(view.user)),
        ("bot_id", json!(view.bot_id)),
        ("subtype", json!(draft.subtype)),
        ("text", json!(view.text)),
        ("ts", json!(ts)),
        ("thread_ts", json!(view.thread_ts)),
        (
            "is_thread_reply",
            json!(view.thread_ts.is_some_and(|t| t != ts)),
        ),
        ("files", Value::Array(files(view))),
        ("metadata", view.metadata.cloned().unwrap_or(Value::Null)),
        ("urgent", json!(draft.urgent_rule.is_some())),
        ("urgent_rule", json!(draft.urgent_rule)),
    ] {
        payload.insert(key.into(), value);
    }
    for (key, value) in &draft.extra {
        payload.insert((*key).into(), value.clone());
    }
    let event = Event {
        channel: Channel::Slack,
        event_type: draft.event_type.into(),
        tenant_id: ctx.tenant_id.into(),
        // A reply contends for the same lock as its thread root.
        target_entity_id: format!("{channel}:{}", view.thread_ts.unwrap_or(ts)),
        payload: Value::Object(payload),
        raw_ref: ctx.raw_ref.into(),
    };
    Ok((event, format!("slack:{channel}:{ts}{}", draft.key_suffix)))
}

/// What a workflow needs to know about attachments; the file objects themselves are large.
fn files(view: &MessageView<'_>) -> Vec<Value> {
    view.files
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .map(|file| {
            json!({
                "id": file.get("id"),
                "name": file.get("name"),
                "title": file.get("title"),
                "filetype": file.get("filetype"),
                "mimetype": file.get("mimetype"),
            })
        })
        .collect()
}
