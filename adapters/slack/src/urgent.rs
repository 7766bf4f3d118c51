//! Which rule, if any, flags a message as urgent: a keyword, an urgent channel, or metadata.

use serde_json::Value;

use crate::SlackSourceConfig;

/// The first rule that fires, in this order: `keyword:<keyword as configured>` (keywords in
/// config order), `channel`, `metadata`. `None` when the message is not urgent.
pub(crate) fn urgent_rule(
    config: &SlackSourceConfig,
    channel: &str,
    text: Option<&str>,
    metadata: Option<&Value>,
) -> Option<String> {
    if let Some(text) = text {
        let text = text.to_lowercase();
        if let Some(keyword) = config
            .urgent_keywords
            .iter()
            .find(|k| contains_keyword(&text, &k.to_lowercase()))
        {
            return Some(format!("keyword:{keyword}"));
        }
    }
    if config.urgent_channels.iter().any(|c| c == channel) {
        return Some("channel".into());
    }
    if metadata.is_some_and(metadata_says_urgent) {
        return Some("metadata".into());
    }
    None
}

/// `metadata.event_payload.urgent` is `true`. The string `"true"` counts too: senders that
/// went through typed clients (slack-morphism models payload values as strings) send that.
fn metadata_says_urgent(metadata: &Value) -> bool {
    match metadata.pointer("/event_payload/urgent") {
        Some(Value::Bool(flag)) => *flag,
        Some(Value::String(flag)) => flag.eq_ignore_ascii_case("true"),
        _ => false,
    }
}

/// Letters, digits and hyphens continue a word: `urgent` is not in `urgently` or `non-urgent`,
/// but is in `URGENT:`, `*urgent*` and `_urgent_` (Slack's bold and italic marks).
fn continues_word(c: char) -> bool {
    c.is_alphanumeric() || c == '-'
}

/// Whether lowercased `text` holds lowercased `keyword` as a whole word. A boundary is only
/// required on a side where the keyword itself ends in a word character, so an emoji code
/// (`:rotating_light:`) matches even when glued to other emoji or text.
pub(crate) fn contains_keyword(text: &str, keyword: &str) -> bool {
    let Some(first) = keyword.chars().next() else {
        return false;
    };
    let needs_left = continues_word(first);
    let needs_right = keyword.chars().next_back().is_some_and(continues_word);
    let mut from = 0;
    while let Some(offset) = text[from..].find(keyword) {
        let start = from + offset;
        let end = start + keyword.len();
        let left_ok = !needs_left
            || !text[..start]
                .chars()
                .next_back()
                .is_some_and(continues_word);
        let right_ok = !needs_right || !text[end..].chars().next().is_some_and(continues_word);
        if left_ok && right_ok {
            return true;
        }
        // Step past the first character of this match and look again.
        from = start + first.len_utf8();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_match_whole_words_and_emoji_codes() {
        let cases: &[(&str, &str, bool)] = &[
            ("urgent", "urgent", true),
            ("urgent", "this is urgent!", true),
            ("urgent", "urgent: db down", true),
            ("urgent", "*urgent* please", true),
            ("urgent", "_urgent_", true),
            ("urgent", "(urgent)", true),
            ("urgent", "re urgent\nnext line", true),
            ("urgent", "please reply urgently", false),
            ("urgent", "this is non-urgent", false),
            ("urgent", "urgentissimo", false),
            ("urgent", "not urgently, but urgent", true),
            (":rotating_light:", "db down :rotating_light:", true),
            (
                ":rotating_light:",
                "x:rotating_light::rotating_light:y",
                true,
            ),
            (":rotating_light:", "rotating_light", false),
            ("sev 1", "we have a sev 1 now", true),
            ("sev 1", "we have a sev 10", false),
            ("p1", "ép1", false),
            ("p1", "ticket p1.", true),
            ("urgent", "", false),
        ];
        for (keyword, text, expected) in cases {
            assert_eq!(
                contains_keyword(text, keyword),
                *expected,
                "keyword {keyword:?} in {text:?}"
            );
        }
    }

    fn config(keywords: &[&str], channels: &[&str]) -> SlackSourceConfig {
        let mut config: SlackSourceConfig = serde_json::from_value(serde_json::json!({
            "name": "s", "signing_secret_env": "S", "teams": {"T1": "acme"},
        }))
        .expect("a valid config");
        config.urgent_keywords = keywords.iter().map(|k| k.to_string()).collect();
        config.urgent_channels = channels.iter().map(|c| c.to_string()).collect();
        config
    }

    #[test]
    fn rules_fire_in_documented_order() {
        let cfg = config(&["Urgent", ":fire:"], &["C0INC"]);
        let meta = serde_json::json!({"event_type": "x", "event_payload": {"urgent": true}});
        assert_eq!(
            urgent_rule(&cfg, "C0INC", Some("URGENT :fire:"), Some(&meta)).as_deref(),
            Some("keyword:Urgent")
        );
        assert_eq!(
            urgent_rule(&cfg, "C1", Some("it is on :FIRE:"), None).as_deref(),
            Some("keyword::fire:")
        );
        assert_eq!(
            urgent_rule(&cfg, "C0INC", Some("hello"), Some(&meta)).as_deref(),
            Some("channel")
        );
        assert_eq!(
            urgent_rule(&cfg, "C1", None, Some(&meta)).as_deref(),
            Some("metadata")
        );
        let stringly = serde_json::json!({"event_payload": {"urgent": "TRUE"}});
        assert_eq!(
            urgent_rule(&cfg, "C1", None, Some(&stringly)).as_deref(),
            Some("metadata")
        );
        let not = serde_json::json!({"event_payload": {"urgent": false, "count": 3}});
        assert_eq!(urgent_rule(&cfg, "C1", Some("hello"), Some(&not)), None);
    }
}
