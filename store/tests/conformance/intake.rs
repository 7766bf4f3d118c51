//! Conformance of the intake operations.
