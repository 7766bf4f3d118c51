//! Integration tests of switchyard-dispatch: pure parts as tables, transports against a real
//! axum server and the real nats-server.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

mod http;
mod message;
mod nats;
mod schedule;
mod signature;
