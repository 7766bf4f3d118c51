//! Lenient readers for Zendesk's field values, which arrive as strings or numbers, in upper,
//! lower or title case, with nanosecond or minute precision, depending on how the webhook is
//! connected.

use chrono::{DateTime, NaiveDateTime, SecondsFormat, Utc};
use serde_json::Value;

/// An id as a string: numbers are printed, strings trimmed; empty, null and other shapes give
/// `None` (an absent assignee renders as an empty placeholder).
pub(crate) fn id(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => non_empty(s),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A text field as given (not trimmed: a comment's whitespace may matter); blank is `None`.
pub(crate) fn text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// An enum-like value in lower case (`OPEN`, `Open` -> `open`). Placeholders that render a
/// dash or nothing for "unset" give `None`.
pub(crate) fn lower(value: Option<&Value>) -> Option<String> {
    let s = non_empty(value?.as_str()?)?;
    (s != "-").then(|| s.to_lowercase())
}

/// A ticket status in lower case. The `{{ticket.status}}` placeholder renders `On-hold` where
/// the API and event payloads say `HOLD`; both become `hold`.
pub(crate) fn status(value: Option<&Value>) -> Option<String> {
    let s = lower(value)?;
    match s.as_str() {
        "on-hold" | "on hold" | "on_hold" => Some("hold".to_owned()),
        _ => Some(s),
    }
}

/// The `{{ticket.ticket_type}}` placeholder renders `Ticket` when no type is set.
pub(crate) fn ticket_type(value: Option<&Value>) -> Option<String> {
    lower(value).filter(|t| t != "ticket")
}

/// A channel name in lower snake case (`Web form` -> `web_form`, `web_service` unchanged).
pub(crate) fn channel(value: Option<&Value>) -> Option<String> {
    let s = lower(value)?;
    Some(
        s.split(|c: char| c.is_whitespace() || c == '-')
            .filter(|part| !part.is_empty())
            .collect::<Vec<_>>()
            .join("_"),
    )
}

/// A boolean from `true`/`false` or their text forms (placeholders render `true`, `false`).
pub(crate) fn boolean(value: Option<&Value>) -> Option<bool> {
    match value? {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// Tags from an array (event payloads) or a space-separated string (the `{{ticket.tags}}`
/// placeholder). Zendesk tags cannot contain spaces, so splitting on whitespace is exact.
pub(crate) fn tags(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|item| id(Some(item)))
            .flat_map(|tag| split_tags(&tag))
            .collect(),
        Some(Value::String(s)) => split_tags(s),
        _ => Vec::new(),
    }
}

fn split_tags(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_owned).collect()
}

/// A time as RFC 3339 UTC (`Z`), keeping sub-second digits when present. Accepts RFC 3339 with
/// any precision, and the placeholders' minute-precision ISO 8601 (`2013-12-12T05:35Z`,
/// `2013-12-12T05:35+0100`). Anything else is `None`; the raw delivery keeps the original.
pub(crate) fn time(value: Option<&Value>) -> Option<String> {
    let s = value?.as_str()?.trim();
    parse_time(s).map(|t| t.to_rfc3339_opts(SecondsFormat::AutoSi, true))
}

fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&Utc));
    }
    for format in ["%Y-%m-%dT%H:%M%#z", "%Y-%m-%dT%H:%M:%S%#z"] {
        if let Ok(t) = DateTime::parse_from_str(s, format) {
            return Some(t.with_timezone(&Utc));
        }
    }
    // chrono's `%#z` does not take a bare `Z`.
    let naive = s.strip_suffix('Z')?;
    ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S%.f"]
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(naive, format).ok())
        .map(|t| t.and_utc())
}

fn non_empty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_accept_strings_and_numbers() {
        assert_eq!(
            id(Some(&json!("8447388090494"))).as_deref(),
            Some("8447388090494")
        );
        assert_eq!(
            id(Some(&json!(8447388090494_u64))).as_deref(),
            Some("8447388090494")
        );
        assert_eq!(id(Some(&json!(""))), None);
        assert_eq!(id(Some(&json!(null))), None);
        assert_eq!(id(Some(&json!({"id": 1}))), None);
        assert_eq!(id(None), None);
    }

    #[test]
    fn enums_are_lower_cased_and_on_hold_is_hold() {
        assert_eq!(status(Some(&json!("OPEN"))).as_deref(), Some("open"));
        assert_eq!(status(Some(&json!("On-hold"))).as_deref(), Some("hold"));
        assert_eq!(status(Some(&json!("HOLD"))).as_deref(), Some("hold"));
        assert_eq!(lower(Some(&json!("-"))), None);
        assert_eq!(ticket_type(Some(&json!("Ticket"))), None);
        assert_eq!(ticket_type(Some(&json!("TASK"))).as_deref(), Some("task"));
        assert_eq!(
            channel(Some(&json!("Web form"))).as_deref(),
            Some("web_form")
        );
        assert_eq!(
            channel(Some(&json!("web_service"))).as_deref(),
            Some("web_service")
        );
    }

    #[test]
    fn tags_come_from_arrays_or_space_separated_text() {
        assert_eq!(tags(Some(&json!(["a", "b"]))), ["a", "b"]);
        assert_eq!(
            tags(Some(&json!(" vip  billing\turgent "))),
            ["vip", "billing", "urgent"]
        );
        assert_eq!(tags(Some(&json!(""))), Vec::<String>::new());
        assert_eq!(tags(None), Vec::<String>::new());
    }

    #[test]
    fn times_keep_precision_and_accept_placeholder_formats() {
        let t = |s: &str| time(Some(&json!(s)));
        assert_eq!(
            t("2025-01-08T10:12:07Z").as_deref(),
            Some("2025-01-08T10:12:07Z")
        );
        assert_eq!(
            t("2025-01-08T10:12:07.672717030Z").as_deref(),
            Some("2025-01-08T10:12:07.672717030Z")
        );
        assert_eq!(
            t("2013-12-12T05:35Z").as_deref(),
            Some("2013-12-12T05:35:00Z")
        );
        assert_eq!(
            t("2013-12-12T05:35+0100").as_deref(),
            Some("2013-12-12T04:35:00Z")
        );
        assert_eq!(
            t("2013-12-12T05:35:10+01:00").as_deref(),
            Some("2013-12-12T04:35:10Z")
        );
        assert_eq!(t("May 18, 2014"), None);
        assert_eq!(time(Some(&json!(1700000000))), None);
    }

    #[test]
    fn booleans_accept_text() {
        assert_eq!(boolean(Some(&json!("true"))), Some(true));
        assert_eq!(boolean(Some(&json!(false))), Some(false));
        assert_eq!(boolean(Some(&json!("yes"))), None);
    }
}
