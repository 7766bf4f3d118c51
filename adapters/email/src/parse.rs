//! The pure half of the adapter: one raw RFC 5322 message in, one [`Normalized`] out. No I/O.
//!
//! Decisions a reader of the ledger should know:
//! - Message ids lose their angle brackets (`<abc@x>` → `abc@x`), as mail-parser returns them.
//! - `target_entity_id` is the `ticket_ref` match when configured and found in the subject, else
//!   the thread root: the first `References` id, else the first `In-Reply-To` id, else the
//!   message's own Message-ID, else `<uidvalidity>:<uid>`. A reply thus contends for the same
//!   entity lock as the message that opened its thread.
//! - `delivery_id` is the Message-ID, else `<uidvalidity>:<uid>` (such a message is delivered
//!   again if the mailbox's UIDVALIDITY changes: there is nothing stable to recognise it by).
//! - A message is unparseable ([`ParseError`]) when it is empty, when mail-parser finds no
//!   message, when no well-formed header field can be read (binary noise), or when it has neither a From address nor any
//!   body or attachment. Anything less broken is parsed as far as mail-parser copes and routed;
//!   a multipart without a usable boundary becomes one text body holding its raw parts (their
//!   MIME headers included), which is readable, if not pretty.

use std::sync::LazyLock;

use mail_parser::decoders::html::html_to_text;
use mail_parser::{
    Address, HeaderValue, Message, MessageParser, MessagePart, MimeHeaders, PartType,
};
use regex::Regex;
use serde_json::{Map, Value, json};
use switchyard_core::{Channel, Disposition, Event, Normalized};

use crate::config::EmailSourceConfig;
use crate::error::ParseError;

/// `event_type` of a message that starts a thread.
pub const EVENT_RECEIVED: &str = "email.received";
/// `event_type` of a message that answers another (it has In-Reply-To or References).
pub const EVENT_REPLY: &str = "email.reply";

/// The longest body text kept in the payload, in characters; the raw message keeps the rest.
pub const MAX_TEXT_CHARS: usize = 100_000;

/// Turns one fetched message into the event the daemon routes, or into the reason it is
/// ineligible; `raw_ref` points at the stored original.
pub fn normalize(
    raw: &[u8],
    source: &EmailSourceConfig,
    uidvalidity: u32,
    uid: u32,
    raw_ref: &str,
) -> Result<Normalized, ParseError> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Err(ParseError::Empty);
    }
    let message = MessageParser::default()
        .parse(raw)
        .ok_or(ParseError::NotAMessage)?;
    // Binary noise "parses" too, into header names full of control bytes: require one real
    // field name (RFC 5322: printable ASCII, no colon) before calling it a message.
    if !message.headers().iter().any(|h| is_field_name(h.name())) {
        return Err(ParseError::NoHeaders);
    }

    let from = message.from().and_then(first_address);
    let text = body_text(&message);
    let attachments = attachments(&message);
    if from.as_ref().and_then(|a| a.address.as_ref()).is_none()
        && text.is_empty()
        && attachments.is_empty()
    {
        return Err(ParseError::NoSenderNoBody);
    }

    let imap_id = format!("{uidvalidity}:{uid}");
    let message_id = message
        .message_id()
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(str::to_owned);
    let in_reply_to = message_ids(message.in_reply_to());
    let references = message_ids(message.references());
    let subject = message.subject().map(|s| s.trim().to_owned());

    let ticket = source
        .ticket_ref
        .as_ref()
        .zip(subject.as_deref())
        .and_then(|(pattern, subject)| pattern.find(subject))
        .map(str::to_owned);
    let thread_root = references
        .first()
        .or(in_reply_to.first())
        .or(message_id.as_ref())
        .cloned()
        .unwrap_or_else(|| imap_id.clone());
    let target_entity_id = ticket.clone().unwrap_or_else(|| thread_root.clone());
    let is_reply = !in_reply_to.is_empty() || !references.is_empty();

    let (text, truncated) = truncate(text);
    let mut payload = Map::new();
    payload.insert("from".into(), json!(from));
    payload.insert("to".into(), json!(address_list(message.to())));
    payload.insert("cc".into(), json!(address_list(message.cc())));
    payload.insert("reply_to".into(), json!(address_list(message.reply_to())));
    payload.insert("subject".into(), json!(subject));
    payload.insert("text".into(), json!(text));
    payload.insert("text_truncated".into(), json!(truncated));
    payload.insert("message_id".into(), json!(message_id));
    payload.insert("in_reply_to".into(), json!(in_reply_to));
    payload.insert("references".into(), json!(references));
    payload.insert("thread_root".into(), json!(thread_root));
    payload.insert("ticket_ref".into(), json!(ticket));
    payload.insert("date".into(), json!(date(&message)));
    payload.insert("attachments".into(), Value::Array(attachments));
    payload.insert(
        "imap".into(),
        json!({"mailbox": source.mailbox, "uidvalidity": uidvalidity, "uid": uid}),
    );

    let event = Event {
        channel: Channel::Email,
        event_type: if is_reply {
            EVENT_REPLY
        } else {
            EVENT_RECEIVED
        }
        .to_owned(),
        tenant_id: source.tenant.clone(),
        target_entity_id,
        payload: Value::Object(payload),
        raw_ref: raw_ref.to_owned(),
    };
    let delivery_id = message_id.unwrap_or(imap_id);
    let disposition = match ineligibility(&message, from.as_ref(), source) {
        Some(detail) => Disposition::Ineligible {
            detail,
            event: Some(event),
        },
        None => Disposition::Route(event),
    };
    Ok(Normalized {
        delivery_id,
        disposition,
    })
}

