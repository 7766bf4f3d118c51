//! switchyard-slack (to be built).
