//! The presets against signatures computed here, independently of the adapter (the `hmac`
//! crate directly, and the `openssl` CLI where it is installed), with stale, tampered,
//! wrong-secret and rotated-secret cases; the mapping as a table of cases; the four provider
//! examples mapped as `examples/all-sources.toml` maps them.

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use switchyard_json_webhook::{
    JsonWebhookSourceConfig, MapError, VerifyConfig, VerifyError, WebFormSourceConfig,
    normalize_form, normalize_json, urlencoded_fields,
};

const NOW: i64 = 1_700_000_000;
const SECRET: &str = "It's a Secret to Everybody";
const OLD_SECRET: &str = "the secret before rotation";

fn hmac256(key: &str, parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).expect("any key");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

fn hmac1(key: &str, body: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<sha1::Sha1>::new_from_slice(key.as_bytes()).expect("any key");
    mac.update(body);
    mac.finalize().into_bytes().to_vec()
}

fn verify_config(toml_text: &str) -> VerifyConfig {
    let config: VerifyConfig = toml::from_str(toml_text).expect("a verify table");
    config.validate().expect("valid");
    config
}

/// Verifies `body` with `headers` under a preset whose secrets are `secrets`.
fn check(
    config: &VerifyConfig,
    secrets: &[&str],
    headers: &[(&str, String)],
    body: &[u8],
) -> Result<(), VerifyError> {
    let verifier = config
        .verifier(secrets.iter().map(|s| (*s).to_owned()).collect())
        .expect("usable secrets");
    let map: HashMap<String, String> = headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .collect();
    let header = |name: &str| map.get(&name.to_ascii_lowercase()).map(String::as_str);
    verifier.verify(&header, body, NOW).map(|_| ())
}

#[test]
fn github_matches_the_documented_test_vector_and_refuses_the_rest() {
    // GitHub's documentation: secret "It's a Secret to Everybody", payload "Hello, World!".
    let config = verify_config(
        r#"preset = "github"
secret_env = "S""#,
    );
    let body = b"Hello, World!";
    let documented = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    assert_eq!(
        format!("sha256={}", hex::encode(hmac256(SECRET, &[body]))),
        documented
    );
    let header = |v: &str| vec![("X-Hub-Signature-256", v.to_owned())];
    assert_eq!(check(&config, &[SECRET], &header(documented), body), Ok(()));
    let tampered = check(&config, &[SECRET], &header(documented), b"Hello, World?");
    assert!(
        matches!(tampered, Err(VerifyError::Mismatch(_))),
        "{tampered:?}"
    );
    let wrong = check(&config, &["another"], &header(documented), body);
    assert!(matches!(wrong, Err(VerifyError::Mismatch(_))), "{wrong:?}");
    // Rotation: the old secret's signature verifies while both are in force.
    let old = format!("sha256={}", hex::encode(hmac256(OLD_SECRET, &[body])));
    assert_eq!(
        check(&config, &[SECRET, OLD_SECRET], &header(&old), body),
        Ok(())
    );
    assert!(check(&config, &[SECRET], &header(&old), body).is_err());
    for bad in [
        "",
        "sha256=",
        "sha1=757107ea",
        "sha256=zz",
        &documented[..20],
    ] {
        assert!(
            check(&config, &[SECRET], &header(bad), body).is_err(),
            "{bad}"
        );
    }
    assert_eq!(
        check(&config, &[SECRET], &[], body),
        Err(VerifyError::MissingHeader("X-Hub-Signature-256".into()))
    );
}

#[test]
fn github_signature_from_the_openssl_cli_verifies() {
    let body = br#"{"action":"opened"}"#;
    let Ok(output) = std::process::Command::new("openssl")
        .args(["dgst", "-sha256", "-hmac", SECRET, "-hex"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            child.stdin.take().expect("stdin").write_all(body)?;
            child.wait_with_output()
        })
    else {
        eprintln!("no openssl CLI here; the hmac crate's vectors stand alone");
        return;
    };
    let text = String::from_utf8(output.stdout).expect("utf-8");
    let hex = text.trim().rsplit(' ').next().expect("a digest");
    let config = verify_config(
        r#"preset = "github"
secret_env = "S""#,
    );
    let header = vec![("X-Hub-Signature-256", format!("sha256={hex}"))];
    assert_eq!(check(&config, &[SECRET], &header, body), Ok(()));
}

