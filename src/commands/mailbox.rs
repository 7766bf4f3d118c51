//! `switchyard mailbox test`: the email channel's one-shot sign-in check (`edge::mailbox_test`).

pub use crate::edge::mailbox_test;