fn is_field_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| (33..=126).contains(&b) && b != b':')
}

/// The rule that excludes this message, if one does: auto-replies and bulk mail (answering
/// them makes mail loops) and the mailbox's own messages (our answers, seen again).
fn ineligibility(
    message: &Message<'_>,
    from: Option<&Person>,
    source: &EmailSourceConfig,
) -> Option<String> {
    if let Some(value) = keyword_header(message, "Auto-Submitted")
        && value != "no"
    {
        return Some(format!("auto_submitted:{value}"));
    }
    if let Some(value) = keyword_header(message, "Precedence")
        && matches!(value.as_str(), "bulk" | "junk" | "list")
    {
        return Some(format!("precedence:{value}"));
    }
    let own = source.own_address()?;
    let sender = from?.address.as_deref()?;
    sender
        .eq_ignore_ascii_case(&own)
        .then(|| "own_address".to_owned())
}

/// A keyword header's value, lower-cased, without parameters (`auto-replied; owner=..`).
fn keyword_header(message: &Message<'_>, name: &str) -> Option<String> {
    let raw = message.header_raw(name)?;
    let value = raw.split(';').next().unwrap_or_default().trim();
    (!value.is_empty()).then(|| value.to_ascii_lowercase())
}

/// An address as the payload shows it.
#[derive(Debug, serde::Serialize)]
struct Person {
    address: Option<String>,
    name: Option<String>,
}

fn person(addr: &mail_parser::Addr<'_>) -> Person {
    Person {
        address: addr
            .address()
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_owned),
        name: addr
            .name()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned),
    }
}

fn first_address(address: &Address<'_>) -> Option<Person> {
    address.first().map(person)
}

/// Every address of a header, groups flattened.
fn address_list(address: Option<&Address<'_>>) -> Vec<Person> {
    address
        .map(|a| a.iter().map(person).collect())
        .unwrap_or_default()
}

/// The ids of a Message-ID-list header (In-Reply-To, References), brackets stripped.
fn message_ids(value: &HeaderValue<'_>) -> Vec<String> {
    let ids: Vec<&str> = match value {
        HeaderValue::Text(id) => vec![id.as_ref()],
        HeaderValue::TextList(ids) => ids.iter().map(|id| id.as_ref()).collect(),
        _ => Vec::new(),
    };
    ids.into_iter()
        .map(|id| id.trim().trim_start_matches('<').trim_end_matches('>'))
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .collect()
}

/// All inline text bodies (HTML ones converted to text) joined, with LF line ends and no
/// trailing blank lines.
fn body_text(message: &Message<'_>) -> String {
    let parts: Vec<String> = message
        .text_bodies()
        .filter_map(|part| match &part.body {
            PartType::Text(text) => Some(text.to_string()),
            PartType::Html(html) => Some(html_text(html)),
            _ => None,
        })
        .map(|text| text.replace("\r\n", "\n").trim_end().to_owned())
        .filter(|text| !text.is_empty())
        .collect();
    if parts.is_empty() {
        // A multipart whose boundary is missing or wrong reaches us as one opaque part; its raw
        // text (sub-part headers included) is still what the customer wrote.
        let unsplit: Vec<String> = message
            .attachments()
            .filter(|part| is_unsplit_multipart(part))
            .map(|part| String::from_utf8_lossy(part.contents()).replace("\r\n", "\n"))
            .map(|text| text.trim().to_owned())
            .filter(|text| !text.is_empty())
            .collect();
        return unsplit.join("\n\n");
    }
    parts.join("\n\n")
}

/// mail-parser keeps a multipart it could not split as a binary part of type `multipart/*`.
fn is_unsplit_multipart(part: &MessagePart<'_>) -> bool {
    part.content_type()
        .is_some_and(|ct| ct.ctype().eq_ignore_ascii_case("multipart"))
}

/// mail-parser's HTML-to-text breaks lines only at `<br>` and `</p>`; break after the other
/// block elements too, or headings and list items run into each other.
fn html_text(html: &str) -> String {
    static BLOCK_END: LazyLock<Option<Regex>> = LazyLock::new(|| {
        Regex::new(r"(?i)</(h[1-6]|div|li|tr|ul|ol|table|blockquote|pre)\s*>").ok()
    });
    let html = match BLOCK_END.as_ref() {
        Some(block_end) => block_end.replace_all(html, "$0<br>"),
        None => html.into(),
    };
    let text = html_to_text(&html);
    // The converter keeps a space after a line break; a line starts with its text.
    text.lines().map(str::trim).collect::<Vec<_>>().join("\n")
}

fn truncate(text: String) -> (String, bool) {
    match text.char_indices().nth(MAX_TEXT_CHARS) {
        Some((cut, _)) => (text[..cut].to_owned(), true),
        None => (text, false),
    }
}

/// Name, content type and decoded size of each attachment; the bytes stay in the raw message.
fn attachments(message: &Message<'_>) -> Vec<Value> {
    message
        .attachments()
        .filter(|part| !is_unsplit_multipart(part))
        .map(|part| {
            let content_type = part.content_type().map(|ct| match ct.subtype() {
                Some(sub) => format!("{}/{}", ct.ctype(), sub).to_ascii_lowercase(),
                None => ct.ctype().to_ascii_lowercase(),
            });
            json!({
                "name": part.attachment_name(),
                "content_type": content_type,
                "size": part.contents().len(),
            })
        })
        .collect()
}

/// The Date header in UTC (RFC 3339), or null when absent or nonsense.
fn date(message: &Message<'_>) -> Option<String> {
    let date = message.date().filter(|d| d.is_valid())?;
    chrono::DateTime::from_timestamp(date.to_timestamp(), 0)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}