#[test]
fn stripe_checks_the_timestamp_every_v1_and_the_tolerance() {
    let config = verify_config(
        r#"preset = "stripe"
secret_envs = ["A", "B"]"#,
    );
    let body = br#"{"id":"evt_1","type":"payment_intent.succeeded"}"#;
    let sign = |secret: &str, t: i64| {
        hex::encode(hmac256(secret, &[t.to_string().as_bytes(), b".", body]))
    };
    let header = |v: String| vec![("Stripe-Signature", v)];
    let fresh = format!("t={NOW},v1={},v0=ignored", sign(SECRET, NOW));
    assert_eq!(
        check(&config, &[SECRET], &header(fresh.clone()), body),
        Ok(())
    );
    // Several v1 during Stripe's rotation: one matching is enough.
    let two = format!(
        "t={NOW},v1={},v1={}",
        sign("rolled", NOW),
        sign(SECRET, NOW)
    );
    assert_eq!(check(&config, &[SECRET], &header(two), body), Ok(()));
    // Our rotation: two secrets in force.
    let old = format!("t={NOW},v1={}", sign(OLD_SECRET, NOW));
    assert_eq!(
        check(&config, &[SECRET, OLD_SECRET], &header(old.clone()), body),
        Ok(())
    );
    assert!(matches!(
        check(&config, &[SECRET], &header(old), body),
        Err(VerifyError::Mismatch(_))
    ));
    // Stale: signed 301 s ago; within 300 s it passes.
    let stale_t = NOW - 301;
    let stale = format!("t={stale_t},v1={}", sign(SECRET, stale_t));
    assert!(matches!(
        check(&config, &[SECRET], &header(stale), body),
        Err(VerifyError::Stale { .. })
    ));
    let edge_t = NOW - 300;
    let edge = format!("t={edge_t},v1={}", sign(SECRET, edge_t));
    assert_eq!(check(&config, &[SECRET], &header(edge), body), Ok(()));
    // The timestamp is signed: moving it breaks the signature.
    let moved = format!("t={},v1={}", NOW - 1, sign(SECRET, NOW));
    assert!(check(&config, &[SECRET], &header(moved), body).is_err());
    assert!(check(&config, &[SECRET], &header(fresh), b"{}").is_err());
    assert!(
        check(
            &config,
            &[SECRET],
            &header(format!("v1={}", sign(SECRET, NOW))),
            body
        )
        .is_err()
    );
}

#[test]
fn shopify_is_base64_of_the_body() {
    let config = verify_config(
        r#"preset = "shopify"
secret_env = "S""#,
    );
    let body = br#"{"id":820982911946154508}"#;
    let good = STANDARD.encode(hmac256(SECRET, &[body]));
    let header = |v: &str| vec![("X-Shopify-Hmac-Sha256", v.to_owned())];
    assert_eq!(check(&config, &[SECRET], &header(&good), body), Ok(()));
    assert!(check(&config, &["wrong"], &header(&good), body).is_err());
    assert!(check(&config, &[SECRET], &header(&good), b"{}").is_err());
    // Hex is not what Shopify sends.
    let hexed = hex::encode(hmac256(SECRET, &[body]));
    assert!(check(&config, &[SECRET], &header(&hexed), body).is_err());
}

