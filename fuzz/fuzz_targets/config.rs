//! Fuzzes the daemon's config parser, `switchyard::config::LoadedConfig::parse` (TOML, then
//! every validation), on the input as UTF-8; other inputs are skipped, as the daemon reads
//! the file as text. Parsing does no I/O; on success the derived views are built too.
#![no_main]

use std::path::{Path, PathBuf};

use libfuzzer_sys::fuzz_target;
use switchyard::config::LoadedConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match LoadedConfig::parse(text, Path::new("/fuzz/switchyard.toml"), PathBuf::from("/fuzz")) {
        Ok(loaded) => {
            let _ = (loaded.targets(), loaded.workflows());
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
