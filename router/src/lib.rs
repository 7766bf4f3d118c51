//! switchyard-router (to be built).
