//! Conformance of the outbox operations.