#[test]
fn intercom_and_generic_hmac_read_their_header_prefix_and_encoding() {
    let body = br#"{"topic":"conversation.user.created"}"#;
    let intercom = verify_config(
        r#"preset = "intercom"
secret_env = "S""#,
    );
    let sig = format!("sha1={}", hex::encode(hmac1(SECRET, body)));
    assert_eq!(
        check(
            &intercom,
            &[SECRET],
            &[("X-Hub-Signature", sig.clone())],
            body
        ),
        Ok(())
    );
    assert!(check(&intercom, &["wrong"], &[("X-Hub-Signature", sig)], body).is_err());

    let generic = verify_config(
        r#"preset = "hmac_sha256"
secret_env = "S"
header = "X-Signature"
prefix = "v1="
encoding = "base64""#,
    );
    let sig = format!("v1={}", STANDARD.encode(hmac256(SECRET, &[body])));
    assert_eq!(
        check(&generic, &[SECRET], &[("x-signature", sig.clone())], body),
        Ok(())
    );
    assert!(
        check(
            &generic,
            &[SECRET],
            &[("X-Signature", sig[3..].to_owned())],
            body
        )
        .is_err()
    );
    let sha1 = verify_config(
        r#"preset = "hmac_sha1"
secret_env = "S"
header = "X-Sig""#,
    );
    let sig = hex::encode(hmac1(SECRET, body));
    assert_eq!(
        check(&sha1, &[OLD_SECRET, SECRET], &[("X-Sig", sig)], body),
        Ok(())
    );
}

#[test]
fn standard_webhooks_uses_the_signed_id_and_window() {
    let config = verify_config(
        r#"preset = "standard_webhooks"
secret_env = "S""#,
    );
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let key = STANDARD
        .decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        .expect("base64");
    let body = br#"{"test": 2432232314}"#;
    let sign = |id: &str, t: i64| {
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).expect("key");
        mac.update(format!("{id}.{t}.").as_bytes());
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    };
    let headers = |id: &str, t: i64, sig: String| {
        vec![
            ("webhook-id", id.to_owned()),
            ("webhook-timestamp", t.to_string()),
            ("webhook-signature", sig),
        ]
    };
    let verifier = config.verifier(vec![secret.into()]).expect("a whsec key");
    let good = headers(
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        NOW,
        sign("msg_p5jXN8AQM9LWM0D4loKWxJek", NOW),
    );
    let map: HashMap<String, String> = good.iter().map(|(k, v)| ((*k).into(), v.clone())).collect();
    let header = |name: &str| map.get(&name.to_ascii_lowercase()).map(String::as_str);
    let verified = verifier.verify(&header, body, NOW).expect("verifies");
    assert_eq!(
        verified.signed_id.as_deref(),
        Some("msg_p5jXN8AQM9LWM0D4loKWxJek")
    );
    // A new id on a captured request breaks the signature.
    let moved = headers("msg_other", NOW, sign("msg_p5jXN8AQM9LWM0D4loKWxJek", NOW));
    assert!(check(&config, &[secret], &moved, body).is_err());
    let stale = headers("m", NOW - 400, sign("m", NOW - 400));
    assert!(matches!(
        check(&config, &[secret], &stale, body),
        Err(VerifyError::Stale { .. })
    ));
    assert!(config.verifier(vec!["not-whsec".into()]).is_err());
}

#[test]
fn bearer_and_basic_compare_the_whole_credential() {
    let bearer = verify_config(
        r#"preset = "bearer"
secret_envs = ["A", "B"]"#,
    );
    let auth = |v: &str| vec![("Authorization", v.to_owned())];
    assert_eq!(
        check(
            &bearer,
            &["t0ken-new", "t0ken-old"],
            &auth("Bearer t0ken-old"),
            b"{}"
        ),
        Ok(())
    );
    assert!(check(&bearer, &["t0ken-new"], &auth("Bearer t0ken-ne"), b"{}").is_err());
    assert!(check(&bearer, &["t0ken-new"], &auth("t0ken-new"), b"{}").is_err());
    let basic = verify_config(
        r#"preset = "basic"
secret_env = "P"
username = "sender""#,
    );
    let good = format!("Basic {}", STANDARD.encode("sender:pa55"));
    assert_eq!(check(&basic, &["pa55"], &auth(&good), b"{}"), Ok(()));
    let other_user = format!("Basic {}", STANDARD.encode("intruder:pa55"));
    assert!(check(&basic, &["pa55"], &auth(&other_user), b"{}").is_err());
}

