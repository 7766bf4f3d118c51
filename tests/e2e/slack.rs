//! Slack callbacks end to end (being written).
