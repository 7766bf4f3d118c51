//! switchyard-email (to be built).