#[test]
fn verify_tables_name_what_is_missing_or_misplaced() {
    for (text, expected) in [
        (
            r#"preset = "github""#,
            "needs `secret_env` or `secret_envs`",
        ),
        (
            r#"preset = "hmac_sha256"
secret_env = "S""#,
            "needs `header`",
        ),
        (
            r#"preset = "github"
secret_env = "S"
prefix = "x""#,
            "`prefix` does not apply to preset `github`",
        ),
        (
            r#"preset = "basic"
secret_env = "S""#,
            "needs `username`",
        ),
        (
            r#"preset = "stripe"
secret_env = "S"
tolerance = "0s""#,
            "`tolerance` must be greater than zero",
        ),
    ] {
        let config: VerifyConfig = toml::from_str(text).expect("parses");
        let error = config.validate().expect_err(text).to_string();
        assert!(error.contains(expected), "{text}: {error}");
    }
    assert!(toml::from_str::<VerifyConfig>("preset = \"md5\"\nsecret_env = \"S\"").is_err());
}

fn source(mapping: &str) -> JsonWebhookSourceConfig {
    let text = format!(
        "name = \"s\"\ntenant = \"acme\"\nverify = {{ preset = \"github\", secret_env = \"S\" }}\n{mapping}"
    );
    let config: JsonWebhookSourceConfig = toml::from_str(&text).expect(&text);
    config.validate().expect("valid");
    config
}

/// The mapping as a table: (mapping lines, body, headers, expected event fields or error).
#[test]
fn mapping_cases() {
    let body = json!({
        "action": "opened",
        "issue": {"number": 7, "title": "Broken", "labels": [{"name": "bug"}, {"name": "p1"}], "open": true},
        "repository": {"full_name": "acme/app"},
        "nothing": null,
        "a/b": {"m~n": "escaped"}
    });
    let headers = [("x-github-event", "issues"), ("x-github-delivery", "d-1")];
    type Expect = Result<(&'static str, &'static str, Option<&'static str>, Value), &'static str>;
    let cases: Vec<(&str, &str, Expect)> = vec![
        (
            "pointer, header and template",
            r#"event_type = "github.{header:X-GitHub-Event}.{/action}"
target_entity_id = "{/repository/full_name}#{/issue/number}"
delivery_id = "{header:X-GitHub-Delivery}"
payload = "/issue""#,
            Ok((
                "github.issues.opened",
                "acme/app#7",
                Some("d-1"),
                json!({"number": 7, "title": "Broken", "labels": [{"name": "bug"}, {"name": "p1"}], "open": true}),
            )),
        ),
        (
            "bare pointer, array index, table payload keeping types",
            r#"event_type = "/issue/labels/0/name"
target_entity_id = "/issue/number"
payload = { title = "/issue/title", open = "/issue/open", labels = "/issue/labels", summary = "{/issue/title} ({/issue/labels/1/name})" }"#,
            Ok((
                "bug",
                "7",
                None,
                json!({"title": "Broken", "open": true, "labels": [{"name": "bug"}, {"name": "p1"}], "summary": "Broken (p1)"}),
            )),
        ),
        (
            "literal, escaped pointer, literal braces",
            r#"event_type = "repo.{{x}}"
target_entity_id = "{/a~1b/m~0n}""#,
            Ok(("repo.{x}", "escaped", None, body.clone())),
        ),
        (
            "missing field",
            r#"event_type = "x"
target_entity_id = "{/issue/assignee/login}""#,
            Err(
                "mapping `target_entity_id`: the body has nothing at JSON Pointer `/issue/assignee/login`",
            ),
        ),
        (
            "null is missing",
            r#"event_type = "x"
target_entity_id = "/nothing""#,
            Err("mapping `target_entity_id`: the body has nothing at JSON Pointer `/nothing`"),
        ),
        (
            "array index out of range",
            r#"event_type = "/issue/labels/5/name"
target_entity_id = "x""#,
            Err(
                "mapping `event_type`: the body has nothing at JSON Pointer `/issue/labels/5/name`",
            ),
        ),
        (
            "missing header",
            r#"event_type = "{header:X-Shopify-Topic}"
target_entity_id = "x""#,
            Err("mapping `event_type`: the request has no `X-Shopify-Topic` header"),
        ),
        (
            "wrong type in a string field",
            r#"event_type = "x"
target_entity_id = "/issue""#,
            Err(
                "mapping `target_entity_id`: JSON Pointer `/issue` holds an object, not a string, number or boolean",
            ),
        ),
        (
            "payload pointer to a non-object",
            r#"event_type = "x"
target_entity_id = "x"
payload = "/issue/labels""#,
            Err("mapping `payload`: JSON Pointer `/issue/labels` holds an array, not an object"),
        ),
        (
            "missing payload entry names its key",
            r#"event_type = "x"
target_entity_id = "x"
payload = { who = "/issue/assignee" }"#,
            Err("mapping `payload.who`: the body has nothing at JSON Pointer `/issue/assignee`"),
        ),
    ];
    let raw = serde_json::to_vec(&body).expect("json");
    for (name, mapping, expected) in cases {
        let config = source(mapping);
        let header = |n: &str| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(n))
                .map(|(_, v)| *v)
        };
        let got = normalize_json(&config, &raw, &header, "raw:1");
        match (got, expected) {
            (Ok(mapped), Ok((event_type, entity, delivery, payload))) => {
                assert_eq!(mapped.event.event_type, event_type, "{name}");
                assert_eq!(mapped.event.target_entity_id, entity, "{name}");
                assert_eq!(mapped.delivery_id.as_deref(), delivery, "{name}");
                assert_eq!(mapped.event.payload, payload, "{name}");
                assert_eq!(
                    mapped.event.tenant_id, "acme",
                    "{name}: the source's tenant"
                );
            }
            (Err(error), Err(expected)) => assert_eq!(error.to_string(), expected, "{name}"),
            (got, expected) => panic!("{name}: got {got:?}, expected {expected:?}"),
        }
    }
}

