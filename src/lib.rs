//! The Switchyard daemon (being built).
