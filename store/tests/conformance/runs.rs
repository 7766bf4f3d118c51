//! Conformance of the runs operations.
