//! The email adapter's tests: the parser against fixture files, the poller against a real
//! Dovecot (started by `.ci/dovecot.sh`, found through `SWITCHYARD_TEST_IMAP`).

#![allow(clippy::unwrap_used)] // tests may unwrap (common.md)

#[path = "email/parse.rs"]
mod parse;

#[path = "email/harness.rs"]
mod harness;

#[path = "email/poller.rs"]
mod poller;
