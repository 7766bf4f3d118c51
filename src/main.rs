//! The `switchyard` command line.

fn main() {}
