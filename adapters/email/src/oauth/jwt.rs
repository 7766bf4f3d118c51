//! RS256 JSON Web Tokens, the assertions of the service-account flow (RFC 7523) and of a
//! Microsoft certificate credential. Invariant: the private key never leaves this module's
//! signer, and a key that is not an RSA PKCS#8 key is refused when the config is resolved.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject;
use serde_json::Value;

/// Signs JWTs with one RSA key.
pub(crate) struct RsaSigner(RsaKeyPair);

impl RsaSigner {
    /// The key of a PEM `PRIVATE KEY` (PKCS#8) block; a description of what is wrong otherwise.
    pub(crate) fn from_pem(pem: &str) -> Result<Self, String> {
        let key = PrivateKeyDer::from_pem_slice(pem.as_bytes())
            .map_err(|_| "no PEM private key".to_owned())?;
        let PrivateKeyDer::Pkcs8(der) = key else {
            return Err("the private key must be PKCS#8 (`BEGIN PRIVATE KEY`)".into());
        };
        RsaKeyPair::from_pkcs8(der.secret_pkcs8_der())
            .map(RsaSigner)
            .map_err(|e| format!("not a usable RSA key ({e})"))
    }

    /// `header.claims.signature`, each base64url; `alg` is set to RS256 here.
    pub(crate) fn sign(&self, mut header: Value, claims: &Value) -> Result<String, String> {
        header["alg"] = "RS256".into();
        header["typ"] = "JWT".into();
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let mut signature = vec![0; self.0.public().modulus_len()];
        self.0
            .sign(
                &RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                input.as_bytes(),
                &mut signature,
            )
            .map_err(|_| "RSA signing failed".to_owned())?;
        Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature)))
    }
}

/// SHA-1 of a certificate's DER: Microsoft's `x5t` names the certificate by it.
pub(crate) fn sha1_thumbprint(der: &[u8]) -> [u8; 20] {
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, der);
    let mut out = [0; 20];
    out.copy_from_slice(digest.as_ref());
    out
}

/// base64url without padding, as JWT headers carry `x5t`.
pub(crate) fn base64url(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}
