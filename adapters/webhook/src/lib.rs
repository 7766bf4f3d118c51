//! switchyard-webhook (to be built).
