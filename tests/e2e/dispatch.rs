//! Dispatch to push targets end to end: signed HTTP workers and NATS JetStream.
