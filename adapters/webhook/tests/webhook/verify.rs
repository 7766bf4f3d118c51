//! verify() and sign() on real fixture bodies, the way the daemon calls them.

use chrono::{DateTime, Utc};
use switchyard_core::Outcome;
use switchyard_webhook::{SIGNATURE_HEADER, TIMESTAMP_HEADER, sign, verify};

use super::fixture;

const SECRET: &[u8] = b"s3cret-from-the-env";
const TIMESTAMP: &str = "2025-01-08T10:12:08Z";

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2025-01-08T10:13:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

#[test]
fn a_body_signed_with_sign_verifies_and_any_other_body_does_not() {
    let body = fixture("ticket_created.json");
    let signature = sign(SECRET, TIMESTAMP, &body);
    let headers = [
        (SIGNATURE_HEADER, signature.as_str()),
        (TIMESTAMP_HEADER, TIMESTAMP),
    ];
    let tolerance = std::time::Duration::from_secs(300);

    verify(headers.as_slice(), &body, SECRET, tolerance, now()).unwrap();

    // Reformatting the JSON keeps its meaning but not its bytes: the MAC is over raw bytes.
    let reformatted =
        serde_json::to_vec_pretty(&serde_json::from_slice::<serde_json::Value>(&body).unwrap())
            .unwrap();
    let err = verify(headers.as_slice(), &reformatted, SECRET, tolerance, now()).unwrap_err();
    assert_eq!(err.detail(), "bad_signature");
    assert_eq!(err.outcome(), Outcome::UnauthorizedSource);
}

#[test]
fn header_lookups_can_be_a_closure_over_any_map() {
    let body = fixture("comment_added.json");
    let signature = sign(SECRET, TIMESTAMP, &body);
    let map: std::collections::HashMap<String, String> = [
        (SIGNATURE_HEADER.to_ascii_lowercase(), signature),
        (TIMESTAMP_HEADER.to_ascii_lowercase(), TIMESTAMP.to_owned()),
    ]
    .into();
    let lookup = |name: &str| map.get(&name.to_ascii_lowercase()).map(String::as_str);
    let tolerance = std::time::Duration::from_secs(300);
    verify(lookup, &body, SECRET, tolerance, now()).unwrap();
}