#[test]
fn bad_templates_and_bodies_are_named() {
    for (mapping, expected) in [
        (
            "event_type = \"{/a\"\ntarget_entity_id = \"x\"",
            "never closed",
        ),
        (
            "event_type = \"a}\"\ntarget_entity_id = \"x\"",
            "closes nothing",
        ),
        (
            "event_type = \"{action}\"\ntarget_entity_id = \"x\"",
            "neither a JSON Pointer",
        ),
        ("event_type = \"\"\ntarget_entity_id = \"x\"", "is empty"),
    ] {
        let text = format!(
            "name = \"s\"\ntenant = \"acme\"\nverify = {{ preset = \"github\", secret_env = \"S\" }}\n{mapping}"
        );
        let error = toml::from_str::<JsonWebhookSourceConfig>(&text)
            .expect_err(mapping)
            .to_string();
        assert!(error.contains(expected), "{mapping}: {error}");
    }
    let config = source("event_type = \"x\"\ntarget_entity_id = \"x\"");
    let none = |_: &str| None;
    assert!(matches!(
        normalize_json(&config, b"not json", &none, "raw:1"),
        Err(MapError::NotJson(_))
    ));
    // The whole body as payload must be an object.
    assert!(normalize_json(&config, b"[1,2]", &none, "raw:1").is_err());
}

