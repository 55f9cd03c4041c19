//! Downstream session ids that every replica sharing a key can verify (field case BR-35).
//!
//! With replicas > 1 and no sticky routing, a client's requests land on replicas that never saw
//! its `initialize`. Each replica keeps its own upstream session (strategy `Shared`), so all a
//! replica needs to serve such a request is proof that the id was issued by a replica of the same
//! McpUpstream, plus the two facts the handshake established: the negotiated protocol revision
//! and which client capabilities were declared (server-to-client requests are only relayed to
//! clients that declared them).
//!
//! Shape: `<claims>.<tag>`, both base64url without padding (visible ASCII, as MCP 2025-06-18
//! "Session Management" requires), where `claims` is the JSON
//! `{"n":"<128 random bits, hex>","v":"<protocol revision>","c":["sampling",...]}` and `tag` is
//! HMAC-SHA-256 over the encoded claims with the key from `sessionKeyEnv`. The random nonce keeps
//! ids unguessable and distinct; the tag makes them unforgeable without the key.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::Sha256;

/// Shortest key accepted, in bytes: a shorter one is a configuration error.
pub const MIN_KEY_BYTES: usize = 16;

/// What a signed id proves about the session it names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Claims {
    /// Random nonce, 32 hex digits.
    #[serde(rename = "n")]
    pub nonce: String,
    /// The protocol revision negotiated with the client.
    #[serde(rename = "v")]
    pub protocol_version: String,
    /// Names of the capabilities the client declared (`sampling`, `roots`, ...).
    #[serde(rename = "c")]
    pub capabilities: Vec<String>,
    /// Digest of the identity that opened the session ([`crate::access::auth::Principal::owner_digest`]),
    /// so every replica binds an adopted session to its opener; absent without OAuth.
    #[serde(rename = "o", default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

impl Claims {
    /// The declared capabilities as an `initialize` `capabilities` object, each `{}`.
    pub fn capabilities_object(&self) -> Value {
        let map: Map<String, Value> = self
            .capabilities
            .iter()
            .map(|name| (name.clone(), Value::Object(Map::new())))
            .collect();
        Value::Object(map)
    }
}

/// Mints and verifies session ids with one key.
#[derive(Clone)]
pub struct SessionSigner {
    key: Vec<u8>,
}

impl std::fmt::Debug for SessionSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionSigner(<key>)")
    }
}

/// The key is too short to sign with.
#[derive(Debug, thiserror::Error)]
#[error("session key is {0} bytes; at least {MIN_KEY_BYTES} are required")]
pub struct ShortKey(pub usize);

impl SessionSigner {
    /// A signer with `key` (the bytes of the `sessionKeyEnv` variable).
    ///
    /// # Errors
    /// [`ShortKey`] when `key` is shorter than [`MIN_KEY_BYTES`].
    pub fn new(key: &[u8]) -> Result<Self, ShortKey> {
        if key.len() < MIN_KEY_BYTES {
            return Err(ShortKey(key.len()));
        }
        Ok(Self { key: key.to_vec() })
    }

    fn mac(&self) -> Hmac<Sha256> {
        <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key).expect("HMAC takes keys of any length")
    }

    /// A fresh id for a session that negotiated `protocol_version`, declared
    /// `client_capabilities` (an object; other shapes declare nothing) and belongs to the
    /// identity digest `owner`.
    pub fn mint(
        &self,
        protocol_version: &str,
        client_capabilities: &Value,
        owner: Option<&str>,
    ) -> String {
        let mut capabilities: Vec<String> = client_capabilities
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        capabilities.sort();
        let claims = Claims {
            nonce: uuid::Uuid::new_v4().simple().to_string(),
            protocol_version: protocol_version.to_owned(),
            capabilities,
            owner: owner.map(str::to_owned),
        };
        let encoded =
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).expect("claims serialize"));
        let mut mac = self.mac();
        mac.update(encoded.as_bytes());
        let tag = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        format!("{encoded}.{tag}")
    }

    /// The claims of `id` if this key signed it; `None` for anything else (wrong key, altered,
    /// malformed). The tag is compared in constant time.
    pub fn verify(&self, id: &str) -> Option<Claims> {
        let (encoded, tag) = id.split_once('.')?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        let mut mac = self.mac();
        mac.update(encoded.as_bytes());
        mac.verify_slice(&tag).ok()?;
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(encoded).ok()?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn signer(key: &str) -> SessionSigner {
        SessionSigner::new(key.as_bytes()).expect("long enough")
    }

    #[test]
    fn minted_id_verifies_with_the_same_key_and_carries_the_handshake() {
        let a = signer("0123456789abcdef-replica-key");
        let id = a.mint(
            "2025-06-18",
            &json!({"sampling": {}, "roots": {"listChanged": true}}),
            Some("0f1e2d3c4b5a69788796a5b4c3d2e1f0"),
        );
        assert!(id.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{id}");
        let claims = a.verify(&id).expect("own id verifies");
        assert_eq!(claims.protocol_version, "2025-06-18");
        assert_eq!(claims.capabilities, ["roots", "sampling"]);
        assert_eq!(
            claims.owner.as_deref(),
            Some("0f1e2d3c4b5a69788796a5b4c3d2e1f0")
        );
        assert_eq!(
            claims.capabilities_object(),
            json!({"roots": {}, "sampling": {}})
        );
        let b = signer("0123456789abcdef-replica-key");
        assert_eq!(b.verify(&id), Some(claims), "another replica, same key");
    }

    #[test]
    fn other_key_altered_or_malformed_ids_do_not_verify() {
        let a = signer("0123456789abcdef-replica-key");
        let id = a.mint("2025-06-18", &json!({}), None);
        assert!(signer("another-key-0123456789").verify(&id).is_none());
        let (claims, tag) = id.split_once('.').expect("two parts");
        let forged_claims = URL_SAFE_NO_PAD.encode(
            br#"{"n":"00000000000000000000000000000000","v":"2025-06-18","c":["sampling"]}"#,
        );
        assert!(a.verify(&format!("{forged_claims}.{tag}")).is_none());
        assert!(a.verify(claims).is_none());
        assert!(a.verify("").is_none());
        assert!(a.verify("not.base64!").is_none());
        assert!(
            a.verify(&uuid::Uuid::new_v4().simple().to_string())
                .is_none()
        );
    }

    #[test]
    fn ids_are_distinct_and_short_keys_are_refused() {
        let a = signer("0123456789abcdef-replica-key");
        assert_ne!(
            a.mint("2025-06-18", &json!({}), None),
            a.mint("2025-06-18", &json!({}), None)
        );
        assert!(SessionSigner::new(b"short").is_err());
    }
}
