//! Placeholder until the Dovecot harness is written.
