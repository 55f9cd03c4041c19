//! The Secret `<name>-session-key`: the key every replica of an McpUpstream signs and checks
//! client session ids with, so a session issued by one replica is accepted by any other (field
//! case BR-35) and survives pod restarts.
//!
//! Created once with a fresh random key and never rewritten: [`crate::apply`] creates it and
//! takes "already exists" as done, so reconciles and operator restarts keep every session
//! valid. The operator cannot read, list or watch Secrets (issue 40, item 6;
//! [`crate::apply::session_key`]): a deleted session-key Secret is recreated with a new key at
//! the McpUpstream's next spec change or operator restart, and pods pick the new key up when
//! they restart, which ends the sessions signed with the old one. Type `Opaque`, name ending in
//! `-session-key` and the McpUpstream as controller owner are what the chart's admission policy
//! lets the operator create (docs/security.md).
//! Not responsible for: signing (the proxy, through `sessionKeyEnv` in its config).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, Secret, SecretKeySelector};

use super::owner::Owner;
use crate::error::BuildError;
use crate::render::SESSION_KEY_ENV;

/// Key of the session key inside the Secret.
pub const SESSION_KEY_KEY: &str = "key";
/// Random bytes in a session key (256 bits, the HMAC-SHA-256 block of entropy).
pub const SESSION_KEY_BYTES: usize = 32;

/// Name of the session-key Secret of the McpUpstream named `upstream_name`:
/// `<name>-session-key`.
pub fn name(upstream_name: &str) -> String {
    format!("{upstream_name}-session-key")
}

/// The session-key Secret of `owner` without its key: metadata (labels, owner reference) and
/// type `Opaque`. [`with_key`] fills it just before it is created.
pub(super) fn session_key(owner: &Owner) -> Secret {
    Secret {
        metadata: owner.child_metadata(name(&owner.name)),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}

/// `secret` holding `random` (the raw random bytes) under [`SESSION_KEY_KEY`], as lowercase hex:
/// [`SESSION_KEY_BYTES`] bytes give 64 characters. Hex, not the raw bytes, because the proxy
/// receives the key as an environment variable, and a NUL byte (likely among 32 random ones)
/// cannot be passed in one.
pub fn with_key(mut secret: Secret, random: &[u8]) -> Secret {
    let mut hex = String::with_capacity(random.len() * 2);
    for byte in random {
        // Writing to a String cannot fail.
        let _ = write!(hex, "{byte:02x}");
    }
    secret.data = Some(BTreeMap::from([(
        SESSION_KEY_KEY.to_owned(),
        ByteString(hex.into_bytes()),
    )]));
    secret
}

/// `secret` holding a fresh key of [`SESSION_KEY_BYTES`] bytes from the operating system's
/// random source ([`with_key`]). Called only when the Secret does not exist yet.
///
/// # Errors
/// [`BuildError::GenerateSessionKey`] when the operating system has no randomness to give.
pub fn with_fresh_key(secret: Secret) -> Result<Secret, BuildError> {
    let mut random = [0_u8; SESSION_KEY_BYTES];
    getrandom::fill(&mut random).map_err(|source| BuildError::GenerateSessionKey {
        name: secret.metadata.name.clone().unwrap_or_default(),
        source,
    })?;
    Ok(with_key(secret, &random))
}

/// The proxy's [`SESSION_KEY_ENV`] variable, filled by the kubelet from the Secret
/// `<upstream_name>-session-key`.
pub(super) fn session_key_env(upstream_name: &str) -> EnvVar {
    EnvVar {
        name: SESSION_KEY_ENV.to_owned(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: name(upstream_name),
                key: SESSION_KEY_KEY.to_owned(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_key_stores_random_bytes_as_lowercase_hex() {
        let secret = with_key(Secret::default(), &[0x00, 0xab, 0x10]);
        let data = secret.data.expect("data");
        assert_eq!(data[SESSION_KEY_KEY].0, b"00ab10".to_vec());
    }

    #[test]
    fn with_fresh_key_gives_64_hex_characters_and_differs_each_time() {
        let key = |secret: Secret| secret.data.expect("data")[SESSION_KEY_KEY].0.clone();
        let first = key(with_fresh_key(Secret::default()).expect("random"));
        let second = key(with_fresh_key(Secret::default()).expect("random"));
        assert_eq!(first.len(), 2 * SESSION_KEY_BYTES);
        assert!(first.iter().all(u8::is_ascii_hexdigit), "{first:?}");
        assert_ne!(first, second);
    }
}
