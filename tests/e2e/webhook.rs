//! Zendesk-shaped webhooks end to end (being written).
