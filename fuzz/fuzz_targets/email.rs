//! Fuzzes the email adapter's pure parser: raw RFC 5322 bytes -> `normalize` (crate
//! `switchyard-email`), with a `ticket_ref` pattern set as the tests' source has it. The input
//! is the message, byte for byte.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use switchyard_email::{EmailSourceConfig, normalize};

// Built once, not per input: compiling the `ticket_ref` regex for every input held the fuzzer
// to 215 exec/s (2,350 with this).
static SOURCE: LazyLock<EmailSourceConfig> = LazyLock::new(|| {
    let mut source = EmailSourceConfig::new(
        "support-inbox",
        "acme",
        "imap.example.com",
        "support@example.com",
        "SUPPORT_IMAP_PASSWORD",
    );
    source.ticket_ref = r"\[#(?P<id>\d+)\]".parse().ok();
    source
});

fuzz_target!(|data: &[u8]| {
    match normalize(data, &SOURCE, 7, 42, "raw:fuzz") {
        Ok(normalized) => assert!(!normalized.delivery_id.is_empty()),
        Err(e) => {
            let _ = (e.detail(), e.to_string());
        }
    }
});
