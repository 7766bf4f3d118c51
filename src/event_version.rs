//! An event's version: the provider's own time of the event, where its adapter recorded one.
//! Intake stores it with each delivery that joins a coalesced run; the dispatcher sends the
//! newest member's event.
//!
//! Invariant: versions order as text exactly as the times they stand for.

/// The provider's own time of an event, where the adapter recorded one (a Zendesk event's
/// `occurred_at`, a CloudEvent's `time`, else a ticket's `updated_at`), as fixed-width UTC
/// with nanoseconds so versions order as text.
pub fn version_of(payload: &serde_json::Value) -> Option<String> {
    let text = ["occurred_at", "time", "updated_at"]
        .iter()
        .find_map(|key| payload.get(key)?.as_str())?;
    let time = chrono::DateTime::parse_from_rfc3339(text).ok()?;
    Some(
        time.with_timezone(&chrono::Utc)
            .format("%Y-%m-%dT%H:%M:%S%.9fZ")
            .to_string(),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::version_of;

    #[test]
    fn provider_times_order_as_text_whatever_their_precision_or_zone() {
        let times = [
            "2026-01-05T10:01:00Z",
            "2026-01-05T10:01:00.5Z",
            "2026-01-05T11:01:00.6+01:00",
            "2026-01-05T10:05:00.672717030Z",
        ];
        let versions: Vec<String> = times
            .iter()
            .map(|t| version_of(&json!({ "updated_at": t })).expect("a time"))
            .collect();
        let mut sorted = versions.clone();
        sorted.sort();
        assert_eq!(versions, sorted, "chronological order is text order");
        assert_eq!(versions[3], "2026-01-05T10:05:00.672717030Z");
        // Zendesk's event time outranks the ticket's; no time, no version.
        let both =
            json!({"occurred_at": "2026-01-05T10:00:00Z", "updated_at": "2027-01-01T00:00:00Z"});
        assert_eq!(
            version_of(&both).as_deref(),
            Some("2026-01-05T10:00:00.000000000Z")
        );
        assert_eq!(version_of(&json!({"updated_at": "yesterday"})), None);
        assert_eq!(version_of(&json!({})), None);
    }
}
