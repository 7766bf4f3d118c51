//! `verify` and `sign` against Slack's documented test vector, tampering and the replay window.

use chrono::{DateTime, Utc};
use switchyard_core::Outcome;
use switchyard_slack::{SlackError, sign, verify};

// From Slack's "Verifying requests from Slack" documentation (also in its Python SDK's tests).
const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const TIMESTAMP: &str = "1531420618";
const TS: i64 = 1_531_420_618;
const BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
const SIGNATURE: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(secs, 0).unwrap()
}

fn check(ts: Option<&str>, sig: Option<&str>, body: &str, now: i64) -> Result<(), String> {
    verify(ts, sig, body.as_bytes(), SECRET, at(now)).map_err(|e| {
        assert_eq!(e.outcome(), Some(Outcome::UnauthorizedSource), "{e}");
        e.detail()
    })
}

#[test]
fn slacks_documented_vector_verifies_with_an_injected_clock() {
    assert_eq!(sign(SECRET, TS, BODY.as_bytes()), SIGNATURE);
    assert_eq!(check(Some(TIMESTAMP), Some(SIGNATURE), BODY, TS), Ok(()));
    // Hex case does not matter: the bytes are compared, not the text.
    let upper = format!("v0={}", SIGNATURE[3..].to_uppercase());
    assert_eq!(check(Some(TIMESTAMP), Some(&upper), BODY, TS), Ok(()));
}

#[test]
fn tampering_with_body_timestamp_or_signature_is_a_bad_signature() {
    let bad = Err("bad_signature".to_string());
    // One byte of the body.
    let body = BODY.replace("roadrunner", "roadrunnez");
    assert_eq!(check(Some(TIMESTAMP), Some(SIGNATURE), &body, TS), bad);
    // A trailing newline is a different body.
    assert_eq!(
        check(Some(TIMESTAMP), Some(SIGNATURE), &format!("{BODY}\n"), TS),
        bad
    );
    // The timestamp is signed too: moving it by a second breaks the MAC.
    assert_eq!(check(Some("1531420619"), Some(SIGNATURE), BODY, TS), bad);
    // The same number written differently is different signed text.
    assert_eq!(check(Some("01531420618"), Some(SIGNATURE), BODY, TS), bad);
    // One hex digit of the signature.
    let flipped = SIGNATURE.replace("b503", "b504");
    assert_eq!(check(Some(TIMESTAMP), Some(&flipped), BODY, TS), bad);
    // Wrong version, no version, not hex, truncated, empty.
    for sig in [
        &SIGNATURE.replace("v0=", "v1="),
        &SIGNATURE[3..],
        "v0=zz14d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
        &SIGNATURE[..40],
        "",
    ] {
        assert_eq!(check(Some(TIMESTAMP), Some(sig), BODY, TS), bad, "{sig}");
    }
    // Another secret.
    let other = sign("another-secret", TS, BODY.as_bytes());
    assert_eq!(check(Some(TIMESTAMP), Some(&other), BODY, TS), bad);
}

#[test]
fn timestamps_are_accepted_up_to_300_seconds_either_way() {
    let stale = Err("stale_timestamp".to_string());
    for now in [TS - 300, TS - 1, TS, TS + 1, TS + 300] {
        assert_eq!(
            check(Some(TIMESTAMP), Some(SIGNATURE), BODY, now),
            Ok(()),
            "now={now}"
        );
    }
    // Request older than 300 s (a replay), or from the future beyond it.
    assert_eq!(
        check(Some(TIMESTAMP), Some(SIGNATURE), BODY, TS + 301),
        stale
    );
    assert_eq!(
        check(Some(TIMESTAMP), Some(SIGNATURE), BODY, TS - 301),
        stale
    );
    // Today's clock against the 2018 vector.
    assert_eq!(
        check(
            Some(TIMESTAMP),
            Some(SIGNATURE),
            BODY,
            Utc::now().timestamp()
        ),
        stale
    );
    // A fresh signature at "now" verifies with the real clock too.
    let now = Utc::now().timestamp();
    let sig = sign(SECRET, now, BODY.as_bytes());
    assert_eq!(check(Some(&now.to_string()), Some(&sig), BODY, now), Ok(()));
}

#[test]
fn missing_and_malformed_headers_have_their_own_details() {
    assert_eq!(
        check(None, Some(SIGNATURE), BODY, TS),
        Err("missing_timestamp".into())
    );
    for ts in [
        "",
        "abc",
        "-5",
        "+1531420618",
        "1531420618.5",
        " 1531420618",
        "99999999999999999999",
    ] {
        assert_eq!(
            check(Some(ts), Some(SIGNATURE), BODY, TS),
            Err("malformed_timestamp".into()),
            "{ts:?}"
        );
    }
    assert_eq!(
        check(Some(TIMESTAMP), None, BODY, TS),
        Err("missing_signature".into())
    );
    // The timestamp is looked at first.
    assert_eq!(check(None, None, BODY, TS), Err("missing_timestamp".into()));
    assert_eq!(
        check(Some("x"), None, BODY, TS),
        Err("malformed_timestamp".into())
    );
}

#[test]
fn an_empty_secret_verifies_nothing() {
    let sig = sign("", TS, BODY.as_bytes());
    let err = verify(Some(TIMESTAMP), Some(&sig), BODY.as_bytes(), "", at(TS)).unwrap_err();
    assert!(matches!(err, SlackError::EmptySecret), "{err:?}");
    assert_eq!(err.detail(), "empty_signing_secret");
    assert_eq!(err.outcome(), Some(Outcome::UnauthorizedSource));
}

#[test]
fn stale_error_says_how_far_off_the_clock_was() {
    let err = verify(
        Some(TIMESTAMP),
        Some(SIGNATURE),
        BODY.as_bytes(),
        SECRET,
        at(TS + 301),
    )
    .unwrap_err();
    assert!(matches!(err, SlackError::StaleTimestamp { timestamp: TS, now } if now == TS + 301));
    assert!(err.to_string().contains("300 s"), "{err}");
}
