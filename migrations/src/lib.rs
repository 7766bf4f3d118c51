//! switchyard-migrations (to be built).