#[test]
fn the_tenant_is_the_sources_whatever_the_body_says() {
    let config = source("event_type = \"x\"\ntarget_entity_id = \"/tenant_id\"");
    let none = |_: &str| None;
    let mapped =
        normalize_json(&config, br#"{"tenant_id":"globex"}"#, &none, "raw:1").expect("maps");
    assert_eq!(mapped.event.tenant_id, "acme");
}

fn form(extra: &str) -> WebFormSourceConfig {
    let text = format!(
        "name = \"contact\"\ntenant = \"acme\"\nallowed_origins = [\"https://www.example.com\"]\n\
         honeypot = \"website\"\ntarget_entity_id = \"{{/email}}\"\n{extra}"
    );
    let config: WebFormSourceConfig = toml::from_str(&text).expect(&text);
    config.validate().expect("valid");
    config
}

#[test]
fn form_fields_map_flat_and_the_honeypot_is_a_bot() {
    let config = form("");
    let none = |_: &str| None;
    let fields = urlencoded_fields(b"email=ann%40example.com&topic=a&topic=b&website=");
    let switchyard_json_webhook::Submission::Mapped(mapped) =
        normalize_form(&config, fields, &none, "raw:1").expect("maps")
    else {
        panic!("an empty honeypot is a person");
    };
    assert_eq!(mapped.event.event_type, "form.submitted");
    assert_eq!(mapped.event.target_entity_id, "ann@example.com");
    assert_eq!(mapped.event.channel.as_str(), "web_form");
    assert_eq!(
        mapped.event.payload,
        json!({"email": "ann@example.com", "topic": ["a", "b"]})
    );
    let bot = urlencoded_fields(b"email=x%40y.z&website=http%3A%2F%2Fspam");
    let submission = normalize_form(&config, bot, &none, "raw:1").expect("maps");
    assert!(
        matches!(&submission, switchyard_json_webhook::Submission::Bot { detail, mapped: Some(m) }
            if detail.contains("`website`") && m.event.payload.get("website").is_none()),
        "{submission:?}"
    );
    let missing = normalize_form(&config, urlencoded_fields(b"name=ann"), &none, "raw:1");
    assert_eq!(
        missing.expect_err("no email").to_string(),
        "mapping `target_entity_id`: the body has nothing at JSON Pointer `/email`"
    );
}

#[test]
fn form_config_fails_closed() {
    for (text, expected) in [
        (
            "allowed_origins = []\ntarget_entity_id = \"x\"",
            "needs `allowed_origins`",
        ),
        (
            "allowed_origins = [\"https://www.example.com/\"]\ntarget_entity_id = \"x\"",
            "not `scheme://host[:port]`",
        ),
        (
            "allowed_origins = [\"https://a.example\"]\ntarget_entity_id = \"x\"\nredirect = \"/thanks\"",
            "not an absolute http(s) URL",
        ),
    ] {
        let full = format!("name = \"f\"\ntenant = \"acme\"\n{text}");
        let config: WebFormSourceConfig = toml::from_str(&full).expect(&full);
        let error = config.validate().expect_err(text).to_string();
        assert!(error.contains(expected), "{text}: {error}");
    }
}

/// A mapping, a fixture, its headers, and (channel, event type, entity, delivery id).
type ExampleCase = (
    &'static str,
    &'static str,
    Vec<(&'static str, &'static str)>,
    (
        &'static str,
        &'static str,
        &'static str,
        Option<&'static str>,
    ),
);

/// The examples' mappings (as in `examples/all-sources.toml`) on the providers' documented
/// example bodies.
#[test]
fn provider_examples_map() {
    let fixture = |name: &str| {
        std::fs::read(format!(
            "{}/tests/fixtures/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("fixture")
    };
    let cases: Vec<ExampleCase> = vec![
        (
            r#"event_type = "github.{header:X-GitHub-Event}.{/action}"
target_entity_id = "{/repository/full_name}#{/issue/number}"
delivery_id = "{header:X-GitHub-Delivery}"
payload = "/issue""#,
            "github_issues_opened.json",
            vec![
                ("X-GitHub-Event", "issues"),
                ("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
            ],
            (
                "webhook",
                "github.issues.opened",
                "Codertocat/Hello-World#1",
                Some("72d3162e-cc78-11e3-81ab-4c9367dc0958"),
            ),
        ),
        (
            r#"event_type = "stripe.{/type}"
target_entity_id = "{/data/object/customer}"
delivery_id = "{/id}"
payload = { payment_intent = "/data/object/id", amount = "/data/object/amount", currency = "/data/object/currency", status = "/data/object/status" }"#,
            "stripe_payment_intent_succeeded.json",
            vec![],
            (
                "webhook",
                "stripe.payment_intent.succeeded",
                "cus_NffrFeUfNV2Hib",
                Some("evt_3MtwBwLkdIwHu7ix28a3tqPa"),
            ),
        ),
        (
            r#"event_type = "shopify.{header:X-Shopify-Topic}"
target_entity_id = "order:{/id}"
delivery_id = "{header:X-Shopify-Webhook-Id}"
payload = { order = "/name", email = "/email", total_price = "/total_price", line_items = "/line_items" }"#,
            "shopify_orders_create.json",
            vec![
                ("X-Shopify-Topic", "orders/create"),
                (
                    "X-Shopify-Webhook-Id",
                    "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
                ),
            ],
            (
                "webhook",
                "shopify.orders/create",
                "order:820982911946154508",
                Some("b54557e4-bdd9-4b37-8a5f-bf7d70bcd043"),
            ),
        ),
        (
            r#"channel = "chat"
event_type = "intercom.{/topic}"
target_entity_id = "conversation:{/data/item/id}"
delivery_id = "{/id}"
payload = "/data/item""#,
            "intercom_conversation_user_created.json",
            vec![],
            (
                "chat",
                "intercom.conversation.user.created",
                "conversation:147",
                Some("notif_ccd8a4d0-f965-11e3-a367-c779cae3e1b3"),
            ),
        ),
    ];
    for (mapping, file, headers, (channel, event_type, entity, delivery)) in cases {
        let config = source(mapping);
        let header = |n: &str| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(n))
                .map(|(_, v)| *v)
        };
        let mapped = normalize_json(&config, &fixture(file), &header, "raw:1").expect(file);
        assert_eq!(mapped.event.channel.as_str(), channel, "{file}");
        assert_eq!(mapped.event.event_type, event_type, "{file}");
        assert_eq!(mapped.event.target_entity_id, entity, "{file}");
        assert_eq!(mapped.delivery_id.as_deref(), delivery, "{file}");
        insta::assert_json_snapshot!(file, mapped.event.payload);
    }
}

/// What `Verifier::sign` writes, every preset's `verify` accepts (and not under another secret).
#[test]
fn every_preset_verifies_what_sign_writes() {
    let whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    for (table, secret) in [
        (
            "preset = \"github\"\nsecret_env = \"S\"",
            "It's a Secret to Everybody",
        ),
        ("preset = \"stripe\"\nsecret_env = \"S\"", "whsec_stripe"),
        ("preset = \"shopify\"\nsecret_env = \"S\"", "shopify-secret"),
        (
            "preset = \"intercom\"\nsecret_env = \"S\"",
            "intercom-secret",
        ),
        ("preset = \"standard_webhooks\"\nsecret_env = \"S\"", whsec),
        (
            "preset = \"hmac_sha256\"\nsecret_env = \"S\"\nheader = \"X-Sig\"\nprefix = \"v=\"\nencoding = \"base64\"",
            "generic",
        ),
        (
            "preset = \"hmac_sha1\"\nsecret_env = \"S\"\nheader = \"X-Sig\"",
            "generic-1",
        ),
        ("preset = \"bearer\"\nsecret_env = \"S\"", "a-bearer-token"),
        (
            "preset = \"basic\"\nsecret_env = \"S\"\nusername = \"hook\"",
            "a-password",
        ),
    ] {
        let config = verify_config(table);
        let body = br#"{"type":"switchyard_test"}"#;
        let verifier = config.verifier(vec![secret.to_owned()]).expect("usable");
        let signed = verifier.sign(body, "msg_test", NOW);
        assert!(!signed.is_empty(), "{table}");
        let headers: Vec<(&str, String)> = signed
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        check(&config, &[secret], &headers, body).unwrap_or_else(|e| panic!("{table}: {e}"));
        let other = if secret == whsec {
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
        } else {
            "another-secret"
        };
        assert!(check(&config, &[other], &headers, body).is_err(), "{table}");
    }
}
