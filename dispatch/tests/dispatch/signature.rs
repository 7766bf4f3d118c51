//! Standard Webhooks signing and verification, starting from the spec's own test vector.

use switchyard_dispatch::SigningKey;
use switchyard_dispatch::signature::{SignatureError, sign, verify};

const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
const TS: i64 = 1649367553;
const BODY: &[u8] = br#"{"email":"test@example.com","username":"test_user"}"#;
const EXPECTED: &str = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";
const TOLERANCE: i64 = 300;

fn key() -> SigningKey {
    SigningKey::parse(SECRET).unwrap()
}

fn check(header: &str, body: &[u8], now: i64) -> Result<(), SignatureError> {
    verify(&key(), ID, &TS.to_string(), header, body, now, TOLERANCE)
}

#[test]
fn spec_vector_signs_and_verifies() {
    assert_eq!(sign(&[key()], ID, TS, BODY), EXPECTED);
    check(EXPECTED, BODY, TS).unwrap();
    // At the edges of the tolerance, both ways.
    check(EXPECTED, BODY, TS + TOLERANCE).unwrap();
    check(EXPECTED, BODY, TS - TOLERANCE).unwrap();
}

#[test]
fn bad_signatures_are_refused() {
    let truncated = &EXPECTED[..EXPECTED.len() - 4];
    // Decodes to 30 bytes: valid base64, too short.
    let short_valid_b64 = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3";
    let wrong_version = EXPECTED.replacen("v1,", "v2,", 1);
    let cases: &[(&str, &str, &[u8])] = &[
        ("empty v1", "v1,", BODY),
        ("empty header", "", BODY),
        ("truncated", truncated, BODY),
        ("short but valid base64", short_valid_b64, BODY),
        (
            "wrong body",
            EXPECTED,
            br#"{"email":"test@example.com","username":"test_user "}"#,
        ),
        ("other version only", &wrong_version, BODY),
        ("empty among others", "v1, v1,AAAA", BODY),
    ];
    for (name, header, body) in cases {
        let result = check(header, body, TS);
        assert!(
            matches!(
                result,
                Err(SignatureError::Mismatch | SignatureError::NoV1Signature)
            ),
            "{name}: {result:?}"
        );
    }
    assert!(matches!(
        check("", BODY, TS),
        Err(SignatureError::NoV1Signature)
    ));
    assert!(matches!(
        check("v1,", BODY, TS),
        Err(SignatureError::Mismatch)
    ));
}

#[test]
fn any_matching_entry_is_accepted() {
    check(&format!("v1,AAAA v2,xyz {EXPECTED}"), BODY, TS).unwrap();
    check(&format!("{EXPECTED} v1,"), BODY, TS).unwrap();
}

#[test]
fn timestamps_outside_tolerance_are_refused() {
    assert!(matches!(
        check(EXPECTED, BODY, TS + TOLERANCE + 1),
        Err(SignatureError::TimestampTooOld { age_secs: 301, .. })
    ));
    assert!(matches!(
        check(EXPECTED, BODY, TS - TOLERANCE - 1),
        Err(SignatureError::TimestampInFuture {
            ahead_secs: 301,
            ..
        })
    ));
    assert!(matches!(
        verify(&key(), ID, "16493x", EXPECTED, BODY, TS, TOLERANCE),
        Err(SignatureError::InvalidTimestamp { .. })
    ));
}

#[test]
fn rotation_sends_one_signature_per_key() {
    let other = SigningKey::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    let header = sign(&[key(), other.clone()], ID, TS, BODY);
    let entries: Vec<&str> = header.split(' ').collect();
    assert_eq!(entries.len(), 2, "{header}");
    assert_eq!(entries[0], EXPECTED);
    assert!(entries[1].starts_with("v1,") && entries[1] != EXPECTED);
    let ts = TS.to_string();
    verify(&key(), ID, &ts, &header, BODY, TS, TOLERANCE).unwrap();
    verify(&other, ID, &ts, &header, BODY, TS, TOLERANCE).unwrap();
    // Each key's entry alone verifies only with that key.
    assert!(verify(&other, ID, &ts, entries[0], BODY, TS, TOLERANCE).is_err());
}

#[test]
fn bad_secrets_are_refused_with_clear_errors() {
    let err = SigningKey::parse("C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap_err();
    assert!(matches!(err, SignatureError::MissingPrefix));
    assert_eq!(err.to_string(), "signing secret must start with `whsec_`");

    // 12 bytes.
    let err = SigningKey::parse("whsec_C2FVsBQIhrscChlQ").unwrap_err();
    assert!(matches!(err, SignatureError::SecretLength(12)), "{err:?}");
    assert!(err.to_string().contains("24 to 64"), "{err}");

    // 65 bytes.
    let long = format!("whsec_{}", base64_of(&[7u8; 65]));
    assert!(matches!(
        SigningKey::parse(&long),
        Err(SignatureError::SecretLength(65))
    ));
    assert!(SigningKey::parse(&format!("whsec_{}", base64_of(&[7u8; 64]))).is_ok());

    let err = SigningKey::parse("whsec_not*base64!").unwrap_err();
    assert!(matches!(err, SignatureError::SecretBase64(_)), "{err:?}");
    assert!(
        std::error::Error::source(&err).is_some(),
        "keeps the decode error"
    );
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
